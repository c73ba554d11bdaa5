// trace_phase: the cost policy on a profile (a shipped trace or one the profiler
// wrote) against the transfer bound and the window bound (Note [Window bound] in
// policy/simulate.h), at the capacities of `oversub simulate --sweep N`. Prints a
// markdown table; which points are link-bound in both halves, and how far cost is
// from what any schedule could do. docs/design/policy.md, "How close to the bound".
// Usage: trace_phase [--pages[=first-use|last-use]] PROFILE [DEVICE] [N] [CAPACITY...]
//   (DEVICE: h100-pcie;
// N: 5; capacities in bytes instead of the sweep's). --pages: the swap engine's view,
// the profile's page model (Note [Page model] in policy/page_model.h),
// planned at policy::planning_capacity and with the reuse floor in whole pages; with
// =first-use or =last-use, its long-lived buffers laid out so.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>
#include <variant>

#include "policy/reuse_bound.h"
#include "policy/schedule.h"
#include "policy/simulate.h"
#include "profiler/profile_format.h"
#include "tools/simulate/device_model.h"
#include "policy/page_model.h"
#include "policy/profile_model.h"
#include "tools/simulate/what_if.h"

namespace {

using namespace oversub;

// ns as ms with three significant decimals below 10 ms.
std::string ms(double ns) {
  char text[32];
  std::snprintf(text, sizeof text, ns < 1e7 ? "%.3f" : "%.1f", ns / 1e6);
  return text;
}

std::string size_text(std::size_t bytes) {
  char text[32];
  const double b = static_cast<double>(bytes);
  if (bytes < (std::size_t{1} << 30)) {
    std::snprintf(text, sizeof text, "%.2f MiB", b / (1 << 20));
  } else {
    std::snprintf(text, sizeof text, "%.2f GiB", b / (1 << 30));
  }
  return text;
}

}  // namespace

int main(int argc, char** argv) {
  // --pages=first-use / --pages=last-use: the long-lived buffers laid out so (Note
  // [Long-lived layout from a profile] in policy/placement.h).
  const std::string flag = argc > 1 ? argv[1] : "";
  const bool pages = flag.rfind("--pages", 0) == 0;
  const policy::layout_kind layout = flag == "--pages=first-use" ? policy::layout_kind::first_use
                                    : flag == "--pages=last-use" ? policy::layout_kind::last_use
                                                                 : policy::layout_kind::allocation;
  if (pages) {
    --argc;
    ++argv;
  }
  if (argc < 2) {
    std::fprintf(stderr, "usage: trace_phase [--pages[=first-use|last-use]] PROFILE [DEVICE] [N] "
                 "[CAPACITY...]\n");
    return 2;
  }
  const std::string device_name = argc > 2 ? argv[2] : "h100-pcie";
  const unsigned points = argc > 3 ? static_cast<unsigned>(std::atoi(argv[3])) : 5;
  const auto device = tools::read_device_model(device_name, OVERSUB_DEVICE_MODELS_DIR);
  if (!device.error.empty()) {
    std::fprintf(stderr, "trace_phase: %s\n", device.error.c_str());
    return 1;
  }
  auto read = profiler::read_file(argv[1]);
  if (const auto* e = std::get_if<profiler::format_error>(&read)) {
    std::fprintf(stderr, "trace_phase: %s: %s\n", argv[1], e->message.c_str());
    return 1;
  }
  const policy::profile_model pm = policy::model_from_profile(
      std::get<profiler::profile>(read), device.value, policy::duration_source::automatic);
  if (!pm.error.empty()) {
    std::fprintf(stderr, "trace_phase: %s\n", pm.error.c_str());
    return 1;
  }
  const policy::page_model pg =
      pages ? policy::pages_of_profile(
                  std::get<profiler::profile>(read), pm.model, std::size_t{2} << 20, 256,
                  policy::long_lived_layout_order(std::get<profiler::profile>(read), layout))
            : policy::page_model{};
  if (!pg.error.empty()) {
    std::fprintf(stderr, "trace_phase: %s\n", pg.error.c_str());
    return 1;
  }
  const policy::iteration_model& m = pages ? pg.model : pm.model;
  const std::size_t page_bytes = pages ? pg.page_bytes : 0;
  const policy::cost_model& c = device.value.costs;
  const std::size_t live = policy::peak_live_bytes(m);
  std::printf("| profile | capacity | bound ms | window bound ms | reuse bound ms | cost ms |"
              " cost / bound | cost / window | cost / reuse | cost MiB in/out |"
              " reuse floor MiB in/out |\n");
  std::printf("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
  std::vector<std::size_t> caps;
  for (int a = 4; a < argc; ++a) caps.push_back(std::strtoull(argv[a], nullptr, 10));
  if (caps.empty()) caps = tools::sweep_capacities(tools::summarize(m, c), points);
  for (std::size_t given : caps) {
    const std::size_t cap = policy::planning_capacity(given, page_bytes);
    if (live <= cap) continue;
    // A launch over the room is planned as swap mode plans it (Note [Launches over the
    // room] in policy/iteration_model.h). The transfer and window bounds stay those of
    // every use (what such a launch reads in host memory crosses the link too); the reuse
    // floor, which needs each launch's buffers to fit, is the trimmed iteration's.
    policy::iteration_model trimmed;
    const policy::iteration_model& planned = policy::fitted_to_room(m, given, trimmed);
    const policy::schedule_result r = policy::plan_schedule(
        planned,
        policy::planning_capacity(given, page_bytes, 1,
                                  policy::largest_launch_footprint(planned).bytes),
        c, policy::policy_kind::cost);
    if (!r.ok()) continue;
    const policy::simulation sim = policy::simulate(planned, r.value, c);
    const auto t = static_cast<double>(sim.iteration_ns);
    const policy::reuse_floor reuse = policy::reuse_bound(planned, cap, c, page_bytes);
    const auto bound = static_cast<double>(policy::transfer_bound_ns(m, cap, c));
    const auto window = static_cast<double>(policy::window_bound_ns(m, cap, c));
    const auto mib = [](std::uint64_t b) { return static_cast<double>(b) / (1 << 20); };
    std::printf("| %s | %s | %s | %s | %s | %s | %.2fx | %.2fx | %.2fx | %.1f / %.1f |"
                " %.1f / %.1f |\n",
                argv[1], size_text(cap).c_str(), ms(bound).c_str(), ms(window).c_str(),
                ms(static_cast<double>(reuse.ns)).c_str(), ms(t).c_str(), t / bound, t / window,
                t / static_cast<double>(reuse.ns), mib(sim.h2d_bytes), mib(sim.d2h_bytes),
                mib(reuse.h2d_bytes), mib(reuse.d2h_bytes));
  }
  return 0;
}
