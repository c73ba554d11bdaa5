// Launches the way libraries do, for the profiler tests (profile_test.py, case
// driver): each iteration calls oversub_iteration_begin() (found with dlsym, as a
// script would through ctypes; absent without liboversub), allocates a temporary,
// and launches three kernels: axpy through the driver's cuLaunchKernel with
// kernelParams (as cuBLAS does), pair_sum through cuLaunchKernel with a packed
// argument buffer (CU_LAUNCH_PARAM_BUFFER_POINTER) whose first parameter is a
// struct holding two pointers by value, and axpy again through cudaLaunchKernel.
// Usage: driver_launch_probe ITERATIONS. Prints "ok" and exits 0 when every call
// succeeded and the results are right.
#include <cuda.h>
#include <cuda_runtime.h>
#include <dlfcn.h>

#include <cstdio>
#include <cstdlib>
#include <vector>

#include "simgpu/kernel.h"

struct pair_args {
  const float* a;
  const float* b;
  int n;
};

__global__ void axpy(float* y, const float* x, float alpha, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] += alpha * x[i];
}
SIMGPU_KERNEL_FOOTPRINT(axpy, [](simgpu::footprint& fp, float* y, const float* x, float,
                                 int n) {
  fp.readwrite(y, n);
  fp.read(x, n);
});

__global__ void pair_sum(pair_args p, float* out) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < p.n) out[i] = p.a[i] + p.b[i];
}
SIMGPU_KERNEL_FOOTPRINT(pair_sum, [](simgpu::footprint& fp, pair_args p, float* out) {
  fp.read(p.a, p.n);
  fp.read(p.b, p.n);
  fp.write(out, p.n);
});

namespace {

int g_failures = 0;

void check(int rc, const char* what) {
  if (rc != 0) {
    std::fprintf(stderr, "driver_launch_probe: %s failed with %d\n", what, rc);
    ++g_failures;
  }
}

}  // namespace

int main(int argc, char** argv) {
  const int iterations = argc > 1 ? std::atoi(argv[1]) : 4;
  constexpr int n = 4096;
  using launch_t = decltype(&::cuLaunchKernel);
  void* cuda = dlopen("libcuda.so.1", RTLD_NOW);
  auto cu_launch = cuda ? reinterpret_cast<launch_t>(dlsym(cuda, "cuLaunchKernel")) : nullptr;
  auto begin = reinterpret_cast<void (*)()>(dlsym(RTLD_DEFAULT, "oversub_iteration_begin"));
  if (cu_launch == nullptr) {
    std::fprintf(stderr, "driver_launch_probe: no cuLaunchKernel\n");
    return 1;
  }
  cudaFunction_t axpy_fn = nullptr, pair_fn = nullptr;
  check(cudaGetFuncBySymbol(&axpy_fn, reinterpret_cast<const void*>(&axpy)), "cudaGetFuncBySymbol");
  check(cudaGetFuncBySymbol(&pair_fn, reinterpret_cast<const void*>(&pair_sum)),
        "cudaGetFuncBySymbol");
  float *x = nullptr, *y = nullptr;
  check(cudaMalloc(&x, n * sizeof(float)), "cudaMalloc x");
  check(cudaMalloc(&y, n * sizeof(float)), "cudaMalloc y");
  std::vector<float> ones(n, 1.0f);
  check(cudaMemcpy(x, ones.data(), n * sizeof(float), cudaMemcpyHostToDevice), "upload x");
  check(cudaMemcpy(y, ones.data(), n * sizeof(float), cudaMemcpyHostToDevice), "upload y");
  for (int it = 0; it < iterations; ++it) {
    if (begin != nullptr) begin();
    float* tmp = nullptr;
    check(cudaMalloc(&tmp, n * sizeof(float)), "cudaMalloc tmp");
    float alpha = 0.5f;
    int count = n;
    void* params[] = {&y, &x, &alpha, &count};
    check(cu_launch(reinterpret_cast<CUfunction>(axpy_fn), n / 256, 1, 1, 256, 1, 1, 0, nullptr,
                    params, nullptr),
          "cuLaunchKernel(axpy)");
    struct {
      pair_args p;
      float* out;
    } packed{{x, y, n}, tmp};
    size_t packed_bytes = sizeof packed;
    void* extra[] = {CU_LAUNCH_PARAM_BUFFER_POINTER, &packed, CU_LAUNCH_PARAM_BUFFER_SIZE,
                     &packed_bytes, CU_LAUNCH_PARAM_END};
    check(cu_launch(reinterpret_cast<CUfunction>(pair_fn), n / 256, 1, 1, 256, 1, 1, 0, nullptr,
                    nullptr, extra),
          "cuLaunchKernel(pair_sum, extra)");
    void* args[] = {&y, &tmp, &alpha, &count};
    check(cudaLaunchKernel(reinterpret_cast<const void*>(&axpy), dim3(n / 256), dim3(256), args,
                           0, nullptr),
          "cudaLaunchKernel(axpy)");
    check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
    check(cudaFree(tmp), "cudaFree tmp");
  }
  std::vector<float> out(n);
  check(cudaMemcpy(out.data(), y, n * sizeof(float), cudaMemcpyDeviceToHost), "download y");
  // y_{k+1} = y_k + 0.5 + 0.5 (1 + y_k + 0.5) = 1.5 y_k + 1.25, from y_0 = 1.
  double expect = 1.0;
  for (int it = 0; it < iterations; ++it) expect = 1.5 * expect + 1.25;
  if (out[0] != static_cast<float>(expect) || out[n - 1] != static_cast<float>(expect)) {
    std::fprintf(stderr, "driver_launch_probe: y = %g, expected %g\n", out[0], expect);
    ++g_failures;
  }
  cudaFree(x);
  cudaFree(y);
  if (g_failures != 0) return 1;
  std::printf("ok\n");
  return 0;
}
