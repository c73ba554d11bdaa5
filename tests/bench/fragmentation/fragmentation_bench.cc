// fragmentation_bench: for each allocation trace, how much device memory each way of
// placing its buffers needs, against the lower bound (the most bytes live at once):
//   online   oversub's online arena (pool/), as modelled in online_arena_model.cc;
//   planned  the lifetime planner (policy/placement.h) on the whole trace;
//   baseline a caching allocator of PyTorch's design (caching_allocator_model.cc);
// and the planner's run time. Prints a markdown table.
//
//   fragmentation_bench [--check] [--synthetic N] [--caching-only] TRACE_OR_FOLDER...
//
// --caching-only: for each trace only the caching allocator model's peaks, one line
// each, "<name> <lower bound> <baseline> <baseline emptied>" in bytes (what
// `oversub trace-torch --check` reads for its reserved-bytes column).
// --check: exit 1 unless every recorded trace's placement is valid and within
// kPlannedGoal of the lower bound (deterministic numbers, not timings).
// --synthetic N: also plan a random trace of N allocations (the planner's worst
// case; its row is for the run time and is not checked).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "allocator_models.h"
#include "policy/placement.h"
#include "trace.h"

namespace {

using namespace oversub;

constexpr double kPlannedGoal = 1.03;  // planned <= 1.03 x lower bound (issue 5)
constexpr double kOnlineGoal = 1.15;   // online <= 1.15 x lower bound
constexpr std::size_t kAlignment = 256;

struct row {
  std::string name;
  std::size_t allocations = 0;
  std::size_t lower_bound = 0;
  std::size_t online = 0;          // never trimmed
  std::size_t online_trimmed = 0;  // trimmed when short
  std::size_t planned = 0;
  std::size_t baseline = 0;          // segments never released
  std::size_t baseline_emptied = 0;  // free segments released on a failed cudaMalloc
  double planner_ms = 0;
  bool valid = false;
  std::string heuristic;
  bool recorded = true;  // false: synthetic
  bool of_segments = false;  // the trace is a caching allocator's segments
};

row measure(const bench::trace& t) {
  row r;
  r.name = t.name;
  // Note [Traces of a caching allocator]
  // ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
  // simtrain --caching records its own
  // caching allocator's segments. The baseline on top of them would cache a cache;
  // the framework's own figure is the trace's lower bound, and the baseline on the
  // same run's direct trace (one cudaMalloc per tensor) reproduces it.
  r.of_segments = t.source.find("--caching") != std::string::npos;
  const auto lifetimes = bench::lifetimes_of(t);
  r.allocations = lifetimes.size();
  r.lower_bound = bench::max_live_bytes(t, kAlignment);
  const bench::online_arena_peaks online = bench::online_arena_peak(t);
  r.online = online.plentiful;
  r.online_trimmed = online.trimmed;
  r.baseline = bench::caching_allocator_peak(t);
  r.baseline_emptied = bench::caching_allocator_capacity(t);
  const auto start = std::chrono::steady_clock::now();
  const policy::placement p = policy::plan_placement(lifetimes, kAlignment);
  r.planner_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  r.planned = p.region_bytes;
  r.valid = policy::placement_is_valid(lifetimes, p, kAlignment) &&
            p.lower_bound_bytes == r.lower_bound;
  r.heuristic = p.heuristic;
  return r;
}

std::string mib(std::size_t bytes) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f", static_cast<double>(bytes) / (1u << 20));
  return buf;
}

std::string times(std::size_t bytes, std::size_t bound) {
  if (bound == 0) return "-";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3f", static_cast<double>(bytes) / static_cast<double>(bound));
  return buf;
}

