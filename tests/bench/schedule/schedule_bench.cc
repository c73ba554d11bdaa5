// schedule_bench: the residency policies in the what-if simulator, on VGG-like and
// ResNet-like synthetic iterations at 1.5x, 3x and 10x oversubscription, with the
// H100-PCIe and Titan X device models. Prints a markdown table (virtual time, not a
// timed test) and which of issue 7's goals hold:
// - cost within 1.15x of the transfer bound at every point;
// - where the bound is T_unlimited, cost at most 1.10x T_unlimited;
// - cost faster than vdnn-all, lru and um-naive at every point;
// - um driven by the schedule at least 3x faster than naive um at 3x. The cost
//   schedule stands in for it: simgpu's cuMemPrefetchAsync moves managed pages at
//   the pinned copy rate without fault cost, as the simulator's copies do.
// Also printed: the window bound.
// Usage: schedule_bench [--batch N] (default 32). Exit status 0 even when a goal
// fails: the table is the result.
//
// The window bound (Note [Window bound] in policy/simulate.h) is a lower bound for
// every schedule: where it is above 1.15x the transfer bound, no policy can meet the
// goal, and cost's time over it says how much a better policy could still gain.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "policy/reuse_bound.h"
#include "policy/schedule.h"
#include "policy/simulate.h"
#include "synthetic_iterations.h"

namespace {

using namespace oversub::policy;

double gb(std::uint64_t bytes) { return static_cast<double>(bytes) / 1e9; }

std::string ratio_text(double r) {
  char text[32];
  std::snprintf(text, sizeof text, "%.3fx", r);
  return text;
}

struct goal_tally {
  int points = 0, within_bound = 0, hidden_points = 0, hidden_ok = 0, fastest = 0;
  double worst_vs_window = 0;
  double worst_vs_lower = 0;             // against the larger of the window and reuse bounds
  std::vector<std::string> unreachable;  // that larger one > 1.15x the transfer bound
  int um_points = 0, um_ok = 0;
  std::vector<std::string> um_ratios;  // um-naive time / schedule time at 3x
  std::vector<std::string> misses;
};

}  // namespace

