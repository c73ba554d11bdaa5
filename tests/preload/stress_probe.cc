// Eight threads allocate, launch and free concurrently, on simgpu. Each thread does
// `rounds` iterations of: cudaMalloc (sizes 4 KiB..1 MiB), a kernel writing the
// buffer, cudaMemcpy back and check, cudaFree; every fourth round uses
// cudaMallocAsync/cudaFreeAsync on the thread's own stream instead. Prints the
// number of allocations made; the preload test compares it with oversub's stats.
#include <cuda_runtime.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <thread>
#include <vector>

#include "simgpu/kernel.h"

__global__ void fill(unsigned* out, unsigned value, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = value + static_cast<unsigned>(i);
}
// The exact footprint: under OVERSUB_MODE=pool two threads' buffers share a 2 MiB
// mapping, and without it simgpu would take each kernel to use the whole mapping.
SIMGPU_KERNEL_FOOTPRINT(fill, [](simgpu::footprint& fp, unsigned* out, unsigned, int n) {
  fp.write(out, n);
});

namespace {

std::atomic<int> g_failures{0};
std::atomic<long> g_allocations{0};

void worker(int id, int rounds) {
  cudaStream_t stream = nullptr;
  if (cudaStreamCreate(&stream) != cudaSuccess) {
    g_failures.fetch_add(1);
    return;
  }
  unsigned seed = 12345u + static_cast<unsigned>(id);
  std::vector<unsigned> host;
  for (int r = 0; r < rounds; ++r) {
    seed = seed * 1103515245u + 12345u;
    const int n = 1024 + static_cast<int>(seed % (256 * 1024 - 1024));  // words
    const size_t bytes = static_cast<size_t>(n) * sizeof(unsigned);
    const bool async = r % 4 == 3;
    unsigned* buf = nullptr;
    cudaError_t rc = async ? cudaMallocAsync(reinterpret_cast<void**>(&buf), bytes, stream)
                           : cudaMalloc(reinterpret_cast<void**>(&buf), bytes);
    if (rc != cudaSuccess) {
      std::fprintf(stderr, "thread %d round %d: malloc %d\n", id, r, static_cast<int>(rc));
      g_failures.fetch_add(1);
      continue;
    }
    g_allocations.fetch_add(1);
    unsigned value = static_cast<unsigned>(id) << 24 | static_cast<unsigned>(r);
    int count = n;
    void* args[] = {&buf, &value, &count};
    const int threads = 256;
    rc = cudaLaunchKernel(reinterpret_cast<const void*>(&fill), dim3((n + threads - 1) / threads),
                          dim3(threads), args, 0, stream);
    host.assign(static_cast<size_t>(n), 0);
    if (rc == cudaSuccess) {
      rc = cudaMemcpyAsync(host.data(), buf, bytes, cudaMemcpyDeviceToHost, stream);
    }
    if (rc == cudaSuccess) rc = cudaStreamSynchronize(stream);
    if (rc != cudaSuccess || host[0] != value || host[n - 1] != value + unsigned(n - 1)) {
      std::fprintf(stderr, "thread %d round %d: launch/copy %d\n", id, r, static_cast<int>(rc));
      g_failures.fetch_add(1);
    }
    rc = async ? cudaFreeAsync(buf, stream) : cudaFree(buf);
    if (rc != cudaSuccess) g_failures.fetch_add(1);
  }
  if (cudaStreamSynchronize(stream) != cudaSuccess) g_failures.fetch_add(1);
  cudaStreamDestroy(stream);
}

}  // namespace

int main(int argc, char** argv) {
  const int threads = 8;
  const int rounds = argc > 1 ? std::atoi(argv[1]) : 200;
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) pool.emplace_back(worker, t, rounds);
  for (auto& t : pool) t.join();
  std::printf("allocations %ld launches %ld failures %d\n", g_allocations.load(),
              g_allocations.load(), g_failures.load());
  return g_failures.load() == 0 ? 0 : 1;
}
