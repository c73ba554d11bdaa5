// The profiler's added cost per intercepted launch: the function's cached layout
// looked up by handle, the 256-byte argument block cut into its 32 aligned words,
// each word looked up among 10,000 live allocations (the tracker's interval map,
// one lock), and the launch recorded. This is the path every launch takes in
// profiling mode (profiler::record_launch, called from the CUPTI callback or the
// launch hook), run in-process so simgpu's own launch cost does not drown it.
//
// Arg: how many of the 32 words point into live allocations (the rest are
// scalars: sizes, float bits). Each repetition records into a fresh recorder.
#include <benchmark/benchmark.h>

#include <cstring>
#include <random>
#include <vector>

#include "common/tracker.h"
#include "profiler/launch_scan.h"
#include "profiler/recorder.h"

namespace oversub::profiler {
namespace {

constexpr int live_allocations = 10'000;
constexpr int block_words = 32;  // 256 bytes of parameters

struct fixture {
  tracker live{device_limit{}};
  std::vector<allocation> allocations;
  fixture() {
    std::mt19937_64 rng(1);
    std::uintptr_t base = 0x7f0000000000;
    for (int i = 0; i < live_allocations; ++i) {
      const std::size_t bytes = 512 * (1 + rng() % 4096);  // 512 B .. 2 MiB
      allocation a{base, bytes, alloc_kind::device, nullptr, 0};
      live.record(a);
      allocations.push_back(a);
      base += (bytes + 0xFFFF) & ~std::uintptr_t{0xFFFF};
    }
  }
};

fixture& shared() {
  static fixture* f = new fixture;
  return *f;
}

void BM_ProfiledLaunch(benchmark::State& state) {
  fixture& fx = shared();
  const int pointers = static_cast<int>(state.range(0));
  std::mt19937_64 rng(2);
  std::uint64_t values[block_words];
  for (int i = 0; i < block_words; ++i) {
    if (i < pointers) {
      const allocation& a = fx.allocations[rng() % fx.allocations.size()];
      values[i] = a.base + (rng() % a.bytes & ~std::uint64_t{7});  // interior pointers
    } else {
      values[i] = i % 2 == 0 ? 1024 + i : 0x3f800000;  // an int, float bits
    }
  }
  void* args[block_words];
  for (int i = 0; i < block_words; ++i) args[i] = &values[i];
  function_cache cache;
  recorder rec;
  function_info info;
  info.id = rec.add_function("gemm_kernel(float const*, float const*, float*, params)");
  for (std::uint32_t i = 0; i < block_words; ++i) info.params.push_back({8 * i, 8});
  const int handle = 0;
  cache.insert(&handle, info);
  std::uint32_t corr = 0;
  for (auto _ : state) {
    const function_info* f = cache.lookup(&handle);
    record_launch(*f, args, nullptr, 0, fx.live, rec, ++corr);
  }
  benchmark::DoNotOptimize(rec.launches());
  state.counters["live_allocations"] = live_allocations;
}

BENCHMARK(BM_ProfiledLaunch)
    ->Arg(0)
    ->Arg(8)
    ->Arg(32)
    ->Iterations(400'000)
    ->Repetitions(9)
    ->ReportAggregatesOnly(true)
    ->Unit(benchmark::kNanosecond);

}  // namespace
}  // namespace oversub::profiler

BENCHMARK_MAIN();
