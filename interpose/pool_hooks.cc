// Pool-mode handlers of the memory hooks (see pool_hooks.h).
//
// Note [The pool behind the tracker]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// The tracker stays the source of truth for the
// application's live allocations and the virtual capacity: a pool allocation is
// reserved against OVERSUB_DEVICE_LIMIT first and recorded after, exactly as in track
// mode, and a free is forgotten first. Only the real allocator is replaced. A
// pointer the pool does not hold (never ours, freed twice, made before pool mode
// could start) goes to the real cudaFree and CUDA's answer is returned.
//
// Note [A context for the pool]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// The real cudaMalloc would have created the
// runtime's context and made it current on this thread; the pool calls the driver
// directly, so on a thread's first pool allocation (and after it changes device) the
// real cudaFree(nullptr) is called, the usual way to have the runtime do that.
#include "interpose/pool_hooks.h"

#include <mutex>

#include "common/log.h"
#include "common/options.h"
#include "common/stats.h"
#include "common/tracker.h"
#include "common/units.h"
#include "interpose/real.h"
#include "core/device_pool.h"
#include "pool/host_pool.h"
#include "profiler/session.h"
#include "policy/page_model.h"

namespace oversub::interpose {

std::atomic<int> g_pool_on{-1};

namespace {

constexpr std::size_t pitch_alignment_bytes = 512;  // cudaMallocPitch's row alignment

__attribute__((tls_model("initial-exec"))) thread_local int t_context_device = -1;
std::atomic<bool> g_refusal_logged{false};

std::uint64_t resolve_host_budget(const host_limit& h) {
  switch (h.value.how) {
    case device_limit::kind::none: return ~std::uint64_t{0};
    case device_limit::kind::bytes: return h.value.bytes;
    case device_limit::kind::fraction:
      return static_cast<std::uint64_t>(h.value.fraction *
                                        static_cast<double>(pool::physical_memory_bytes()));
  }
  return 0;
}

void ensure_context(int device) {
  if (t_context_device == device) return;
  call_real<hook_id::cudaFree>(hook_id::cudaFree, nullptr);
  t_context_device = device;
}

cudaError_t refuse(call_site at, int device, std::size_t bytes, pool::pool_errc why) {
  stats::global().pool_refusals.count();
  const bool first = !g_refusal_logged.exchange(true, std::memory_order_relaxed);
  const pool::resource_stats s = pool::device_stats(device);
  log::emit(first ? log::level::warn : log::level::info,
            "{} of {} refused on device {}: the pool could not map more device memory "
            "({} mapped, {} in use by the application{}); returning "
            "cudaErrorMemoryAllocation. Lower the job's footprint or free device memory.",
            at.name, format_bytes(bytes), device, format_bytes(s.mapped_bytes),
            format_bytes(s.used_bytes),
            why == pool::pool_errc::driver_missing ? "; the CUDA driver is unavailable" : "");
  return cudaErrorMemoryAllocation;
}

// See Note [Long-lived layout from a profile] (policy/placement.h): with a saved profile,
// swap mode lays out its long-lived buffers by first or last use where the page model
// of its iteration (policy/page_model.h) predicts that faster at the capacity;
// the pool is told the sizes it expects (in allocation order) and where each goes.
void lay_out_from_profile(std::uint64_t limit_bytes) {
  const profiler::profile* p = profiler::loaded_input();
  if (p == nullptr) return;
  std::vector<std::size_t> expected;
  for (std::size_t a : policy::long_lived_zone(*p)) {
    expected.push_back(static_cast<std::size_t>(p->allocations[a].bytes));
  }
  if (expected.empty()) return;
  size_t free_bytes = 0;
  size_t total_bytes = 0;
  if (limit_bytes == 0) {
    call_real<hook_id::cudaMemGetInfo>(hook_id::cudaMemGetInfo, &free_bytes, &total_bytes);
  }
  const std::uint64_t capacity = pool::swap_capacity_of(limit_bytes, free_bytes, total_bytes);
  // The learner's stand-ins where the profile has no figure (Note [Launch durations] in
  // swap_schedule.cc), and a device memory rate for kernels it did not time.
  const policy::layout_choice c =
      policy::choose_long_lived_layout(*p, static_cast<std::size_t>(capacity), 25e9, 10'000, 2e12);
  std::size_t bytes = 0;
  for (std::size_t b : expected) bytes += b;
  const auto ms = [&](policy::layout_kind k) {
    return static_cast<double>(c.predicted_ns[static_cast<int>(k)]) / 1e6;
  };
  const std::string line =
      !c.error.empty()
          ? fmt::format("pool: the profile's {} long-lived buffers keep their order (no "
                        "prediction: {})",
                        expected.size(), c.error)
          : fmt::format("pool: the profile's {} long-lived buffers ({}) laid out in {}; "
                        "predicted iteration in {}: {:.3f} ms in allocation order, {:.3f} by "
                        "first use, {:.3f} by last use",
                        expected.size(), format_bytes(bytes), policy::to_string(c.kind),
                        format_bytes(capacity), ms(policy::layout_kind::allocation),
                        ms(policy::layout_kind::first_use), ms(policy::layout_kind::last_use));
  if (current_config().verbose) log::write_raw("oversub: " + line + "\n");
  else log::info("{}", line);
  if (c.kind != policy::layout_kind::allocation) {
    pool::set_long_lived_layout(std::move(expected), c.order);
  }
}

// OVERSUB_DEVICE_LIMIT as the swap capacity: a fraction of the real device's total,
// or bytes; 0 (none) lets the pool take the device's free memory less a headroom.
std::uint64_t resolve_swap_capacity(const device_limit& limit) {
  if (limit.how == device_limit::kind::none) return 0;
  size_t free_bytes = 0;
  size_t total_bytes = 0;
  call_real<hook_id::cudaMemGetInfo>(hook_id::cudaMemGetInfo, &free_bytes, &total_bytes);
  const std::uint64_t bytes = limit.resolve(total_bytes);
  return bytes == ~std::uint64_t{0} ? 0 : bytes;
}

}  // namespace

// See Note [Swap needs host-located VMM] in core/device_pool.cc: swap mode on a device
// that cannot map host memory runs as um, or, without managed memory, as pool.
void fall_back_without_host_vmm() {
  const config& cfg = current_config();
  if (cfg.mode != run_mode::swap || !pool::available() || pool::host_vmm_supported(0)) return;
  if (pool::managed_memory_supported(0)) {
    log::write_raw(
        "oversub: OVERSUB_MODE=swap needs host-located VMM memory, and this device or "
        "driver does not support it (CU_DEVICE_ATTRIBUTE_HOST_VIRTUAL_MEMORY_MANAGEMENT_"
        "SUPPORTED is 0): running as OVERSUB_MODE=um (managed memory) instead\n");
    set_effective_mode(run_mode::um);
  } else {
    log::write_raw(
        "oversub: OVERSUB_MODE=swap needs host-located VMM memory "
        "(CU_DEVICE_ATTRIBUTE_HOST_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED) and OVERSUB_MODE=um "
        "needs managed memory (CU_DEVICE_ATTRIBUTE_MANAGED_MEMORY); this device or driver "
        "has neither, so nothing can be moved off the device: running as OVERSUB_MODE=pool, "
        "and allocations past the device's memory fail with CUDA's out-of-memory error\n");
    set_effective_mode(run_mode::pool);
  }
}

bool decide_pool_mode() noexcept {
  static std::once_flag once;
  std::call_once(once, [] {
    fall_back_without_host_vmm();
    const config& cfg = current_config();
    bool on = false;
    if (cfg.mode >= run_mode::pool) {
      pool::pool_settings settings{cfg.pool == pool_kind::planned, cfg.pool_large_bytes,
                                   resolve_host_budget(cfg.host)};
      if (cfg.mode >= run_mode::swap) {
        settings.swap = cfg.mode == run_mode::swap;
        settings.um = cfg.mode == run_mode::um;
        settings.um_naive = cfg.policy == swap_policy::naive;
        settings.swap_capacity_bytes = resolve_swap_capacity(cfg.limit);
        if (settings.swap) {
          try {
            lay_out_from_profile(settings.swap_capacity_bytes);
          } catch (...) {  // out of memory: no layout
          }
        }
      }
      pool::configure(settings);
      on = pool::available();
      if (!on) log::warn("OVERSUB_MODE={}: the CUDA driver could not be loaded; tracking only",
                         to_string(cfg.mode));
    }
    g_pool_on.store(on ? 1 : 0, std::memory_order_release);
  });
  return g_pool_on.load(std::memory_order_acquire) == 1;
}

cudaError_t pool_serve(call_site at, int device, void** out, size_t size,
                       cudaStream_t stream) noexcept {
  if (at.runtime) ensure_context(device);
  const pool::allocation_result r =
      pool::device_allocate(device, size, driver_stream(at.per_thread, stream));
  if (!r) return refuse(at, device, size, r.error);
  *out = r.ptr;
  stats::global().pool_allocations.count();
  return cudaSuccess;
}

size_t pool_pitch(size_t width) noexcept {
  const size_t row = (width + pitch_alignment_bytes - 1) / pitch_alignment_bytes *
                     pitch_alignment_bytes;
  return row < width ? 0 : row;
}

pool_free_result pool_free(call_site at, void* ptr, cudaStream_t stream, bool async) noexcept {
  if (ptr == nullptr || !pool_mode()) return pool_free_result::not_tracked;
  tracker& t = core();
  const auto base = reinterpret_cast<std::uintptr_t>(ptr);
  const std::optional<allocation> a = t.find(base);
  if (!a || a->base != base) return pool_free_result::not_tracked;
  const CUstream s = async ? driver_stream(at.per_thread, stream) : pool::no_stream;
  // Forget first: another thread may get the same address the moment the pool has it.
  if (!t.forget(base)) return pool_free_result::not_tracked;
  // Ours to track, not the pool's (made by the real allocator): CUDA frees it.
  if (!pool::device_deallocate(a->device, ptr, a->bytes, s)) return pool_free_result::forgotten;
  return pool_free_result::freed;
}

std::size_t pool_cached_bytes(int device) noexcept {
  if (!pool_mode()) return 0;
  return pool::device_cached_bytes(device);
}

void pool_note_work(CUstream stream) noexcept { pool::note_work(stream); }

}  // namespace oversub::interpose
