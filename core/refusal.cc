// The one refusal (see Note [One refusal message] in core/refusal.h).
#include "core/refusal.h"

#include <fmt/format.h>

#include <atomic>

#include "common/log.h"
#include "common/options.h"
#include "common/stats.h"
#include "common/units.h"
#include "core/device_pool.h"
#include "pool/driver_api.h"
#include "residency/swap_engine.h"

namespace oversub {

namespace {

std::atomic<bool> g_refusal_logged{false};

std::uint64_t free_of(std::uint64_t capacity, std::uint64_t held) {
  return capacity > held ? capacity - held : 0;
}

// What the call asked for, in PyTorch's words where it is an allocation.
std::string asked(const refusal& r) {
  switch (r.kind) {
    case refusal_kind::resident_too_large:
    case refusal_kind::resident_no_room:
    case refusal_kind::host_budget:
      if (r.asked == 0) return "It needs its memory resident";
      return fmt::format("It needs {} resident at once", format_bytes(r.asked));
    default: return fmt::format("Tried to allocate {}", format_bytes(r.asked));
  }
}

}  // namespace

std::string refusal_message(const refusal& r, const refusal_figures& f) {
  const std::string head =
      fmt::format("{} refused on device {}: out of memory. {}. ", r.call, r.device, asked(r));
  const std::string tail = r.driver_caller ? "Returning CUDA_ERROR_OUT_OF_MEMORY."
                                           : "Returning cudaErrorMemoryAllocation.";
  if (f.swap && f.limit_bytes != 0 && f.limit_bytes < f.page_bytes) {
    // The capacity holds not one page: nothing can be made resident at all.
    return head + fmt::format("OVERSUB_DEVICE_LIMIT={} gives device {} less than one page: "
                              "swap mode needs at least 1 page ({} bytes) of device memory. {} "
                              "Set OVERSUB_DEVICE_LIMIT to at least {} bytes.",
                              f.limit_bytes, r.device, f.page_bytes, tail, f.page_bytes);
  }
  switch (r.kind) {
    case refusal_kind::device_limit:
      return head + fmt::format(
                        "Device {} has a virtual capacity of {} (OVERSUB_DEVICE_LIMIT) of which "
                        "{} is free; oversub holds {} in the application's live allocations. {} "
                        "Raise OVERSUB_DEVICE_LIMIT, or run with OVERSUB_MODE=swap to keep the "
                        "limit on what is resident and move the rest to host memory.",
                        r.device, format_bytes(r.capacity),
                        format_bytes(free_of(r.capacity, r.held)), format_bytes(r.held), tail);
    case refusal_kind::pool_full:
    case refusal_kind::pool_no_driver:
      return head + fmt::format(
                        "The pool could not map more device memory{}: the device has {} free{}; "
                        "oversub's pool maps {}, {} of it in use by the application. {} Run with "
                        "OVERSUB_MODE=swap to move pages to host memory past the device's "
                        "memory, or lower the job's footprint or free device memory.",
                        r.kind == refusal_kind::pool_no_driver
                            ? " (the CUDA driver is unavailable)"
                            : "",
                        f.device_total != 0 ? format_bytes(f.device_free) : "an unknown amount",
                        f.device_total != 0 ? " of " + format_bytes(f.device_total) : "",
                        format_bytes(r.held), format_bytes(f.pool_used), tail);
    case refusal_kind::resident_too_large:
    case refusal_kind::resident_no_room:
    case refusal_kind::host_budget: {
      const char* capacity = f.swap ? "swap capacity" : "um capacity";
      const char* why =
          r.kind == refusal_kind::host_budget
              ? "Evicting needs host memory past the host budget (OVERSUB_HOST_LIMIT). "
              : r.kind == refusal_kind::resident_no_room
                    ? "No room could be made (every page is in use by queued work). "
                    : "";
      const char* advice = r.kind == refusal_kind::host_budget
                               ? "Raise OVERSUB_HOST_LIMIT, or lower the batch size."
                               : "Raise OVERSUB_DEVICE_LIMIT or lower the batch size.";
      return head + fmt::format("Device {} has a {} of {}; oversub holds {} of the "
                                "application's memory, on the device or in host memory. {}{} {}",
                                r.device, capacity, format_bytes(r.capacity),
                                format_bytes(r.held), why, tail, advice);
    }
    case refusal_kind::foreign_vmm:
      return head + fmt::format(
                        "Device {} has a swap capacity of {} of which {} is free; the "
                        "application already maps {} of device memory itself, which oversub "
                        "never moves, and this would leave no room for oversub's pages. {} With "
                        "PyTorch, set PYTORCH_CUDA_ALLOC_CONF=expandable_segments:False (its "
                        "allocations then reach oversub as cudaMalloc), or raise "
                        "OVERSUB_DEVICE_LIMIT.",
                        r.device, format_bytes(r.capacity),
                        format_bytes(free_of(r.capacity, r.held)), format_bytes(r.held), tail);
  }
  return head + tail;
}

cudaError_t refuse(refusal r) noexcept {
  refusal_figures f;
  stats::counters& c = stats::global();
  const config& cfg = current_config();
  if (cfg.mode == run_mode::swap) {
    f.swap = true;
    f.page_bytes = residency::swap_config{}.page_bytes;
    // What OVERSUB_DEVICE_LIMIT gives the pages (a fraction resolves to more than a page
    // on any device; without a limit the device's free memory is the capacity).
    f.limit_bytes = cfg.limit.how == device_limit::kind::bytes ? cfg.limit.bytes : 0;
  }
  switch (r.kind) {
    case refusal_kind::device_limit: break;
    case refusal_kind::pool_full:
    case refusal_kind::pool_no_driver: c.pool_refusals.count(); break;
    default: c.swap_refusals.count(); break;
  }
  try {  // the figures; a lock that cannot be taken leaves them out
    switch (r.kind) {
      case refusal_kind::device_limit: break;
      case refusal_kind::pool_full:
      case refusal_kind::pool_no_driver: {
        const pool::resource_stats s = core::device_stats(r.device);
        r.held = s.mapped_bytes;
        f.pool_used = s.used_bytes;
        const pool::driver_table& d = pool::driver();
        std::size_t free_bytes = 0;
        std::size_t total_bytes = 0;
        if (d.cuMemGetInfo != nullptr &&
            d.cuMemGetInfo(&free_bytes, &total_bytes) == CUDA_SUCCESS) {
          f.device_free = free_bytes;
          f.device_total = total_bytes;
        }
        break;
      }
      case refusal_kind::resident_too_large:
      case refusal_kind::resident_no_room:
      case refusal_kind::host_budget:
        r.capacity = core::device_residency_capacity(r.device);
        r.held = core::device_stats(r.device).used_bytes;
        break;
      case refusal_kind::foreign_vmm:
        r.capacity = core::device_residency_capacity(r.device);
        r.held = c.foreign_vmm_bytes.current();
        break;
    }
  } catch (...) {
  }
  const bool first = !g_refusal_logged.exchange(true, std::memory_order_relaxed);
  const log::level level = first ? log::level::warn : log::level::info;
  try {
    log::emit(level, "{}", refusal_message(r, f));
  } catch (...) {  // out of memory for the message: its head only
    log::emit(level, "{} of {} bytes refused on device {}: out of memory", r.call, r.asked,
              r.device);
  }
  return cudaErrorMemoryAllocation;
}

}  // namespace oversub
