// The pool's setup from the options (see pool_setup.h).
#include "core/pool_setup.h"

#include <fmt/format.h>

#include <string>
#include <vector>

#include "common/log.h"
#include "common/units.h"
#include "core/mode_choice.h"
#include "policy/page_model.h"
#include "pool/host_memory.h"
#include "profiler/session.h"
#include "residency/swap_engine.h"

namespace oversub {

namespace {

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

// See Note [Long-lived layout from a profile] (policy/placement.h): with a saved profile,
// swap mode lays out its long-lived buffers by first or last use where the page model
// of its iteration (policy/page_model.h) predicts that faster at the capacity;
// the pool is told the sizes it expects (in allocation order) and where each goes.
void lay_out_from_profile(std::uint64_t limit_bytes, memory_query ask) {
  const profiler::profile* p = profiler::loaded_input();
  if (p == nullptr) return;
  std::vector<std::size_t> expected;
  for (std::size_t a : policy::long_lived_zone(*p)) {
    expected.push_back(static_cast<std::size_t>(p->allocations[a].bytes));
  }
  if (expected.empty()) return;
  const device_memory m = limit_bytes == 0 ? ask() : device_memory{};
  const std::uint64_t capacity =
      core::swap_capacity_of(limit_bytes, m.free_bytes, m.total_bytes);
  // The learner's stand-ins where the profile has no figure (Note [Launch durations] in
  // core/schedule_costs.cc), and a device memory rate for kernels it did not time.
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
  say(line);
  if (c.kind != policy::layout_kind::allocation) {
    core::set_long_lived_layout(std::move(expected), c.order);
  }
}

// OVERSUB_DEVICE_LIMIT as the swap capacity: a fraction of the real device's total,
// or bytes; 0 (none) lets the pool take the device's free memory less a headroom.
std::uint64_t resolve_swap_capacity(const device_limit& limit, memory_query ask) {
  if (limit.how == device_limit::kind::none) return 0;
  const std::uint64_t bytes = limit.resolve(ask().total_bytes);
  return bytes == ~std::uint64_t{0} ? 0 : bytes;
}

}  // namespace

// See Note [Swap needs host-located VMM] in core/device_pool.cc: swap mode on a device
// that cannot map host memory runs as um, or, without managed memory, as pool.
void fall_back_without_host_vmm() {
  const config& cfg = current_config();
  if (cfg.mode != run_mode::swap || !core::available() || core::host_vmm_supported(0)) return;
  if (core::managed_memory_supported(0)) {
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

core::pool_settings pool_settings_for(const config& cfg, memory_query ask) {
  core::pool_settings settings{cfg.pool == pool_kind::planned, cfg.pool_large_bytes,
                               resolve_host_budget(cfg.host)};
  if (cfg.mode >= run_mode::swap) {
    // See Note [Choosing the mode] in core/mode_choice.h.
    const run_mode mode = cfg.mode == run_mode::automatic
                              ? resolve_auto_mode(resolve_swap_capacity(cfg.limit, ask), ask)
                              : cfg.mode;
    if (mode < run_mode::swap) return settings;  // auto on a device that can move nothing
    settings.swap = mode == run_mode::swap;
    settings.um = mode == run_mode::um;
    settings.um_naive = cfg.policy == swap_policy::naive;
    settings.swap_capacity_bytes = resolve_swap_capacity(cfg.limit, ask);
    settings.mover_thread = cfg.mover_thread;
    const std::uint64_t page = residency::swap_config{}.page_bytes;
    if (settings.swap && settings.swap_capacity_bytes != 0 && settings.swap_capacity_bytes < page) {
      // The pages get no device memory at all: every call runs from host memory.
      log::warn("OVERSUB_DEVICE_LIMIT gives swap mode {} ({} bytes), less than one page: swap "
                "mode needs at least 1 page ({} bytes) of device memory, and without it every "
                "call's memory is read from host memory over the link, which is very slow. Set "
                "OVERSUB_DEVICE_LIMIT to at least {} bytes.",
                format_bytes(settings.swap_capacity_bytes), settings.swap_capacity_bytes, page,
                page);
    }
    if (settings.swap) {
      try {
        lay_out_from_profile(settings.swap_capacity_bytes, ask);
      } catch (...) {  // out of memory: no layout
      }
    }
  }
  return settings;
}

}  // namespace oversub
