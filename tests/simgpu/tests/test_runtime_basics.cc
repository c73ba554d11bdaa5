// The everyday runtime and driver surface oversub and the workloads stand on, with
// real results: one device and its properties, copies in every direction and
// memset, kernels that compute (launched through cudaLaunchKernel(ExC) and through
// nvcc 13's __cudaGetKernel/__cudaLaunchKernel path; pointers inside struct
// arguments reachable), several host threads at once, streams and events, the
// parameter layout of a kernel as cudaFuncGetParamInfo / cuFuncGetParamInfo report
// it, pointer attributes, error reporting (invalid launches, frees and copies are
// refused with CUDA's codes and are not sticky), stream capture (recorded work runs
// only when the graph is launched; allocating during a global capture invalidates
// it), and driver entry points found through cuGetProcAddress the same as through
// dlsym.
#include <cstring>
#include <numeric>
#include <thread>
#include <vector>

#include "simgpu/kernel.h"
#include "simgpu_test.h"

namespace {

__global__ void saxpy_kernel(float* y, const float* x, float a, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] += a * x[i];
}
SIMGPU_KERNEL(saxpy_kernel);

// A 2-D grid writes its coordinates: checks the index variables.
__global__ void coords_kernel(int* out, int width) {
  int x = blockIdx.x * blockDim.x + threadIdx.x;
  int y = blockIdx.y * blockDim.y + threadIdx.y;
  out[y * width + x] = y * 1000 + x + static_cast<int>(gridDim.x * 0);
}
SIMGPU_KERNEL(coords_kernel);

struct packed_arg {
  char c;
  double d;
};
__global__ void layout_kernel(char a, double b, int* c, packed_arg d, short e) {
  (void)a, (void)b, (void)c, (void)d, (void)e;
}
SIMGPU_KERNEL(layout_kernel);

// Frameworks pass pointers inside structs by value; without a footprint simgpu must
// still find them (every pointer-sized word of the parameters).
struct strided_view {
  int* data;
  int n;
  int stride;
};
__global__ void struct_arg_kernel(strided_view v, int value) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < v.n) v.data[i * v.stride] = value;
}
SIMGPU_KERNEL(struct_arg_kernel);

// Reads through a pointer held in device memory, which its footprint cannot name.
__global__ void pointer_chase_kernel(const float* const* table, float* dst, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) dst[i] = table[0][i] + 1.0f;
}
SIMGPU_KERNEL_FOOTPRINT(pointer_chase_kernel,
                        [](simgpu::footprint& fp, const float* const* table, float* dst, int n) {
                          fp.read(table, 1);
                          fp.write(dst, static_cast<std::size_t>(n));
                        });

__global__ void never_registered_kernel(int* p) { p[0] = 1; }

// What nvcc 13's generated host code calls for `kernel<<<...>>>` (declared in
// crt/device_functions.h, which a host compiler does not see).
extern "C" cudaError_t __cudaGetKernel(cudaKernel_t*, const void*);
extern "C" cudaError_t __cudaLaunchKernel(cudaKernel_t, dim3, dim3, void**, size_t, cudaStream_t);
extern "C" cudaError_t __cudaLaunchKernel_ptsz(cudaKernel_t, dim3, dim3, void**, size_t,
                                               cudaStream_t);

