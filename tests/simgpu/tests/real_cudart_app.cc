// A CUDA program built the ordinary way, against NVIDIA's runtime:
//   g++ -I/usr/local/cuda/include real_cudart_app.cc -L/usr/local/cuda/lib64 -lcudart
// It knows nothing of simgpu (no simgpu header, no kernels). check_real_cudart.py
// runs it unchanged with LD_LIBRARY_PATH pointing at simgpu, where it must find a
// device and get right answers. It queries the device, allocates, copies, sets
// memory, uses streams and events, checks every result, prints what it saw as
// `key=value` lines, the file its cudaMalloc came from (`libcudart=`), and `ALL OK`
// when everything held. Exit status 1 on the first wrong answer.
#include <cuda_runtime.h>
#include <dlfcn.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#define CHECK(expr)                                                                 \
  do {                                                                              \
    cudaError_t e_ = (expr);                                                        \
    if (e_ != cudaSuccess) {                                                        \
      std::printf("FAILED %s -> %d %s\n", #expr, static_cast<int>(e_), cudaGetErrorName(e_)); \
      return 1;                                                                     \
    }                                                                               \
  } while (0)

#define EXPECT(cond)                                    \
  do {                                                  \
    if (!(cond)) {                                      \
      std::printf("WRONG %s (line %d)\n", #cond, __LINE__); \
      return 1;                                         \
    }                                                   \
  } while (0)

int main() {
  Dl_info info{};
  auto malloc_fn = static_cast<cudaError_t (*)(void**, size_t)>(&cudaMalloc);
  if (dladdr(reinterpret_cast<void*>(malloc_fn), &info) != 0 && info.dli_fname != nullptr)
    std::printf("libcudart=%s\n", info.dli_fname);

  int version = 0;
  CHECK(cudaRuntimeGetVersion(&version));
  std::printf("runtime_version=%d\n", version);
  int count = 0;
  CHECK(cudaGetDeviceCount(&count));
  std::printf("device_count=%d\n", count);
  EXPECT(count >= 1);
  CHECK(cudaSetDevice(0));
  cudaDeviceProp prop;
  std::memset(&prop, 0, sizeof prop);
  CHECK(cudaGetDeviceProperties(&prop, 0));
  std::printf("device_name=%s\n", prop.name);
  std::printf("total_global_mem=%zu\n", prop.totalGlobalMem);
  std::printf("compute_capability=%d.%d\n", prop.major, prop.minor);
  EXPECT(prop.totalGlobalMem > 0);
  EXPECT(std::strlen(prop.name) > 0);

  size_t free_before = 0, total = 0;
  CHECK(cudaMemGetInfo(&free_before, &total));
  EXPECT(total == prop.totalGlobalMem);

  // Device allocation and synchronous copies.
  const size_t n = 1 << 20;
  std::vector<unsigned> host(n), back(n, 0);
  for (size_t i = 0; i < n; ++i) host[i] = static_cast<unsigned>(i * 2654435761u);
  unsigned *d1 = nullptr, *d2 = nullptr;
  CHECK(cudaMalloc(&d1, n * sizeof(unsigned)));
  CHECK(cudaMalloc(&d2, n * sizeof(unsigned)));
  size_t free_after = 0;
  CHECK(cudaMemGetInfo(&free_after, &total));
  std::printf("allocated_bytes=%zu\n", free_before - free_after);
  EXPECT(free_before - free_after >= 2 * n * sizeof(unsigned));
  CHECK(cudaMemcpy(d1, host.data(), n * sizeof(unsigned), cudaMemcpyHostToDevice));
  CHECK(cudaMemcpy(d2, d1, n * sizeof(unsigned), cudaMemcpyDeviceToDevice));
  CHECK(cudaMemcpy(back.data(), d2, n * sizeof(unsigned), cudaMemcpyDeviceToHost));
  EXPECT(back == host);
  std::printf("roundtrip=ok\n");

  // memset.
  CHECK(cudaMemset(d2, 0xAB, 64));
  unsigned head[17] = {};
  CHECK(cudaMemcpy(head, d2, sizeof head, cudaMemcpyDeviceToHost));
  EXPECT(head[0] == 0xABABABABu && head[15] == 0xABABABABu && head[16] == host[16]);
  std::printf("memset=ok\n");

  // Streams, pinned memory, async copies, events.
  cudaStream_t s1, s2;
  CHECK(cudaStreamCreate(&s1));
  CHECK(cudaStreamCreateWithFlags(&s2, cudaStreamNonBlocking));
  unsigned* pinned = nullptr;
  CHECK(cudaMallocHost(&pinned, n * sizeof(unsigned)));
  for (size_t i = 0; i < n; ++i) pinned[i] = static_cast<unsigned>(n - i);
  unsigned* pinned_back = nullptr;
  CHECK(cudaHostAlloc(reinterpret_cast<void**>(&pinned_back), n * sizeof(unsigned),
                      cudaHostAllocDefault));
  std::memset(pinned_back, 0, n * sizeof(unsigned));
  cudaEvent_t start, copied, done;
  CHECK(cudaEventCreate(&start));
  CHECK(cudaEventCreate(&copied));
  CHECK(cudaEventCreate(&done));
  CHECK(cudaEventRecord(start, s1));
  CHECK(cudaMemcpyAsync(d1, pinned, n * sizeof(unsigned), cudaMemcpyHostToDevice, s1));
  CHECK(cudaEventRecord(copied, s1));
  CHECK(cudaStreamWaitEvent(s2, copied, 0));
  CHECK(cudaMemcpyAsync(pinned_back, d1, n * sizeof(unsigned), cudaMemcpyDeviceToHost, s2));
  CHECK(cudaEventRecord(done, s2));
  CHECK(cudaEventSynchronize(done));
  EXPECT(cudaEventQuery(done) == cudaSuccess);
  EXPECT(pinned_back[0] == n && pinned_back[n - 1] == 1);
  float h2d_ms = 0, total_ms = 0;
  CHECK(cudaEventElapsedTime(&h2d_ms, start, copied));
  CHECK(cudaEventElapsedTime(&total_ms, start, done));
  std::printf("h2d_ms=%.6f\ntotal_ms=%.6f\n", h2d_ms, total_ms);
  EXPECT(h2d_ms > 0 && total_ms >= h2d_ms);
  CHECK(cudaStreamSynchronize(s1));
  CHECK(cudaDeviceSynchronize());

  // Errors keep CUDA's meaning.
  void* huge = nullptr;
  cudaError_t oom = cudaMalloc(&huge, prop.totalGlobalMem * 2);
  std::printf("oversized_malloc=%s\n", cudaGetErrorName(oom));
  EXPECT(oom == cudaErrorMemoryAllocation);
  EXPECT(cudaGetLastError() == cudaErrorMemoryAllocation);
  EXPECT(cudaGetLastError() == cudaSuccess);

  CHECK(cudaEventDestroy(start));
  CHECK(cudaEventDestroy(copied));
  CHECK(cudaEventDestroy(done));
  CHECK(cudaStreamDestroy(s1));
  CHECK(cudaStreamDestroy(s2));
  CHECK(cudaFreeHost(pinned));
  CHECK(cudaFreeHost(pinned_back));
  CHECK(cudaFree(d1));
  CHECK(cudaFree(d2));
  size_t free_end = 0;
  CHECK(cudaMemGetInfo(&free_end, &total));
  EXPECT(free_end == free_before);
  std::printf("ALL OK\n");
  return 0;
}