int main(int argc, char** argv) {
  int batch = 32;
  for (int i = 1; i + 1 < argc; ++i) {
    if (std::strcmp(argv[i], "--batch") == 0) batch = std::atoi(argv[i + 1]);
  }
  const policy_kind policies[] = {policy_kind::cost, policy_kind::vdnn_all, policy_kind::lru,
                                  policy_kind::um_naive};
  goal_tally tally;
  for (const char* device_name : {"h100-pcie", "titanx-maxwell"}) {
    const synthetic::device_figures device = synthetic::read_device_model(device_name);
    for (const char* network : {"vgg-like", "resnet-like"}) {
      const iteration_model m = std::strcmp(network, "vgg-like") == 0
                                    ? synthetic::vgg_like(device, batch)
                                    : synthetic::resnet_like(device, batch);
      std::printf("- %s on %s: %zu launches, %zu buffers, peak live %.2f GB, largest launch "
                  "%.2f GB, forward/backward boundary at launch %u\n",
                  network, device.name.c_str(), m.launches.size(), m.buffers.size(),
                  gb(peak_live_bytes(m)), gb(largest_launch_footprint(m).bytes),
                  backward_begin_of(m));
    }
  }
  std::printf("\n");
  std::printf("| device | network | oversub | T_unlimited ms | bound / T_unl | window / T_unl | "
              "reuse / T_unl | "
              "policy | time / T_unl | time / bound | time / window | H2D GB | D2H GB | "
              "peak device GB | capacity GB |\n");
  std::printf("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n");
  for (const char* device_name : {"h100-pcie", "titanx-maxwell"}) {
    const synthetic::device_figures device = synthetic::read_device_model(device_name);
    for (const char* network : {"vgg-like", "resnet-like"}) {
      const iteration_model m = std::strcmp(network, "vgg-like") == 0
                                    ? synthetic::vgg_like(device, batch)
                                    : synthetic::resnet_like(device, batch);
      const double unlimited = static_cast<double>(unlimited_iteration_ns(m, device.costs));
      for (double ratio : {1.5, 3.0, 10.0}) {
        const auto cap = static_cast<std::size_t>(static_cast<double>(peak_live_bytes(m)) / ratio);
        const double bound = static_cast<double>(transfer_bound_ns(m, cap, device.costs));
        const double window = static_cast<double>(window_bound_ns(m, cap, device.costs));
        const double reuse = static_cast<double>(reuse_bound(m, cap, device.costs).ns);
        const double lower = std::max(window, reuse);
        double cost_ns = 0, best_other_ns = 1e300, um_naive_ns = 0;
        for (policy_kind kind : policies) {
          const schedule_result r = plan_schedule(m, cap, device.costs, kind);
          if (!r.ok()) {
            std::printf("| %s | %s | %.1fx | | | %s | error: %s |\n", device_name, network, ratio,
                        std::string(policy_name(kind)).c_str(), r.error.c_str());
            continue;
          }
          const simulation s = simulate(m, r.value, device.costs);
          const double t = static_cast<double>(s.iteration_ns);
          if (kind == policy_kind::um_naive) um_naive_ns = t;
          if (kind == policy_kind::cost) {
            cost_ns = t;
          } else if (t < best_other_ns) {
            best_other_ns = t;
          }
          std::printf("| %s | %s | %.1fx | %.1f | %.2f | %.2f | %.2f | %s | %.2f | %.2f | %.2f | "
                      "%.2f | %.2f | %.2f | %.2f |\n",
                      device.name.c_str(), network, ratio, unlimited / 1e6, bound / unlimited,
                      window / unlimited, reuse / unlimited, std::string(policy_name(kind)).c_str(),
                      t / unlimited,
                      t / bound, t / window,
                      gb(s.h2d_bytes), gb(s.d2h_bytes), gb(s.peak_device_bytes), gb(cap));
        }
        char ratio_label[16];
        std::snprintf(ratio_label, sizeof ratio_label, "%.1fx", ratio);
        const std::string point = std::string(device_name) + " " + network + " " + ratio_label;
        ++tally.points;
        if (ratio == 3.0) {
          ++tally.um_points;
          tally.um_ratios.push_back(point + ": " + ratio_text(um_naive_ns / cost_ns));
          if (um_naive_ns >= 3 * cost_ns) {
            ++tally.um_ok;
          } else {
            tally.misses.push_back(point + ": um-naive only " +
                                   ratio_text(um_naive_ns / cost_ns) +
                                   " slower than the schedule");
          }
        }
        tally.worst_vs_window = std::max(tally.worst_vs_window, cost_ns / window);
        tally.worst_vs_lower = std::max(tally.worst_vs_lower, cost_ns / lower);
        if (lower > 1.15 * bound) {
          tally.unreachable.push_back(point + ": " + (window >= reuse ? "window" : "reuse") +
                                      " bound " + ratio_text(lower / bound) +
                                      " the transfer bound");
        }
        if (cost_ns <= 1.15 * bound) {
          ++tally.within_bound;
        } else {
          tally.misses.push_back(point + ": cost " + ratio_text(cost_ns / bound) + " the bound");
        }
        if (bound == unlimited) {
          ++tally.hidden_points;
          if (cost_ns <= 1.10 * unlimited) {
            ++tally.hidden_ok;
          } else {
            tally.misses.push_back(point + ": cost " + ratio_text(cost_ns / unlimited) +
                                   " T_unlimited where the bound is T_unlimited");
          }
        }
        if (cost_ns < best_other_ns) {
          ++tally.fastest;
        } else {
          tally.misses.push_back(point + ": a baseline is as fast as cost");
        }
      }
    }
  }
  std::printf("\nGoals (batch %d):\n", batch);
  std::printf("- cost within 1.15x of the transfer bound: %d of %d points\n", tally.within_bound,
              tally.points);
  std::printf("- cost <= 1.10x T_unlimited where the bound is T_unlimited: %d of %d points\n",
              tally.hidden_ok, tally.hidden_points);
  std::printf("- cost faster than vdnn-all, lru and um-naive: %d of %d points\n", tally.fastest,
              tally.points);
  std::printf("- schedule-driven um >= 3x faster than um-naive at 3x: %d of %d points\n",
              tally.um_ok, tally.um_points);
  for (const std::string& r : tally.um_ratios) {
    std::printf("  - um-naive / schedule, %s\n", r.c_str());
  }
  std::printf("- (not a goal) cost at most %.2fx the window bound at every point\n",
              tally.worst_vs_window);
  std::printf("- (not a goal) cost at most %.2fx the larger of the window and reuse bounds\n",
              tally.worst_vs_lower);
  std::printf("- points where no schedule can be within 1.15x of the transfer bound (the "
              "window or the reuse bound is above it): %zu of %d\n", tally.unreachable.size(),
              tally.points);
  for (const std::string& u : tally.unreachable) std::printf("  - %s\n", u.c_str());
  for (const std::string& miss : tally.misses) std::printf("  - miss: %s\n", miss.c_str());
  return 0;
}