TEST(Runtime, OneDeviceWithProperties) {
  int n = 0;
  CUDA_OK(cudaGetDeviceCount(&n));
  EXPECT_EQ(n, 1);
  CUDA_OK(cudaSetDevice(0));
  int d = -1;
  CUDA_OK(cudaGetDevice(&d));
  EXPECT_EQ(d, 0);
  EXPECT_EQ(cudaSetDevice(1), cudaErrorInvalidDevice);
  cudaGetLastError();
  cudaDeviceProp p{};
  CUDA_OK(cudaGetDeviceProperties(&p, 0));
  EXPECT_GT(std::strlen(p.name), 0u);
  EXPECT_GT(p.totalGlobalMem, 0u);
  EXPECT_EQ(p.maxThreadsPerBlock, 1024);
  EXPECT_GE(p.major, 3);
  EXPECT_EQ(p.unifiedAddressing, 1);
  int v = 0;
  CUDA_OK(cudaDeviceGetAttribute(&v, cudaDevAttrMaxThreadsPerBlock, 0));
  EXPECT_EQ(v, 1024);
  int rt = 0, drv = 0;
  CUDA_OK(cudaRuntimeGetVersion(&rt));
  CUDA_OK(cudaDriverGetVersion(&drv));
  EXPECT_GE(rt, 13000);
  EXPECT_GE(drv, rt);
}

TEST(Runtime, CopiesAndMemsetMoveRealBytes) {
  const int n = 1 << 16;
  std::vector<int> a(n), b(n, 0);
  std::iota(a.begin(), a.end(), 1);
  int *d1 = nullptr, *d2 = nullptr;
  CUDA_OK(cudaMalloc(&d1, n * sizeof(int)));
  CUDA_OK(cudaMalloc(&d2, n * sizeof(int)));
  CUDA_OK(cudaMemcpy(d1, a.data(), n * sizeof(int), cudaMemcpyHostToDevice));
  CUDA_OK(cudaMemcpy(d2, d1, n * sizeof(int), cudaMemcpyDeviceToDevice));
  CUDA_OK(cudaMemcpy(b.data(), d2, n * sizeof(int), cudaMemcpyDeviceToHost));
  EXPECT_EQ(a, b);
  CUDA_OK(cudaMemset(d2 + 10, 0xFF, 5 * sizeof(int)));
  CUDA_OK(cudaMemcpy(b.data(), d2, n * sizeof(int), cudaMemcpyDefault));  // inferred D2H
  EXPECT_EQ(b[9], 10);
  EXPECT_EQ(b[10], -1);
  EXPECT_EQ(b[14], -1);
  EXPECT_EQ(b[15], 16);

  cudaStream_t s;
  CUDA_OK(cudaStreamCreate(&s));
  int* pinned = nullptr;
  CUDA_OK(cudaMallocHost(&pinned, n * sizeof(int)));
  CUDA_OK(cudaMemsetAsync(d1, 0, n * sizeof(int), s));
  CUDA_OK(cudaMemcpyAsync(pinned, d1, n * sizeof(int), cudaMemcpyDeviceToHost, s));
  CUDA_OK(cudaStreamSynchronize(s));
  EXPECT_EQ(cudaStreamQuery(s), cudaSuccess);
  EXPECT_EQ(pinned[n - 1], 0);
  CUDA_OK(cudaFreeHost(pinned));
  CUDA_OK(cudaStreamDestroy(s));
  CUDA_OK(cudaFree(d1));
  CUDA_OK(cudaFree(d2));
}

