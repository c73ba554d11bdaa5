// The cost of argument scanning per intercepted launch, among 10,000 live
// allocations: BM_Scan is what every launch in swap mode pays (the words looked up,
// no recording), BM_ProfiledLaunch what profiling mode adds.
//
// BM_ProfiledLaunch: the profiler's added cost per intercepted launch: the function's cached layout
// looked up by handle, the 256-byte argument block cut into its 32 aligned words,
// each word looked up among 10,000 live allocations (the tracker's interval map,
// one lock), and the launch recorded. This is the path every launch takes in
// profiling mode (profiler::record_launch, called from the CUPTI callback or the
// launch hook), run in-process so simgpu's own launch cost does not drown it.
//
// Arg: how many of the 32 words point into live allocations (the rest are
// scalars: sizes, float bits). Each repetition records into a fresh recorder.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstdint>
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

// What a launch in swap mode pays to find its buffers (core/launch_residency.cc):
// the argument block cut into its words (gather_words, one 8-byte parameter per
// word) and the words looked up among the live allocations (tracker::scan, one
// lock), without the recording above.
//
// Args: the block's words, how many of them point into live allocations (interior
// pointers into distinct random allocations, at random positions; the rest are the
// scalars kernels pass: small and negative integers, float and double bits, packed
// pairs of 32-bit ints), and the pattern from launch to launch:
//   0: the same words every launch, no allocation in between: the steady state
//      under a caching allocator;
//   1: the same words, with one allocation made and freed before every launch (that
//      record and forget are timed too; BM_MapChange is their cost alone);
//   2: pointers no launch of the last 256 passed (256 blocks taken in turn, each
//      with its own allocations and offsets): the first launches of a run, every
//      pointer word looked up afresh.
// per_word: the time divided by the words.
void BM_Scan(benchmark::State& state) {
  fixture& fx = shared();
  const auto words = static_cast<std::size_t>(state.range(0));
  const auto pointers = static_cast<std::size_t>(state.range(1));
  const auto pattern = state.range(2);
  const std::size_t blocks = pattern == 2 ? 256 : 1;
  std::mt19937_64 rng(3);
  std::vector<std::uint64_t> values(words * blocks);
  std::vector<std::size_t> picks(fx.allocations.size());
  for (std::size_t i = 0; i < picks.size(); ++i) picks[i] = i;
  for (std::size_t b = 0; b < blocks; ++b) {
    std::uint64_t* block = &values[b * words];
    std::shuffle(picks.begin(), picks.end(), rng);
    for (std::size_t i = 0; i < words; ++i) {
      if (i < pointers) {
        const allocation& a = fx.allocations[picks[i % picks.size()]];
        block[i] = a.base + (rng() % a.bytes & ~std::uint64_t{7});
        continue;
      }
      const double d = 0.5 * static_cast<double>(i);
      std::uint64_t bits = 0;
      std::memcpy(&bits, &d, 8);
      switch (i % 6) {
        case 0: block[i] = 1024 + i; break;                                  // a size
        case 1: block[i] = 0x3f800000; break;                                // 1.0f
        case 2: block[i] = bits; break;                                      // a double
        case 3: block[i] = (std::uint64_t{i} << 32) | 7; break;              // two ints
        case 4: block[i] = static_cast<std::uint64_t>(-static_cast<std::int64_t>(i)); break;
        default: block[i] = 0; break;                                        // null, flags
      }
    }
    std::shuffle(block, block + words, rng);
  }
  std::vector<void*> args(words * blocks);
  for (std::size_t i = 0; i < args.size(); ++i) args[i] = &values[i];
  std::vector<param_slot> params(words);
  for (std::size_t i = 0; i < words; ++i) {
    params[i] = param_slot{static_cast<std::uint32_t>(8 * i), 8};
  }
  thread_local std::uint64_t gathered[max_scan_words];
  thread_local std::uint64_t bases[max_scan_words];
  // Below every live allocation: displaces nothing.
  const allocation churn{0x10000, 4096, alloc_kind::device, nullptr, 0};
  std::size_t found = 0;
  std::size_t next = 0;
  for (auto _ : state) {
    if (pattern == 1) {
      fx.live.record(churn);
      fx.live.forget(churn.base);
    }
    const std::size_t n = gather_words(params, &args[next * words], gathered);
    next = next + 1 == blocks ? 0 : next + 1;
    found = fx.live.scan(gathered, n, bases);
    benchmark::DoNotOptimize(bases);
  }
  if (found != pointers) state.SkipWithError("the scan missed a pointer word");
  state.counters["per_word"] = benchmark::Counter(
      static_cast<double>(words),
      benchmark::Counter::kIsIterationInvariantRate | benchmark::Counter::kInvert);
}

BENCHMARK(BM_Scan)
    ->ArgNames({"words", "pointers", "pattern"})
    ->Args({32, 0, 0})
    ->Args({512, 0, 0})
    ->Args({4096, 0, 0})
    ->Args({32, 4, 0})
    ->Args({32, 8, 0})
    ->Args({32, 32, 0})
    ->Args({512, 64, 0})
    ->Args({512, 512, 0})
    ->Args({4096, 4096, 0})
    ->Args({32, 8, 1})
    ->Args({32, 32, 1})
    ->Args({512, 512, 1})
    ->Args({32, 8, 2})
    ->Args({32, 32, 2})
    ->Args({512, 512, 2})
    ->Repetitions(9)
    ->ReportAggregatesOnly(true)
    ->Unit(benchmark::kNanosecond);

// The record and forget BM_Scan's changed=1 cases add to each launch.
void BM_MapChange(benchmark::State& state) {
  fixture& fx = shared();
  const allocation churn{0x10000, 4096, alloc_kind::device, nullptr, 0};
  for (auto _ : state) {
    fx.live.record(churn);
    fx.live.forget(churn.base);
  }
}

BENCHMARK(BM_MapChange)->Repetitions(9)->ReportAggregatesOnly(true)->Unit(benchmark::kNanosecond);

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