std::vector<std::string> trace_files(const std::string& arg) {
  namespace fs = std::filesystem;
  std::vector<std::string> out;
  if (fs::is_directory(arg)) {
    for (const auto& entry : fs::directory_iterator(arg)) {
      if (entry.path().extension() == ".trace") out.push_back(entry.path().string());
    }
    std::sort(out.begin(), out.end());
  } else {
    out.push_back(arg);
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  bool check = false;
  bool caching_only = false;
  std::size_t synthetic = 0;
  std::vector<std::string> files;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--check") {
      check = true;
    } else if (arg == "--caching-only") {
      caching_only = true;
    } else if (arg == "--synthetic" && i + 1 < argc) {
      synthetic = std::strtoul(argv[++i], nullptr, 10);
    } else if (arg.rfind("--", 0) == 0) {
      std::fprintf(stderr,
                   "usage: %s [--check] [--synthetic N] [--caching-only] TRACE_OR_FOLDER...\n",
                   argv[0]);
      return 2;
    } else {
      for (auto& f : trace_files(arg)) files.push_back(f);
    }
  }

  std::vector<row> rows;
  for (const std::string& f : files) {
    bench::trace t;
    std::string error;
    if (!bench::read_trace(f, &t, &error)) {
      std::fprintf(stderr, "fragmentation_bench: %s\n", error.c_str());
      return 2;
    }
    if (caching_only) {
      std::printf("%s %zu %zu %zu\n", t.name.c_str(), bench::max_live_bytes(t, kAlignment),
                  bench::caching_allocator_peak(t), bench::caching_allocator_capacity(t));
      continue;
    }
    rows.push_back(measure(t));
  }
  if (caching_only) return 0;
  if (synthetic != 0) {
    rows.push_back(measure(bench::random_trace(synthetic, 1)));
    rows.back().recorded = false;
  }

  std::printf("| trace | allocations | lower bound MiB | online xLB | online trimmed xLB | "
              "planned xLB | baseline xLB | baseline emptied xLB | planner ms | "
              "planner heuristic |\n");
  std::printf("|---|---:|---:|---:|---:|---:|---:|---:|---:|---|\n");
  int failures = 0;
  for (const row& r : rows) {
    std::printf("| %s | %zu | %s | %s | %s | %s | %s | %s | %.1f | %s |\n", r.name.c_str(),
                r.allocations, mib(r.lower_bound).c_str(), times(r.online, r.lower_bound).c_str(),
                times(r.online_trimmed, r.lower_bound).c_str(),
                times(r.planned, r.lower_bound).c_str(),
                r.of_segments ? "n/a" : times(r.baseline, r.lower_bound).c_str(),
                r.of_segments ? "n/a" : times(r.baseline_emptied, r.lower_bound).c_str(),
                r.planner_ms,
                r.heuristic.c_str());
    if (!r.recorded) continue;
    if (!r.valid) {
      std::fprintf(stderr, "FAIL %s: the planned placement is not valid\n", r.name.c_str());
      ++failures;
    }
    if (static_cast<double>(r.planned) > kPlannedGoal * static_cast<double>(r.lower_bound)) {
      std::fprintf(stderr, "FAIL %s: planned %zu bytes > %.2f x lower bound %zu\n",
                   r.name.c_str(), r.planned, kPlannedGoal, r.lower_bound);
      ++failures;
    }
  }
  // Goals that are reported, not enforced (issue 5): online within 1.15 x LB, and
  // online and planned below the baseline.
  std::printf("\n");
  for (const row& r : rows) {
    if (!r.recorded || r.lower_bound == 0) continue;
    const double bound = static_cast<double>(r.lower_bound);
    // Note [Granularity floor]
    // ~~~~~~~~~~~~~~~~~~~~~~~~
    // Physical memory is mapped in 2 MiB chunks, so no
    // VMM-backed arena (nor a caching allocator's 2 MiB segments) can reserve less
    // than the lower bound rounded up to a chunk; a miss at that floor says so.
    const std::size_t chunk = bench::online_arena_config{}.chunk_bytes;
    const std::size_t floor_bytes = (r.lower_bound + chunk - 1) / chunk * chunk;
    auto miss = [&](const char* what, std::size_t bytes, const char* than) {
      std::printf("goal missed: %s: %s %.3f x LB, %s%s\n", r.name.c_str(), what,
                  static_cast<double>(bytes) / bound, than,
                  bytes <= floor_bytes ? " (at the 2 MiB mapping-granularity floor)" : "");
    };
    if (r.online > kOnlineGoal * bound) miss("online", r.online, "goal 1.15");
    if (r.online_trimmed > kOnlineGoal * bound) miss("online trimmed", r.online_trimmed, "goal 1.15");
    if (r.of_segments) continue;
    if (r.online >= r.baseline) miss("online", r.online, "not below the baseline");
    if (r.online_trimmed >= r.baseline_emptied) {
      miss("online trimmed", r.online_trimmed, "not below the baseline emptied");
    }
    if (r.planned >= r.baseline_emptied) miss("planned", r.planned, "not below the baseline emptied");
  }
  if (failures != 0) std::printf("%d check(s) failed\n", failures);
  return check && failures != 0 ? 1 : 0;
}