TEST(Runtime, KernelsComputeRealResults) {
  const int n = 1000;
  std::vector<float> x(n), y(n);
  for (int i = 0; i < n; ++i) x[i] = static_cast<float>(i), y[i] = 1.0f;
  float *dx = nullptr, *dy = nullptr;
  CUDA_OK(cudaMalloc(&dx, n * sizeof(float)));
  CUDA_OK(cudaMalloc(&dy, n * sizeof(float)));
  CUDA_OK(cudaMemcpy(dx, x.data(), n * sizeof(float), cudaMemcpyHostToDevice));
  CUDA_OK(cudaMemcpy(dy, y.data(), n * sizeof(float), cudaMemcpyHostToDevice));
  float a = 0.5f;
  int nn = n;
  void* args[] = {&dy, &dx, &a, &nn};
  CUDA_OK(cudaLaunchKernel(reinterpret_cast<const void*>(&saxpy_kernel), dim3((n + 127) / 128),
                           dim3(128), args, 0, nullptr));
  // The same through cudaLaunchKernelExC.
  cudaLaunchConfig_t cfg{};
  // simgpu/kernel.h defines gridDim and blockDim as macros for kernel bodies; the
  // host-side fields of the same names need them out of the way.
#pragma push_macro("gridDim")
#pragma push_macro("blockDim")
#undef gridDim
#undef blockDim
  cfg.gridDim = dim3((n + 255) / 256);
  cfg.blockDim = dim3(256);
#pragma pop_macro("gridDim")
#pragma pop_macro("blockDim")
  CUDA_OK(cudaLaunchKernelExC(&cfg, reinterpret_cast<const void*>(&saxpy_kernel), args));
  CUDA_OK(cudaMemcpy(y.data(), dy, n * sizeof(float), cudaMemcpyDeviceToHost));
  for (int i = 0; i < n; ++i) ASSERT_FLOAT_EQ(y[i], 1.0f + 2 * 0.5f * i) << i;

  const int w = 48, h = 20;
  int* out = nullptr;
  CUDA_OK(cudaMalloc(&out, w * h * sizeof(int)));
  int width = w;
  void* cargs[] = {&out, &width};
  CUDA_OK(cudaLaunchKernel(reinterpret_cast<const void*>(&coords_kernel), dim3(w / 16, h / 4),
                           dim3(16, 4), cargs, 0, nullptr));
  std::vector<int> grid(w * h);
  CUDA_OK(cudaMemcpy(grid.data(), out, grid.size() * sizeof(int), cudaMemcpyDeviceToHost));
  EXPECT_EQ(grid[0], 0);
  EXPECT_EQ(grid[w - 1], w - 1);
  EXPECT_EQ(grid[(h - 1) * w + 5], (h - 1) * 1000 + 5);
  CUDA_OK(cudaFree(out));
  CUDA_OK(cudaFree(dx));
  CUDA_OK(cudaFree(dy));
}

TEST(Runtime, CompilerGeneratedLaunchPathWorks) {
  const int n = 512;
  std::vector<float> x(n, 2.0f), y(n, 0.0f);
  float *dx = nullptr, *dy = nullptr;
  CUDA_OK(cudaMalloc(&dx, n * sizeof(float)));
  CUDA_OK(cudaMalloc(&dy, n * sizeof(float)));
  CUDA_OK(cudaMemcpy(dx, x.data(), n * sizeof(float), cudaMemcpyHostToDevice));
  CUDA_OK(cudaMemset(dy, 0, n * sizeof(float)));
  cudaKernel_t k = nullptr;
  CUDA_OK(__cudaGetKernel(&k, reinterpret_cast<const void*>(&saxpy_kernel)));
  ASSERT_NE(k, nullptr);
  float a = 1.0f;
  int nn = n;
  void* args[] = {&dy, &dx, &a, &nn};
  CUDA_OK(__cudaLaunchKernel(k, dim3(n / 128), dim3(128), args, 0, nullptr));
  CUDA_OK(__cudaLaunchKernel_ptsz(k, dim3(n / 128), dim3(128), args, 0, nullptr));
  CUDA_OK(cudaDeviceSynchronize());
  CUDA_OK(cudaMemcpy(y.data(), dy, n * sizeof(float), cudaMemcpyDeviceToHost));
  EXPECT_EQ(y[0], 4.0f);
  EXPECT_EQ(y[n - 1], 4.0f);
  CUDA_OK(cudaFree(dx));
  CUDA_OK(cudaFree(dy));
}

