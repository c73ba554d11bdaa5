// Time per intercepted call, measured on simgpu. The same binary runs without
// liboversub, under OVERSUB_MODE=off and under OVERSUB_MODE=track
// (run_bench.py), so the differences are what the library adds per call.
//
// Each benchmark is one or two runtime calls in a loop: a malloc/free pair, a
// kernel launch (one thread, empty body), a 64-byte cudaMemcpyAsync, a
// cudaMemGetInfo and a cudaStreamQuery (the cheapest call: almost all hook). Queued
// work is drained every 256 iterations outside the timed region.
#include <benchmark/benchmark.h>
#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>

#include "simgpu/kernel.h"

__global__ void empty_kernel(int* out) {
  if (out != nullptr && threadIdx.x == 1u << 30) *out = 0;
}
SIMGPU_KERNEL(empty_kernel);

namespace {

void check(cudaError_t rc, const char* what) {
  if (rc != cudaSuccess) {
    std::fprintf(stderr, "interpose_bench: %s failed: %d\n", what, static_cast<int>(rc));
    std::exit(1);
  }
}

constexpr int drain_every = 256;

void drain(benchmark::State& state, cudaStream_t stream, int& since) {
  if (++since < drain_every) return;
  state.PauseTiming();
  check(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
  since = 0;
  state.ResumeTiming();
}

void BM_MallocFree(benchmark::State& state) {
  const size_t bytes = static_cast<size_t>(state.range(0));
  for (auto _ : state) {
    void* p = nullptr;
    check(cudaMalloc(&p, bytes), "cudaMalloc");
    check(cudaFree(p), "cudaFree");
  }
}
BENCHMARK(BM_MallocFree)->Arg(4096)->Arg(1 << 20);

void BM_LaunchKernel(benchmark::State& state) {
  cudaStream_t stream = nullptr;
  check(cudaStreamCreate(&stream), "cudaStreamCreate");
  int* out = nullptr;
  void* args[] = {&out};
  int since = 0;
  for (auto _ : state) {
    check(cudaLaunchKernel(reinterpret_cast<const void*>(&empty_kernel), dim3(1), dim3(1), args,
                           0, stream),
          "cudaLaunchKernel");
    drain(state, stream, since);
  }
  check(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
  cudaStreamDestroy(stream);
}
BENCHMARK(BM_LaunchKernel);

void BM_MemcpyAsync(benchmark::State& state) {
  cudaStream_t stream = nullptr;
  check(cudaStreamCreate(&stream), "cudaStreamCreate");
  void* device = nullptr;
  check(cudaMalloc(&device, 64), "cudaMalloc");
  static char host[64] = {};
  int since = 0;
  for (auto _ : state) {
    check(cudaMemcpyAsync(device, host, sizeof host, cudaMemcpyHostToDevice, stream),
          "cudaMemcpyAsync");
    drain(state, stream, since);
  }
  check(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
  cudaFree(device);
  cudaStreamDestroy(stream);
}
BENCHMARK(BM_MemcpyAsync);

void BM_MemGetInfo(benchmark::State& state) {
  for (auto _ : state) {
    size_t free_bytes = 0, total_bytes = 0;
    check(cudaMemGetInfo(&free_bytes, &total_bytes), "cudaMemGetInfo");
    benchmark::DoNotOptimize(free_bytes);
  }
}
BENCHMARK(BM_MemGetInfo);

void BM_StreamQuery(benchmark::State& state) {
  for (auto _ : state) {
    benchmark::DoNotOptimize(cudaStreamQuery(nullptr));
  }
}
BENCHMARK(BM_StreamQuery);

}  // namespace

BENCHMARK_MAIN();
