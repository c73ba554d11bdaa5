// OVERSUB_MODE=auto resolved at start (see mode_choice.h).
#include "core/mode_choice.h"

#include <fmt/format.h>

#include <algorithm>
#include <string>

#include "common/units.h"
#include "core/device_pool.h"
#include "policy/mode_choice.h"
#include "policy/profile_model.h"
#include "profiler/session.h"

namespace oversub {

namespace {

double ms(std::uint64_t ns) { return static_cast<double>(ns) / 1e6; }

// The mode a loaded profile predicts faster, and the line saying so.
run_mode from_profile(const profiler::profile& p, std::uint64_t limit_bytes, memory_query ask,
                      std::string& line) {
  const device_memory m = limit_bytes == 0 ? ask() : device_memory{};
  const std::uint64_t capacity = core::swap_capacity_of(limit_bytes, m.free_bytes, m.total_bytes);
  // The stand-ins of Note [Launch durations] (core/schedule_costs.cc) and of the layout
  // (pool_setup.cc): 25 GB/s, 10 us per copy, 2 TB/s device memory; a managed fault
  // and a page's remapping as an H200 gave them (policy::mode_costs).
  // See Note [Do VMM calls wait?] in core/device_pool.cc.
  policy::mode_costs costs;
  costs.vmm_waits = core::vmm_calls_wait(0);
  // See Note [The room um's driver has] in policy/mode_choice.h.
  costs.managed_room_bytes = limit_bytes != 0 ? limit_bytes : m.free_bytes;
  std::string waits =
      costs.vmm_waits ? "; this device's VMM calls wait for its queued work, so swap's remaps "
                        "cannot overlap it (measured at start)"
                      : "";
  // Rates measured at start, as the line gives them.
  const auto measured = [](const char* what, const core::link_rates& l) {
    return fmt::format("; {} {:.1f} GB/s to the device and {:.1f} GB/s to the host (measured "
                       "at start)",
                       what, l.to_device / 1e9, l.to_host / 1e9);
  };
  // See Note [Managed migration rates, measured] in core/device_pool.cc.
  if (const core::managed_rates m = core::probe_managed_rates(0); m.to_device > 0) {
    costs.managed_to_device_bytes_per_s = m.to_device;
    costs.managed_to_host_bytes_per_s = m.to_host;
    waits += measured("managed memory migrates at", m);
    costs.managed_discards = m.discards;
    if (m.discards) {
      costs.managed_discard_page_ns =
          std::max<std::uint64_t>(static_cast<std::uint64_t>(m.discard_page_ns + 0.5), 1);
      waits += fmt::format(", a discard {:.2f} us per 64 KiB", m.discard_page_ns / 1e3);
    } else {
      waits += ", the driver discards nothing";
    }
  }
  // Where the profile has no link rates (taken without CUPTI, or from a job that
  // copied only a few bytes), the rates of pinned copies timed at start (Note [Pinned
  // rates at start] in core/device_pool.cc), as swap mode's learner takes them.
  if (policy::profile_link_rate(p.device.h2d_bytes_per_s) <= 0 &&
      policy::profile_link_rate(p.device.d2h_bytes_per_s) <= 0) {
    if (const core::link_rates l = core::pinned_copy_rates(0); l.to_device > 0) {
      costs.timed_h2d_bytes_per_s = l.to_device;
      costs.timed_d2h_bytes_per_s = l.to_host;
      waits += measured("the profile has no link rates: pinned copies ran at", l);
    }
  }
  const policy::mode_prediction r =
      policy::predict_modes(p, static_cast<std::size_t>(capacity), costs);
  const std::string& path = current_config().profile_in;
  if (!r.swap_error.empty() && !r.um_error.empty()) {
    line = fmt::format("mode auto -> swap (no prediction from the profile {}: {}; swap learns "
                       "the iteration as the job runs)",
                       path, r.swap_error);
    return run_mode::swap;
  }
  const run_mode chosen = r.um_faster ? run_mode::um : run_mode::swap;
  const std::string at =
      fmt::format("at {}, from the profile {}{}", format_bytes(capacity), path, waits);
  if (!r.swap_error.empty() || !r.um_error.empty()) {
    line = fmt::format("mode auto -> {} (predicted {:.3f} ms per iteration; {} not predicted: "
                       "{}; {})",
                       to_string(chosen), ms(r.um_faster ? r.um_ns : r.swap_ns),
                       r.um_faster ? "swap" : "um", r.um_faster ? r.swap_error : r.um_error, at);
    return chosen;
  }
  line = fmt::format("mode auto -> {} (predicted {:.3f} ms per iteration against {} {:.3f} ms, "
                     "{:.3f} ms with enough memory; {})",
                     to_string(chosen), ms(r.um_faster ? r.um_ns : r.swap_ns),
                     r.um_faster ? "swap" : "um", ms(r.um_faster ? r.swap_ns : r.um_ns),
                     ms(r.unlimited_ns), at);
  return chosen;
}

}  // namespace

// Note [Without a profile, um]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// Without a profile nothing predicts either mode, and what decides is how each runs
// before it has learned the iteration. On an H200 (driver 580), PyTorch's CNN of
// scripts/gpu/torch_train.py at half its peak ran at 1.00x of its unlimited speed
// under um and at 0.02x under swap (docs/gpu-results.md): on demand, swap moved one
// page per batch from the launching thread, each with a host wait for the GPU, and a
// loop larger than the capacity evicts every page before its next use. um's faults
// are served by the device while the host goes on. Swap's mover now makes those moves,
// in batches from its first ones (Note [Batches before the plan] in
// residency/swap_engine.h): on simgpu's H200 model ResNet-50 at 1/8, 3x, through a
// caching allocator, runs its iterations before the schedule at 3.0x-5.2x T_unl where
// it ran them at 7.3x-8.7x. But a launch still waits for every page it misses, and no
// GPU has run it since. So auto takes um where the device has concurrent managed
// access, and swap only where it has not.
run_mode resolve_auto_mode(std::uint64_t limit_bytes, memory_query ask) {
  const config& cfg = current_config();
  run_mode chosen = run_mode::swap;
  std::string line;
  if (!core::available()) {
    // The pool says the driver could not be loaded (interpose/pool_hooks.cc).
    line = "mode auto -> swap (the CUDA driver could not be loaded)";
  } else if (!core::host_vmm_supported(0)) {
    // See Note [Swap needs host-located VMM] in core/device_pool.cc.
    chosen = core::managed_memory_supported(0) ? run_mode::um : run_mode::pool;
    line = chosen == run_mode::um
               ? "mode auto -> um (this device or driver cannot map host memory "
                 "(CU_DEVICE_ATTRIBUTE_HOST_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED is 0), "
                 "which swap needs)"
               : "mode auto -> pool (this device or driver supports neither host-located VMM "
                 "memory, which swap needs, nor managed memory, which um needs: nothing can "
                 "be moved off the device)";
  } else if (const profiler::profile* p = profiler::loaded_input()) {
    try {
      chosen = from_profile(*p, limit_bytes, ask, line);
    } catch (...) {  // out of memory: no prediction
      line = "mode auto -> swap (the prediction ran out of memory)";
    }
    if (chosen == run_mode::um && !core::managed_memory_supported(0)) {
      chosen = run_mode::swap;
      line += "; swap, as this device or driver has no managed memory";
    }
  } else {
    // See Note [Without a profile, um] below.
    const bool um = core::concurrent_managed_access(0);
    chosen = um ? run_mode::um : run_mode::swap;
    const std::string why =
        um ? "um: the device migrates pages on demand while um learns the iteration, where "
             "swap would wait for every page it misses until then"
           : "swap learns the iteration as the job runs and moves pages on demand until then; "
             "this device has no concurrent managed access for um";
    if (!cfg.profile.empty() && cfg.profile_out == cfg.profile && cfg.profile_in.empty()) {
      line = fmt::format("mode auto -> {} (no profile yet: {}; this run writes its profile to "
                         "{} (OVERSUB_PROFILE), so that the next run can choose)",
                         to_string(chosen), why, cfg.profile);
    } else {
      line = fmt::format("mode auto -> {} (no profile{}: {}; set OVERSUB_PROFILE=path so that "
                         "the next run can choose)",
                         to_string(chosen),
                         cfg.profile_in.empty() ? "" : " (" + cfg.profile_in + " refused)", why);
    }
  }
  say(line);
  set_effective_mode(chosen);
  return chosen;
}

}  // namespace oversub