TEST(Runtime, PointersInsideStructArgumentsAreReachable) {
  const int n = 100;
  int* d = nullptr;
  CUDA_OK(cudaMalloc(&d, 2 * n * sizeof(int)));
  CUDA_OK(cudaMemset(d, 0, 2 * n * sizeof(int)));
  strided_view v{d, n, 2};
  int value = 41;
  void* args[] = {&v, &value};
  CUDA_OK(cudaLaunchKernel(reinterpret_cast<const void*>(&struct_arg_kernel), dim3(1), dim3(128),
                           args, 0, nullptr));
  std::vector<int> back(2 * n);
  CUDA_OK(cudaMemcpy(back.data(), d, back.size() * sizeof(int), cudaMemcpyDeviceToHost));
  EXPECT_EQ(back[0], 41);
  EXPECT_EQ(back[1], 0);
  EXPECT_EQ(back[2 * (n - 1)], 41);
  CUDA_OK(cudaFree(d));
}

TEST(Runtime, KernelsReachLiveMemoryOutsideTheirFootprint) {
  // Pointer chasing on a GPU reaches any live allocation.
  const int n = 300;
  std::vector<float> x(n);
  std::iota(x.begin(), x.end(), 0.0f);
  float *src = nullptr, *dst = nullptr;
  const float** table = nullptr;
  CUDA_OK(cudaMalloc(&src, n * sizeof(float)));
  CUDA_OK(cudaMalloc(&dst, n * sizeof(float)));
  CUDA_OK(cudaMalloc(&table, sizeof(float*)));
  CUDA_OK(cudaMemcpy(src, x.data(), n * sizeof(float), cudaMemcpyHostToDevice));
  CUDA_OK(cudaMemcpy(table, &src, sizeof src, cudaMemcpyHostToDevice));
  int nn = n;
  void* args[] = {&table, &dst, &nn};
  CUDA_OK(cudaLaunchKernel(reinterpret_cast<const void*>(&pointer_chase_kernel), dim3(3),
                           dim3(128), args, 0, nullptr));
  std::vector<float> y(n);
  CUDA_OK(cudaMemcpy(y.data(), dst, n * sizeof(float), cudaMemcpyDeviceToHost));
  EXPECT_EQ(y[0], 1.0f);
  EXPECT_EQ(y[n - 1], static_cast<float>(n));
  CUDA_OK(cudaFree(src));
  CUDA_OK(cudaFree(dst));
  CUDA_OK(cudaFree(table));
}

TEST(Runtime, HostThreadsWorkConcurrently) {
  // Several host threads, each with its own stream and buffers, as a framework's
  // worker threads and a swap thread would be: results stay right, nothing breaks.
  constexpr int kThreads = 4, kRounds = 50, kN = 2048;
  std::vector<int> failures(kThreads, 0);
  auto work = [&](int t) {
    cudaStream_t s;
    if (cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) != cudaSuccess) {
      ++failures[t];
      return;
    }
    std::vector<float> x(kN, static_cast<float>(t + 1)), y(kN);
    for (int r = 0; r < kRounds; ++r) {
      float *dx = nullptr, *dy = nullptr;
      bool ok = cudaMalloc(&dx, kN * sizeof(float)) == cudaSuccess &&
                cudaMalloc(&dy, kN * sizeof(float)) == cudaSuccess &&
                cudaMemcpyAsync(dx, x.data(), kN * sizeof(float), cudaMemcpyHostToDevice, s) ==
                    cudaSuccess &&
                cudaMemsetAsync(dy, 0, kN * sizeof(float), s) == cudaSuccess;
      float a = static_cast<float>(r);
      int n = kN;
      void* args[] = {&dy, &dx, &a, &n};
      ok = ok && cudaLaunchKernel(reinterpret_cast<const void*>(&saxpy_kernel), dim3(kN / 256),
                                  dim3(256), args, 0, s) == cudaSuccess;
      ok = ok && cudaMemcpyAsync(y.data(), dy, kN * sizeof(float), cudaMemcpyDeviceToHost, s) ==
                     cudaSuccess;
      ok = ok && cudaStreamSynchronize(s) == cudaSuccess;
      ok = ok && y[kN - 1] == a * static_cast<float>(t + 1);
      ok = ok && cudaFree(dx) == cudaSuccess && cudaFree(dy) == cudaSuccess;
      if (!ok) ++failures[t];
    }
    cudaStreamDestroy(s);
  };
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) threads.emplace_back(work, t);
  for (auto& th : threads) th.join();
  for (int t = 0; t < kThreads; ++t) EXPECT_EQ(failures[t], 0) << "thread " << t;
  CUDA_OK(cudaGetLastError());
}

