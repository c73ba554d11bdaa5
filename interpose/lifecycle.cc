// Load, fork and unload of liboversub.so.
//
// At load (a constructor, before main): the options are parsed, which ends the
// process with status 2 on a malformed value; the effective configuration is
// printed when OVERSUB_VERBOSE asks; the fork handler is registered. A hook that
// runs before this (another library's constructor) initialises the same way.
//
// After fork, in the child: every hook passes through and no stats are printed.
// The handler only stores an atomic; no lock of ours is ever held across fork
// (counters are atomics, the tracker's mutex is never held across a CUDA call and
// the child never takes it).
//
// At unload (a destructor, during exit): hooks switch to pass-through, then the
// stats are printed from the counters alone; CUDA is not called.
#include <pthread.h>
#include <unistd.h>

#include <atomic>

#include <fmt/format.h>

#include "common/log.h"
#include "common/options.h"
#include "common/stats.h"
#include "interpose/driver_hooks.h"
#include "interpose/real.h"
#include "profiler/session.h"

namespace oversub::interpose {

namespace {

std::atomic<bool> g_forked_child{false};

void on_fork_child() {
  g_forked_child.store(true, std::memory_order_relaxed);
  enter_passthrough();
}

void print_configuration(const config& cfg) {
  log::write_raw(fmt::format("oversub: liboversub loaded in pid {}; effective configuration:\n",
                             ::getpid()));
  for (const std::string& line : describe_config(cfg)) {
    log::write_raw(fmt::format("oversub:   {}\n", line));
  }
}

}  // namespace

// The runtime hooks' names, then the driver hooks' (driver ids count from
// hook_count, driver_hooks.cc).
static const char* const* entry_point_names() noexcept {
  static const char* names[stats::max_entry_points] = {};
  static const bool filled = [] {
    std::size_t n = 0;
    for (std::size_t i = 0; i < hook_count && n < stats::max_entry_points; ++i) {
      names[n++] = hook_names[i];
    }
    const char* const* driver = driver_hook_names();
    for (std::size_t i = 0; i < driver_hook_names_count() && n < stats::max_entry_points; ++i) {
      names[n++] = driver[i];
    }
    return true;
  }();
  (void)filled;
  return names;
}

process_state initialise() noexcept {
  const config& cfg = current_config();
  const process_state wanted =
      cfg.mode == run_mode::off ? process_state::passthrough : process_state::tracking;
  process_state expected = process_state::uninitialised;
  if (g_state.compare_exchange_strong(expected, wanted, std::memory_order_acq_rel)) {
    stats::set_entry_points(entry_point_names(), hook_count + driver_hook_names_count());
    ::pthread_atfork(nullptr, nullptr, &on_fork_child);
    if (cfg.verbose) print_configuration(cfg);
    if (!cfg.profile_in.empty()) profiler::load_input(cfg.profile_in);
    return wanted;
  }
  return expected;
}

namespace {

__attribute__((constructor)) void on_load() { initialise(); }

__attribute__((destructor)) void on_unload() {
  enter_passthrough();
  if (g_forked_child.load(std::memory_order_relaxed)) return;
  stats::report(current_config());
}

}  // namespace

}  // namespace oversub::interpose
