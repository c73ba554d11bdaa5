// Calls every runtime entry point oversub hooks, once, and prints each one's return
// code. Built against the real /usr/local/cuda runtime; with no GPU or driver every
// call fails, and the preload test checks that the codes are the same with and
// without liboversub (and that nothing crashes). Only codes are printed, never
// values, so the comparison also holds on a machine with a GPU.
#include <cuda_runtime_api.h>

#include <cstdio>
#include <cstring>

extern "C" cudaError_t CUDARTAPI __cudaLaunchKernel(cudaKernel_t, dim3, dim3, void**, size_t,
                                                    cudaStream_t);

namespace {

void report(const char* name, cudaError_t rc) { std::printf("%s %d\n", name, static_cast<int>(rc)); }

void host_function() {}

}  // namespace

int main() {
  int count = -1;
  report("cudaGetDeviceCount", cudaGetDeviceCount(&count));
  void* p = nullptr;
  report("cudaMalloc", cudaMalloc(&p, 1 << 20));
  report("cudaFree(result)", cudaFree(p));
  report("cudaFree(null)", cudaFree(nullptr));
  report("cudaFree(bogus)", cudaFree(reinterpret_cast<void*>(0x1000)));
  size_t free_bytes = 0, total_bytes = 0;
  report("cudaMemGetInfo", cudaMemGetInfo(&free_bytes, &total_bytes));
  p = nullptr;
  report("cudaMallocAsync", cudaMallocAsync(&p, 4096, nullptr));
  report("cudaFreeAsync", cudaFreeAsync(p, nullptr));
  p = nullptr;
  report("cudaMallocFromPoolAsync", cudaMallocFromPoolAsync(&p, 4096, nullptr, nullptr));
  p = nullptr;
  report("cudaMallocManaged", cudaMallocManaged(&p, 4096, cudaMemAttachGlobal));
  size_t pitch = 0;
  p = nullptr;
  report("cudaMallocPitch", cudaMallocPitch(&p, &pitch, 100, 10));
  char a[64] = {1}, b[64] = {};
  report("cudaMemcpy", cudaMemcpy(b, a, sizeof a, cudaMemcpyHostToHost));
  report("cudaMemcpyAsync", cudaMemcpyAsync(b, a, sizeof a, cudaMemcpyDefault, nullptr));
  report("cudaMemcpy2D", cudaMemcpy2D(b, 8, a, 8, 8, 8, cudaMemcpyHostToHost));
  report("cudaMemcpyPeer", cudaMemcpyPeer(b, 0, a, 0, 8));
  report("cudaMemset", cudaMemset(b, 0, sizeof b));
  report("cudaMemsetAsync", cudaMemsetAsync(b, 0, sizeof b, nullptr));
  void* args[1] = {nullptr};
  report("cudaLaunchKernel",
         cudaLaunchKernel(reinterpret_cast<const void*>(&host_function), dim3(1), dim3(1), args,
                          0, nullptr));
  cudaLaunchConfig_t config{};
  config.gridDim = dim3(1);
  config.blockDim = dim3(1);
  report("cudaLaunchKernelExC",
         cudaLaunchKernelExC(&config, reinterpret_cast<const void*>(&host_function), args));
  report("__cudaLaunchKernel", __cudaLaunchKernel(nullptr, dim3(1), dim3(1), args, 0, nullptr));
  report("cudaLaunchCooperativeKernel",
         cudaLaunchCooperativeKernel(reinterpret_cast<const void*>(&host_function), dim3(1),
                                     dim3(1), args, 0, nullptr));
  report("cudaDeviceSynchronize", cudaDeviceSynchronize());
  report("cudaStreamSynchronize", cudaStreamSynchronize(nullptr));
  report("cudaStreamQuery", cudaStreamQuery(nullptr));
  report("cudaEventSynchronize", cudaEventSynchronize(nullptr));
  report("cudaEventQuery", cudaEventQuery(nullptr));
  report("cudaGraphLaunch", cudaGraphLaunch(nullptr, nullptr));
  report("cudaGetLastError", cudaGetLastError());
  std::printf("done\n");
  return 0;
}