TEST(Runtime, ParameterLayoutAsOnAGpu) {
  const size_t want_offset[] = {0, 8, 16, 24, 40};
  const size_t want_size[] = {1, 8, 8, 16, 2};
  auto fn = reinterpret_cast<const void*>(&layout_kernel);
  for (size_t i = 0; i < 5; ++i) {
    size_t off = 0, size = 0;
    CUDA_OK(cudaFuncGetParamInfo(fn, i, &off, &size));
    EXPECT_EQ(off, want_offset[i]) << "param " << i;
    EXPECT_EQ(size, want_size[i]) << "param " << i;
  }
  size_t off = 0, size = 0;
  EXPECT_EQ(cudaFuncGetParamInfo(fn, 5, &off, &size), cudaErrorInvalidValue);
  cudaGetLastError();

  cudaFunction_t f = nullptr;
  CUDA_OK(cudaGetFuncBySymbol(&f, fn));
  auto param_info = SIMGPU_DRV(cuFuncGetParamInfo);
  CU_OK(param_info(reinterpret_cast<CUfunction>(f), 3, &off, &size));
  EXPECT_EQ(off, 24u);
  EXPECT_EQ(size, 16u);
  EXPECT_EQ(param_info(reinterpret_cast<CUfunction>(f), 5, &off, &size), CUDA_ERROR_INVALID_VALUE);
}

TEST(Runtime, PointerAttributes) {
  void *d = nullptr, *h = nullptr;
  CUDA_OK(cudaMalloc(&d, 4096));
  CUDA_OK(cudaMallocHost(&h, 4096));
  cudaPointerAttributes a{};
  CUDA_OK(cudaPointerGetAttributes(&a, static_cast<char*>(d) + 100));
  EXPECT_EQ(a.type, cudaMemoryTypeDevice);
  EXPECT_EQ(a.device, 0);
  EXPECT_EQ(a.devicePointer, static_cast<char*>(d) + 100);
  CUDA_OK(cudaPointerGetAttributes(&a, h));
  EXPECT_EQ(a.type, cudaMemoryTypeHost);
  int stack = 0;
  CUDA_OK(cudaPointerGetAttributes(&a, &stack));
  EXPECT_EQ(a.type, cudaMemoryTypeUnregistered);
  CUDA_OK(cudaFree(d));
  CUDA_OK(cudaFreeHost(h));
}

TEST(Runtime, InvalidCallsAreRefusedAndNotSticky) {
  int* d = nullptr;
  CUDA_OK(cudaMalloc(&d, 256));
  void* args[] = {&d};
  EXPECT_EQ(cudaLaunchKernel(reinterpret_cast<const void*>(&saxpy_kernel), dim3(1), dim3(2048),
                             args, 0, nullptr),
            cudaErrorInvalidConfiguration);
  EXPECT_EQ(cudaPeekAtLastError(), cudaErrorInvalidConfiguration);
  EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidConfiguration);
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
  EXPECT_EQ(cudaLaunchKernel(reinterpret_cast<const void*>(&never_registered_kernel), dim3(1),
                             dim3(1), args, 0, nullptr),
            cudaErrorInvalidDeviceFunction);
  cudaGetLastError();
  int on_stack = 0;
  EXPECT_EQ(cudaFree(&on_stack), cudaErrorInvalidValue);
  cudaGetLastError();
  CUDA_OK(cudaFree(d));
  EXPECT_EQ(cudaFree(d), cudaErrorInvalidValue) << "double free";
  cudaGetLastError();
  CUDA_OK(cudaDeviceSynchronize());
  void* p = nullptr;
  CUDA_OK(cudaMalloc(&p, 256));
  CUDA_OK(cudaFree(p));
  // Copies and memsets on freed memory are refused and move nothing.
  std::vector<int> host(64, 7);
  EXPECT_EQ(cudaMemcpy(host.data(), d, 256, cudaMemcpyDeviceToHost), cudaErrorInvalidValue);
  EXPECT_EQ(host[0], 7);
  cudaGetLastError();
  EXPECT_EQ(cudaMemcpy(d, host.data(), 256, cudaMemcpyHostToDevice), cudaErrorInvalidValue);
  cudaGetLastError();
  EXPECT_EQ(cudaMemset(d, 0, 256), cudaErrorInvalidValue);
  cudaGetLastError();
  CUDA_OK(cudaDeviceSynchronize());  // none of these is sticky
  EXPECT_STREQ(cudaGetErrorName(cudaErrorMemoryAllocation), "cudaErrorMemoryAllocation");
  EXPECT_GT(std::strlen(cudaGetErrorString(cudaErrorIllegalAddress)), 0u);
}

