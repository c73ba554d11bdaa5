// Allocation latency of the pool: allocate+free pairs through a warm device arena
// (vmm_arena on simgpu) with the sizes simtrain allocates, and through the bare
// sub-allocator (block_index). The hot path is the TLSF search, the split and merge,
// the address map and the stream check (ticket sets and the stream slot table): no
// system call and no CUDA call once the chunks are mapped. Median per pair is the
// figure to read (goal: under 100 ns).
#include <benchmark/benchmark.h>
#include <cuda.h>
#include <cuda_runtime_api.h>

#include <array>
#include <vector>

#include "pool/block_index.h"
#include "pool/stream_fences.h"
#include "pool/vmm_arena.h"

namespace {

using namespace oversub::pool;

// simtrain's default run (depth 8, width 128, batch 64, 16 outputs, float32): the
// sizes of its cudaMalloc calls, weights/gradients/Adam state, activations, biases,
// outputs and scalars; repeated in the mix roughly as often as simtrain asks.
constexpr std::array<std::size_t, 16> simtrain_sizes = {
    65536, 32768, 512, 32768, 32768, 65536, 4096, 32768,
    8192,  4,     512, 32768, 64,    4096,  32768, 65536};

vmm_arena& warm_arena() {
  static vmm_arena* arena = [] {
    cudaFree(nullptr);  // the runtime's context, current on this thread
    auto* a = new vmm_arena(vmm_arena_config{0, std::size_t{1} << 30, std::size_t{32} << 20});
    // Warm: map chunks for a working set larger than the benchmark's.
    std::vector<std::pair<void*, std::size_t>> blocks;
    for (int r = 0; r < 8; ++r) {
      for (std::size_t s : simtrain_sizes) blocks.emplace_back(a->allocate(s, CU_STREAM_LEGACY).ptr, s);
    }
    for (auto [p, s] : blocks) a->deallocate(p, s, CU_STREAM_LEGACY);
    return a;
  }();
  return *arena;
}

// One pair per iteration, cudaFreeAsync-style (free on the stream it serves).
void BM_ArenaPairSameStream(benchmark::State& state) {
  vmm_arena& arena = warm_arena();
  std::size_t i = 0;
  for (auto _ : state) {
    const std::size_t s = simtrain_sizes[i++ % simtrain_sizes.size()];
    allocation_result r = arena.allocate(s, CU_STREAM_LEGACY);
    benchmark::DoNotOptimize(r.ptr);
    arena.deallocate(r.ptr, s, CU_STREAM_LEGACY);
  }
  state.SetLabel("allocate+free pair");
}
BENCHMARK(BM_ArenaPairSameStream);

// cudaFree-style (synchronous free: the stream table is scanned for work since the
// allocation), with 16 blocks live so the free lists are not trivially empty.
void BM_ArenaPairWindow16(benchmark::State& state) {
  vmm_arena& arena = warm_arena();
  std::array<std::pair<void*, std::size_t>, 16> window{};
  for (std::size_t k = 0; k < window.size(); ++k) {
    const std::size_t s = simtrain_sizes[k];
    window[k] = {arena.allocate(s, CU_STREAM_LEGACY).ptr, s};
  }
  std::size_t i = 0;
  for (auto _ : state) {
    auto& slot = window[i % window.size()];
    arena.deallocate(slot.first, slot.second, no_stream);
    const std::size_t s = simtrain_sizes[(i * 7 + 3) % simtrain_sizes.size()];
    slot = {arena.allocate(s, CU_STREAM_LEGACY).ptr, s};
    benchmark::DoNotOptimize(slot.first);
    ++i;
  }
  for (auto [p, s] : window) arena.deallocate(p, s, no_stream);
  state.SetLabel("free+allocate pair, 16 live");
}
BENCHMARK(BM_ArenaPairWindow16);

// The bare sub-allocator, for comparison: what the arena adds is its lock, the
// chunk check and the stream check.
void BM_BlockIndexPair(benchmark::State& state) {
  block_index idx;
  idx.add_range(0x7f0000000000, std::size_t{1} << 30, 0);
  auto any = [](const block&) { return true; };
  std::size_t i = 0;
  for (auto _ : state) {
    block* b = idx.take(simtrain_sizes[i++ % simtrain_sizes.size()], any);
    benchmark::DoNotOptimize(b);
    idx.release(b);
  }
  state.SetLabel("take+release pair");
}
BENCHMARK(BM_BlockIndexPair);

}  // namespace

BENCHMARK_MAIN();
