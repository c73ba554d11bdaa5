// trace_phase: the cost policy on a profile (a shipped trace or one the profiler
// wrote) against the transfer bound and the window bound (Note [Window bound] in
// policy/simulate.h), at the capacities of `oversub simulate --sweep N`. Prints a
// markdown table; which points are link-bound in both halves, and how far cost is
// from what any schedule could do. docs/policy.md, "How close to the bound".
// Usage: trace_phase PROFILE [DEVICE] [N]   (DEVICE: h100-pcie; N: 5)
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <variant>

#include "policy/schedule.h"
#include "policy/simulate.h"
#include "profiler/profile_format.h"
#include "tools/simulate/device_model.h"
#include "tools/simulate/profile_model.h"
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
  if (argc < 2) {
    std::fprintf(stderr, "usage: trace_phase PROFILE [DEVICE] [N]\n");
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
  const tools::profile_model pm = tools::model_from_profile(
      std::get<profiler::profile>(read), device.value, tools::duration_source::automatic);
  if (!pm.error.empty()) {
    std::fprintf(stderr, "trace_phase: %s\n", pm.error.c_str());
    return 1;
  }
  const policy::iteration_model& m = pm.model;
  const policy::cost_model& c = device.value.costs;
  const std::size_t live = policy::peak_live_bytes(m);
  std::printf("| profile | capacity | bound ms | window bound ms | cost ms | cost / bound |"
              " cost / window |\n");
  std::printf("|---|---:|---:|---:|---:|---:|---:|\n");
  for (std::size_t cap : tools::sweep_capacities(tools::summarize(m, c), points)) {
    if (live <= cap) continue;
    const policy::schedule_result r = policy::plan_schedule(m, cap, c, policy::policy_kind::cost);
    if (!r.ok()) continue;
    const auto t = static_cast<double>(policy::simulate(m, r.value, c).iteration_ns);
    const auto bound = static_cast<double>(policy::transfer_bound_ns(m, cap, c));
    const auto window = static_cast<double>(policy::window_bound_ns(m, cap, c));
    std::printf("| %s | %s | %s | %s | %s | %.2fx | %.2fx |\n", argv[1], size_text(cap).c_str(),
                ms(bound).c_str(), ms(window).c_str(), ms(t).c_str(), t / bound, t / window);
  }
  return 0;
}