TEST(Runtime, EventsAndStreamOrdering) {
  cudaStream_t a, b;
  CUDA_OK(cudaStreamCreateWithFlags(&a, cudaStreamNonBlocking));
  CUDA_OK(cudaStreamCreateWithFlags(&b, cudaStreamNonBlocking));
  unsigned flags = 0;
  CUDA_OK(cudaStreamGetFlags(a, &flags));
  EXPECT_EQ(flags, static_cast<unsigned>(cudaStreamNonBlocking));
  cudaEvent_t timed, untimed;
  CUDA_OK(cudaEventCreate(&timed));
  CUDA_OK(cudaEventCreateWithFlags(&untimed, cudaEventDisableTiming));
  CUDA_OK(cudaEventRecord(timed, a));
  CUDA_OK(cudaEventRecord(untimed, a));
  CUDA_OK(cudaStreamWaitEvent(b, untimed, 0));
  CUDA_OK(cudaEventSynchronize(untimed));
  EXPECT_EQ(cudaEventQuery(untimed), cudaSuccess);
  float ms = 0;
  EXPECT_EQ(cudaEventElapsedTime(&ms, timed, untimed), cudaErrorInvalidResourceHandle);
  cudaGetLastError();
  cudaEvent_t never;
  CUDA_OK(cudaEventCreate(&never));
  EXPECT_EQ(cudaEventElapsedTime(&ms, timed, never), cudaErrorInvalidResourceHandle)
      << "an event never recorded has no time";
  cudaGetLastError();
  CUDA_OK(cudaEventDestroy(never));
  CUDA_OK(cudaEventDestroy(timed));
  CUDA_OK(cudaEventDestroy(untimed));
  CUDA_OK(cudaStreamDestroy(a));
  CUDA_OK(cudaStreamDestroy(b));
}

TEST(Runtime, StreamCaptureRecordsAndReplays) {
  cudaStream_t s;
  CUDA_OK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  cudaStreamCaptureStatus st = cudaStreamCaptureStatusActive;
  CUDA_OK(cudaStreamIsCapturing(s, &st));
  EXPECT_EQ(st, cudaStreamCaptureStatusNone);

  const int n = 256;
  float *x = nullptr, *y = nullptr;
  CUDA_OK(cudaMalloc(&x, n * sizeof(float)));
  CUDA_OK(cudaMalloc(&y, n * sizeof(float)));
  std::vector<float> ones(n, 1.0f), back(n, 0.0f);
  CUDA_OK(cudaMemcpy(x, ones.data(), n * sizeof(float), cudaMemcpyHostToDevice));
  CUDA_OK(cudaMemset(y, 0, n * sizeof(float)));

  CUDA_OK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
  CUDA_OK(cudaStreamIsCapturing(s, &st));
  EXPECT_EQ(st, cudaStreamCaptureStatusActive);
  float a = 3.0f;
  int nn = n;
  void* args[] = {&y, &x, &a, &nn};
  CUDA_OK(cudaLaunchKernel(reinterpret_cast<const void*>(&saxpy_kernel), dim3(n / 128), dim3(128),
                           args, 0, s));
  cudaGraph_t g = nullptr;
  CUDA_OK(cudaStreamEndCapture(s, &g));
  ASSERT_NE(g, nullptr);
  CUDA_OK(cudaMemcpy(back.data(), y, n * sizeof(float), cudaMemcpyDeviceToHost));
  EXPECT_EQ(back[0], 0.0f) << "captured work does not run";

  cudaGraphExec_t exec = nullptr;
  CUDA_OK(cudaGraphInstantiate(&exec, g, 0));
  CUDA_OK(cudaGraphLaunch(exec, s));
  CUDA_OK(cudaGraphLaunch(exec, s));
  CUDA_OK(cudaStreamSynchronize(s));
  CUDA_OK(cudaMemcpy(back.data(), y, n * sizeof(float), cudaMemcpyDeviceToHost));
  EXPECT_EQ(back[n - 1], 6.0f) << "each launch replays the kernel once";
  CUDA_OK(cudaGraphExecDestroy(exec));
  CUDA_OK(cudaGraphDestroy(g));

  // Allocating device memory during a global-mode capture is prohibited and
  // invalidates the capture.
  CUDA_OK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
  void* p = nullptr;
  EXPECT_EQ(cudaMalloc(&p, 256), cudaErrorStreamCaptureUnsupported);
  cudaGraph_t bad = nullptr;
  EXPECT_EQ(cudaStreamEndCapture(s, &bad), cudaErrorStreamCaptureInvalidated);
  cudaGetLastError();
  CUDA_OK(cudaStreamIsCapturing(s, &st));
  EXPECT_EQ(st, cudaStreamCaptureStatusNone);

  CUDA_OK(cudaFree(x));
  CUDA_OK(cudaFree(y));
  CUDA_OK(cudaStreamDestroy(s));
}

TEST(Runtime, DriverEntryPointsAgree) {
  CUDA_OK(cudaFree(nullptr));
  auto get_proc = SIMGPU_DRV(cuGetProcAddress);
  void* via_proc = nullptr;
  CUdriverProcAddressQueryResult q{};
  CU_OK(get_proc("cuMemAlloc", &via_proc, 13000, CU_GET_PROC_ADDRESS_DEFAULT, &q));
  EXPECT_EQ(q, CU_GET_PROC_ADDRESS_SUCCESS);
  EXPECT_EQ(via_proc, reinterpret_cast<void*>(simgpu_test::driver<void*>("cuMemAlloc_v2")));
  CU_OK(get_proc("cuLaunchKernel", &via_proc, 13000, CU_GET_PROC_ADDRESS_DEFAULT, &q));
  EXPECT_EQ(via_proc, reinterpret_cast<void*>(simgpu_test::driver<void*>("cuLaunchKernel")));
  // As a real driver answers: success, a null pointer, and the status saying why.
  CU_OK(get_proc("cuNoSuchFunction", &via_proc, 13000, CU_GET_PROC_ADDRESS_DEFAULT, &q));
  EXPECT_EQ(via_proc, nullptr);
  EXPECT_EQ(q, CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND);

  void* via_rt = nullptr;
  cudaDriverEntryPointQueryResult rq{};
  CUDA_OK(cudaGetDriverEntryPointByVersion("cuMemCreate", &via_rt, 13000, cudaEnableDefault, &rq));
  EXPECT_EQ(rq, cudaDriverEntryPointSuccess);
  EXPECT_EQ(via_rt, reinterpret_cast<void*>(simgpu_test::driver<void*>("cuMemCreate")));
}

}  // namespace
