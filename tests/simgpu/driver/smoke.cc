// A smoke test of simgpu's libcuda.so.1 through the driver API alone (no runtime):
// not part of the library. Build and run by hand:
//   g++ -std=c++20 -O1 -pthread -I tests/simgpu/include -isystem /usr/local/cuda/include
//       tests/simgpu/driver/smoke.cc build-driver/tests/simgpu/libcuda.so.1 -o /tmp/smoke
//   LD_LIBRARY_PATH=build-driver/tests/simgpu /tmp/smoke [mode]
// Modes: basic (default), uaf, uaf_fault, host_touch, race, norace, vmm, managed, oom
// (SIMGPU_MEMORY=1MiB), capture, fork, threads, fail (SIMGPU_FAIL=alloc:2,launch:1:INVALID_VALUE),
// residency / async_free / per_thread (each reports one race, exit status 3),
// residency_synced, async_free_ordered (no race).
#include <cuda.h>
#include <vector_types.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "simgpu/ext.h"

#define CHECK(call)                                                              \
  do {                                                                           \
    CUresult r_ = (call);                                                        \
    if (r_ != CUDA_SUCCESS) {                                                    \
      const char* n_ = nullptr;                                                  \
      cuGetErrorName(r_, &n_);                                                   \
      std::fprintf(stderr, "%s:%d: %s -> %s\n", __FILE__, __LINE__, #call, n_);  \
      std::exit(1);                                                              \
    }                                                                            \
  } while (0)
#define EXPECT(cond)                                                             \
  do {                                                                           \
    if (!(cond)) {                                                               \
      std::fprintf(stderr, "%s:%d: expected %s\n", __FILE__, __LINE__, #cond);  \
      std::exit(1);                                                              \
    }                                                                            \
  } while (0)

// axpy(float* y, const float* x, float a, int n), written as simgpu runs it.
static void axpy_run(void** args, dim3 grid, dim3 block) {
  float* y = *static_cast<float**>(args[0]);
  const float* x = *static_cast<const float**>(args[1]);
  float a = *static_cast<float*>(args[2]);
  int n = *static_cast<int*>(args[3]);
  for (unsigned i = 0; i < grid.x * block.x; ++i)
    if (static_cast<int>(i) < n) y[i] += a * x[i];
}
static void axpy_host() {}
static void axpy_fp(void** args, dim3, dim3, simgpuFootprint* fp) {
  float* y = *static_cast<float**>(args[0]);
  const float* x = *static_cast<const float**>(args[1]);
  int n = *static_cast<int*>(args[3]);
  fp->accesses[0] = {y, n * sizeof(float), SIMGPU_READWRITE};
  fp->accesses[1] = {x, n * sizeof(float), SIMGPU_READ};
  fp->count = 2;
  fp->flops = 2.0 * n;
}
static void axpy_host2() {}

static CUfunction register_axpy(bool with_footprint) {
  static const simgpuParamInfo params[] = {
      {0, 8, SIMGPU_PARAM_POINTER}, {8, 8, SIMGPU_PARAM_CONST_POINTER}, {16, 4, 0}, {20, 4, 0}};
  return simgpuRegisterKernel(with_footprint ? (const void*)&axpy_host2 : (const void*)&axpy_host,
                              with_footprint ? "axpy_fp" : "axpy", params, 4, &axpy_run,
                              with_footprint ? &axpy_fp : nullptr);
}

static CUresult launch_axpy(CUfunction f, CUdeviceptr y, CUdeviceptr x, float a, int n,
                            CUstream s) {
  void* args[] = {&y, &x, &a, &n};
  return cuLaunchKernel(f, (n + 255) / 256, 1, 1, 256, 1, 1, 0, s, args, nullptr);
}

static void setup() {
  CHECK(cuInit(0));
  CUdevice d;
  CHECK(cuDeviceGet(&d, 0));
  CUcontext c;
  CHECK(cuDevicePrimaryCtxRetain(&c, d));
  CHECK(cuCtxSetCurrent(c));
}

static int basic() {
  int v = 0;
  CHECK(cuDriverGetVersion(&v));
  EXPECT(v == 13000);
  EXPECT(cuMemAlloc(nullptr, 0) == CUDA_ERROR_NOT_INITIALIZED);
  setup();
  char name[128];
  CHECK(cuDeviceGetName(name, sizeof name, 0));
  int sms = 0, major = 0;
  CHECK(cuDeviceGetAttribute(&sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, 0));
  CHECK(cuDeviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, 0));
  std::printf("device %s, %d SMs, cc %d\n", name, sms, major);

  const int n = 1 << 20;
  std::vector<float> hx(n), hy(n);
  for (int i = 0; i < n; ++i) { hx[i] = float(i); hy[i] = 1.0f; }
  CUdeviceptr x, y;
  CHECK(cuMemAlloc(&x, n * sizeof(float)));
  CHECK(cuMemAlloc(&y, n * sizeof(float)));
  size_t free_b, total_b;
  CHECK(cuMemGetInfo(&free_b, &total_b));
  EXPECT(total_b - free_b == 2 * n * sizeof(float));
  CHECK(cuMemcpyHtoD(x, hx.data(), n * sizeof(float)));
  CHECK(cuMemcpyHtoD(y, hy.data(), n * sizeof(float)));
  CUfunction f = register_axpy(false);
  EXPECT(f != nullptr);
  size_t off, sz;
  CHECK(cuFuncGetParamInfo(f, 2, &off, &sz));
  EXPECT(off == 16 && sz == 4);
  CHECK(launch_axpy(f, y, x, 2.0f, n, nullptr));
  CHECK(cuMemcpyDtoH(hy.data(), y, n * sizeof(float)));
  for (int i = 0; i < n; ++i) EXPECT(hy[i] == 1.0f + 2.0f * float(i));
  CHECK(cuMemsetD32(y, 0x3f800000u, n));
  CHECK(cuMemcpyDtoH(hy.data(), y, 16));
  EXPECT(hy[0] == 1.0f && hy[3] == 1.0f);

  // Virtual time of a pinned H2D copy and of a kernel, measured with events.
  void* pinned;
  const size_t bytes = 256u << 20;
  CHECK(cuMemAllocHost(&pinned, bytes));
  CUdeviceptr big;
  CHECK(cuMemAlloc(&big, bytes));
  CUstream s;
  CHECK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
  CUevent e0, e1, e2;
  CHECK(cuEventCreate(&e0, 0));
  CHECK(cuEventCreate(&e1, 0));
  CHECK(cuEventCreate(&e2, 0));
  CHECK(cuEventRecord(e0, s));
  CHECK(cuMemcpyHtoDAsync(big, pinned, bytes, s));
  CHECK(cuEventRecord(e1, s));
  CUfunction g = register_axpy(true);
  CHECK(launch_axpy(g, big, big + bytes / 2, 1.0f, int(bytes / 2 / sizeof(float)), s));
  CHECK(cuEventRecord(e2, s));
  float early_ms = 0;
  EXPECT(cuEventElapsedTime(&early_ms, e0, e1) == CUDA_ERROR_NOT_READY);  // not reached yet
  CHECK(cuEventSynchronize(e2));
  float copy_ms = 0, kernel_ms = 0;
  CHECK(cuEventElapsedTime(&copy_ms, e0, e1));
  CHECK(cuEventElapsedTime(&kernel_ms, e1, e2));
  double want_copy_ms = (5000 + bytes / 50e9 * 1e9) / 1e6;       // h100-pcie model
  double want_kernel_ms = (3.0 * bytes / 2) / 2.0e12 * 1e3;      // rw y + r x
  std::printf("copy %.4f ms (model %.4f), kernel %.4f ms (model %.4f)\n", copy_ms, want_copy_ms,
              kernel_ms, want_kernel_ms);
  EXPECT(std::fabs(copy_ms - want_copy_ms) / want_copy_ms < 0.01);
  EXPECT(std::fabs(kernel_ms - want_kernel_ms) / want_kernel_ms < 0.01);

  // cuGetProcAddress
  void* fn = nullptr;
  CUdriverProcAddressQueryResult st;
  CHECK(cuGetProcAddress("cuMemAlloc", &fn, 13000, 0, &st));
  EXPECT(fn == (void*)&cuMemAlloc_v2 && st == CU_GET_PROC_ADDRESS_SUCCESS);
  CHECK(cuGetProcAddress("cuLaunchKernel", &fn, 13000, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, &st));
  EXPECT(fn != (void*)&cuLaunchKernel);
  EXPECT(cuGetProcAddress("cuNoSuch", &fn, 13000, 0, &st) == CUDA_SUCCESS && fn == nullptr &&
         st == CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND);
  EXPECT(cuGetProcAddress("cuMemAdvise", &fn, 12000, 0, &st) == CUDA_SUCCESS && fn == nullptr &&
         st == CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT);

  CHECK(cuMemFree(x));
  CHECK(cuMemFree(y));
  CHECK(cuMemFree(big));
  CHECK(cuMemFreeHost(pinned));
  CHECK(cuMemGetInfo(&free_b, &total_b));
  EXPECT(free_b == total_b);
  std::printf("basic ok\n");
  return 0;
}

static int uaf() {
  setup();
  CUdeviceptr x, y;
  CHECK(cuMemAlloc(&x, 4096));
  CHECK(cuMemAlloc(&y, 4096));
  CHECK(cuMemFree(x));
  CUfunction f = register_axpy(false);
  CUresult r = launch_axpy(f, y, x, 1.0f, 1024, nullptr);
  EXPECT(r == CUDA_ERROR_ILLEGAL_ADDRESS);
  EXPECT(cuCtxSynchronize() == CUDA_ERROR_ILLEGAL_ADDRESS);
  std::printf("uaf ok\n");
  return 0;
}

static int host_touch() {
  setup();
  CUdeviceptr x;
  CHECK(cuMemAlloc(&x, 4096));
  volatile float* p = reinterpret_cast<float*>(x);
  std::printf("reading %f\n", p[0]);  // must die
  return 0;
}

static int race(bool ordered) {
  setup();
  const int n = 4096;
  CUdeviceptr x, y;
  CHECK(cuMemAlloc(&x, n * 4));
  CHECK(cuMemAlloc(&y, n * 4));
  std::vector<float> h(n);
  CUstream a, b;
  CHECK(cuStreamCreate(&a, CU_STREAM_NON_BLOCKING));
  CHECK(cuStreamCreate(&b, CU_STREAM_NON_BLOCKING));
  CHECK(cuMemsetD32(x, 0, n));
  CHECK(cuMemsetD32(y, 0, n));
  CUfunction f = register_axpy(true);
  CHECK(launch_axpy(f, y, x, 1.0f, n, a));
  if (ordered) {
    CUevent e;
    CHECK(cuEventCreate(&e, CU_EVENT_DISABLE_TIMING));
    CHECK(cuEventRecord(e, a));
    CHECK(cuStreamWaitEvent(b, e, 0));
  }
  CHECK(cuMemcpyDtoHAsync(h.data(), y, n * 4, b));
  CHECK(cuCtxSynchronize());
  std::printf("race(%s) done\n", ordered ? "ordered" : "unordered");
  return 0;
}

static int vmm() {
  setup();
  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = 0;
  size_t gran = 0;
  CHECK(cuMemGetAllocationGranularity(&gran, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
  EXPECT(gran == 2u << 20);
  CUdeviceptr va;
  CHECK(cuMemAddressReserve(&va, 2 * gran, 0, 0, 0));
  CUmemGenericAllocationHandle h, hh;
  CHECK(cuMemCreate(&h, gran, &prop, 0));
  CHECK(cuMemMap(va, gran, 0, h, 0));
  CUmemAccessDesc acc{};
  acc.location = prop.location;
  acc.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  CHECK(cuMemSetAccess(va, gran, &acc, 1));
  std::vector<float> hx(1024, 3.0f), out(1024);
  CHECK(cuMemcpyHtoD(va, hx.data(), 4096));
  CHECK(cuMemUnmap(va, gran));
  CHECK(cuMemMap(va + gran, gran, 0, h, 0));  // remap elsewhere keeps data
  CHECK(cuMemSetAccess(va + gran, gran, &acc, 1));
  CHECK(cuMemcpyDtoH(out.data(), va + gran, 4096));
  EXPECT(out[0] == 3.0f && out[1023] == 3.0f);
  // Host-located handle mapped into device VA: kernels read and write it.
  CUmemAllocationProp hp = prop;
  hp.location.type = CU_MEM_LOCATION_TYPE_HOST;
  hp.location.id = 0;
  size_t free0, free1, total;
  CHECK(cuMemGetInfo(&free0, &total));
  CHECK(cuMemCreate(&hh, gran, &hp, 0));
  CHECK(cuMemGetInfo(&free1, &total));
  EXPECT(free0 == free1);
  CHECK(cuMemMap(va, gran, 0, hh, 0));
  CHECK(cuMemSetAccess(va, gran, &acc, 1));
  CHECK(cuMemcpyHtoD(va, hx.data(), 4096));
  CUfunction f = register_axpy(false);
  CHECK(launch_axpy(f, va + gran, va, 1.0f, 1024, nullptr));
  CHECK(cuMemcpyDtoH(out.data(), va + gran, 4096));
  EXPECT(out[0] == 6.0f);
  CHECK(cuMemUnmap(va, gran));
  CHECK(cuMemUnmap(va + gran, gran));
  CHECK(cuMemRelease(h));
  CHECK(cuMemRelease(hh));
  // A kernel on an unmapped address is reported.
  CUresult r = launch_axpy(f, va, va, 1.0f, 16, nullptr);
  EXPECT(r == CUDA_ERROR_ILLEGAL_ADDRESS);
  std::printf("vmm ok\n");
  return 0;
}

static int managed() {
  setup();
  const int n = 1 << 20;
  CUdeviceptr m;
  CHECK(cuMemAllocManaged(&m, n * 4, CU_MEM_ATTACH_GLOBAL));
  float* p = reinterpret_cast<float*>(m);
  for (int i = 0; i < n; ++i) p[i] = 1.0f;  // host pages
  CUdeviceptr x;
  CHECK(cuMemAlloc(&x, n * 4));
  CHECK(cuMemsetD32(x, 0x40000000u, n));  // 2.0f
  CUfunction f = register_axpy(false);
  CHECK(launch_axpy(f, m, x, 1.0f, n, nullptr));
  CHECK(cuCtxSynchronize());
  EXPECT(p[0] == 3.0f && p[n - 1] == 3.0f);  // migrates back on host touch
  CUmemLocation dev_loc{CU_MEM_LOCATION_TYPE_DEVICE, 0};
  CHECK(cuMemAdvise(m, n * 4, CU_MEM_ADVISE_SET_PREFERRED_LOCATION, dev_loc));
  CHECK(cuMemPrefetchAsync(m, n * 4, dev_loc, 0, nullptr));
  size_t free_b, total_b;
  CHECK(cuMemGetInfo(&free_b, &total_b));
  EXPECT(total_b - free_b >= 2ull * n * 4);
  CHECK(cuCtxSynchronize());
  EXPECT(p[5] == 3.0f);
  CHECK(cuMemFree(m));
  std::printf("managed ok\n");
  return 0;
}

// A kernel writing managed memory on one stream and a prefetch of it to the host on
// another, unordered (Note [Prefetches are migrations] in
// tests/simgpu/driver/managed.h): with concurrent managed access (the default H100
// model) a coherent migration, no race, the kernel's bytes kept; without it (run on
// titanx-maxwell) a race.
static int prefetch_unordered() {
  setup();
  const int n = 1 << 16;
  CUdeviceptr m, x;
  CHECK(cuMemAllocManaged(&m, n * 4, CU_MEM_ATTACH_GLOBAL));
  CHECK(cuMemAlloc(&x, n * 4));
  CHECK(cuMemsetD32(x, 0x40000000u, n));  // 2.0f
  float* p = reinterpret_cast<float*>(m);
  for (int i = 0; i < n; ++i) p[i] = 1.0f;
  CUstream a, b;
  CHECK(cuStreamCreate(&a, CU_STREAM_NON_BLOCKING));
  CHECK(cuStreamCreate(&b, CU_STREAM_NON_BLOCKING));
  CUfunction f = register_axpy(false);
  CHECK(launch_axpy(f, m, x, 1.0f, n, a));
  CUmemLocation host{CU_MEM_LOCATION_TYPE_HOST, 0};
  CHECK(cuMemPrefetchAsync(m, n * 4, host, 0, b));
  CHECK(cuCtxSynchronize());
  EXPECT(p[0] == 3.0f && p[n - 1] == 3.0f);
  CHECK(cuMemFree(m));
  std::printf("prefetch_unordered ok\n");
  return 0;
}

// A prefetch to the device that needs the room a prefetch to the host gives back, on
// another stream, unordered (Note [Room from migrations to the host] in
// tests/simgpu/driver/managed.h): run on the H200's measured model with 6 MiB of
// device memory, where the 4 MiB going out moves at 9.4 GB/s and the 4 MiB coming in
// at 49: the second ends after the first, not before, and each migration runs at its
// direction's managed rate.
static int managed_room() {
  setup();
  const size_t bytes = size_t{4} << 20;
  CUdeviceptr a, b;
  CHECK(cuMemAllocManaged(&a, bytes, CU_MEM_ATTACH_GLOBAL));
  CHECK(cuMemAllocManaged(&b, bytes, CU_MEM_ATTACH_GLOBAL));
  std::memset(reinterpret_cast<void*>(a), 1, bytes);
  std::memset(reinterpret_cast<void*>(b), 2, bytes);
  CUmemLocation dev_loc{CU_MEM_LOCATION_TYPE_DEVICE, 0};
  CUmemLocation host{CU_MEM_LOCATION_TYPE_HOST, 0};
  CHECK(cuMemPrefetchAsync(a, bytes, dev_loc, 0, nullptr));
  CHECK(cuCtxSynchronize());
  CUstream out, in;
  CHECK(cuStreamCreate(&out, CU_STREAM_NON_BLOCKING));
  CHECK(cuStreamCreate(&in, CU_STREAM_NON_BLOCKING));
  CUevent start, out_done, in_done;
  CHECK(cuEventCreate(&start, CU_EVENT_DEFAULT));
  CHECK(cuEventCreate(&out_done, CU_EVENT_DEFAULT));
  CHECK(cuEventCreate(&in_done, CU_EVENT_DEFAULT));
  CHECK(cuEventRecord(start, out));
  CHECK(cuStreamWaitEvent(in, start, 0));
  CHECK(cuMemPrefetchAsync(a, bytes, host, 0, out));
  CHECK(cuEventRecord(out_done, out));
  CHECK(cuMemPrefetchAsync(b, bytes, dev_loc, 0, in));
  CHECK(cuEventRecord(in_done, in));
  CHECK(cuCtxSynchronize());
  float out_ms = 0, in_ms = 0;
  CHECK(cuEventElapsedTime(&out_ms, start, out_done));
  CHECK(cuEventElapsedTime(&in_ms, start, in_done));
  const double out_gbps = bytes / (out_ms * 1e6), in_gbps = bytes / ((in_ms - out_ms) * 1e6);
  std::printf("to the host %.3f ms (%.2f GB/s), to the device ends at %.3f ms (%.2f GB/s after)\n",
              out_ms, out_gbps, in_ms, in_gbps);
  EXPECT(in_ms > out_ms);
  EXPECT(out_gbps > 8.0 && out_gbps < 10.0);
  EXPECT(in_gbps > 40.0 && in_gbps < 55.0);
  CHECK(cuMemFree(a));
  CHECK(cuMemFree(b));
  std::printf("managed_room ok\n");
  return 0;
}

static int oom() {
  setup();  // run with SIMGPU_MEMORY=1MiB
  CUdeviceptr a, b;
  CHECK(cuMemAlloc(&a, 768 << 10));
  EXPECT(cuMemAlloc(&b, 512 << 10) == CUDA_ERROR_OUT_OF_MEMORY);
  CHECK(cuMemFree(a));
  CHECK(cuMemAlloc(&b, 512 << 10));
  std::printf("oom ok\n");
  return 0;
}

static int capture() {
  setup();
  const int n = 1024;
  CUdeviceptr x, y;
  CHECK(cuMemAlloc(&x, n * 4));
  CHECK(cuMemAlloc(&y, n * 4));
  CHECK(cuMemsetD32(x, 0x3f800000u, n));
  CHECK(cuMemsetD32(y, 0, n));
  CUstream s;
  CHECK(cuStreamCreate(&s, 0));
  CUfunction f = register_axpy(true);
  CHECK(cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_GLOBAL));
  CHECK(launch_axpy(f, y, x, 1.0f, n, s));
  CUstreamCaptureStatus st;
  CHECK(cuStreamIsCapturing(s, &st));
  EXPECT(st == CU_STREAM_CAPTURE_STATUS_ACTIVE);
  CUgraph g;
  CHECK(cuStreamEndCapture(s, &g));
  std::vector<float> h(n);
  CHECK(cuMemcpyDtoH(h.data(), y, 4));
  EXPECT(h[0] == 0.0f);  // recorded, not run
  CUgraphExec ge;
  CHECK(cuGraphInstantiateWithFlags(&ge, g, 0));
  CHECK(cuGraphLaunch(ge, s));
  CHECK(cuGraphLaunch(ge, s));
  CHECK(cuStreamSynchronize(s));
  CHECK(cuMemcpyDtoH(h.data(), y, 4));
  EXPECT(h[0] == 2.0f);
  CHECK(cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_GLOBAL));
  EXPECT(cuStreamSynchronize(s) == CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
  EXPECT(cuStreamEndCapture(s, &g) == CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);
  std::printf("capture ok\n");
  return 0;
}


// A kernel whose footprint omits what it reads: the fault path must catch it.
static void reader_run(void** args, dim3, dim3) {
  const float* x = *static_cast<const float**>(args[0]);
  volatile float v = x[0];
  (void)v;
}
static void reader_fp(void**, dim3, dim3, simgpuFootprint*) {}
static void reader_host() {}

static int uaf_fault() {
  setup();
  static const simgpuParamInfo params[] = {{0, 8, SIMGPU_PARAM_CONST_POINTER}};
  CUfunction f = simgpuRegisterKernel((const void*)&reader_host, "reader", params, 1,
                                      &reader_run, &reader_fp);
  CUdeviceptr x;
  CHECK(cuMemAlloc(&x, 4096));
  void* args[] = {&x};
  CHECK(cuLaunchKernel(f, 1, 1, 1, 1, 1, 1, 0, nullptr, args, nullptr));
  CHECK(cuMemFree(x));
  EXPECT(cuLaunchKernel(f, 1, 1, 1, 1, 1, 1, 0, nullptr, args, nullptr) ==
         CUDA_ERROR_ILLEGAL_ADDRESS);
  EXPECT(cuMemAlloc(&x, 16) == CUDA_ERROR_ILLEGAL_ADDRESS);
  std::printf("uaf_fault ok\n");
  return 0;
}

#include <sys/wait.h>
#include <unistd.h>

static int fork_child() {
  setup();
  CUdeviceptr x;
  CHECK(cuMemAlloc(&x, 4096));
  pid_t pid = fork();
  if (pid == 0) {
    CUdeviceptr y;
    int ok = cuMemAlloc(&y, 16) == CUDA_ERROR_NOT_INITIALIZED && cuInit(0) == CUDA_ERROR_NOT_INITIALIZED;
    _exit(ok ? 0 : 1);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  EXPECT(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  CHECK(cuMemFree(x));
  std::printf("fork ok\n");
  return 0;
}

static int api_calls = 0, activities = 0;
static void api_sink(void*, const simgpuApiRecord* r) {
  EXPECT(r->domain == 1 /* CUPTI_CB_DOMAIN_DRIVER_API */ && r->params != nullptr);
  ++api_calls;
}
static void act_sink(void*, const simgpuActivity* a) {
  if (a->kind == SIMGPU_ACTIVITY_KERNEL) {
    EXPECT(a->end_ns > a->start_ns && a->correlationId != 0);
    ++activities;
  }
}

static int fail() {
  setup();  // run with SIMGPU_FAIL=alloc:2,launch:1:CUDA_ERROR_INVALID_VALUE
  simgpuSetApiSink(&api_sink, nullptr);
  simgpuSetActivitySink(&act_sink, nullptr);
  CUdeviceptr a, b;
  CHECK(cuMemAlloc(&a, 4096));
  EXPECT(cuMemAlloc(&b, 4096) == CUDA_ERROR_OUT_OF_MEMORY);
  CHECK(cuMemAlloc(&b, 4096));
  CUfunction f = register_axpy(false);
  EXPECT(launch_axpy(f, a, b, 1.0f, 16, nullptr) == CUDA_ERROR_INVALID_VALUE);
  CHECK(launch_axpy(f, a, b, 1.0f, 16, nullptr));
  EXPECT(api_calls == 2 * 5 && activities == 1);  // 3 allocs + 2 launches
  std::printf("fail ok\n");
  return 0;
}

// Strict residency: unmapping a range a kernel on a stream may still use.
static int residency(bool synced) {
  setup();
  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  const size_t gran = 2u << 20;
  CUdeviceptr va;
  CHECK(cuMemAddressReserve(&va, gran, 0, 0, 0));
  CUmemGenericAllocationHandle h;
  CHECK(cuMemCreate(&h, gran, &prop, 0));
  CHECK(cuMemMap(va, gran, 0, h, 0));
  CUmemAccessDesc acc{};
  acc.location = prop.location;
  acc.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  CHECK(cuMemSetAccess(va, gran, &acc, 1));
  CUstream s;
  CHECK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
  CUfunction f = register_axpy(true);
  CHECK(launch_axpy(f, va, va + gran / 2, 1.0f, 1024, s));
  if (synced) CHECK(cuStreamSynchronize(s));
  CHECK(cuMemUnmap(va, gran));
  CHECK(cuMemRelease(h));
  CHECK(cuMemAddressFree(va, gran));
  std::printf("residency(%s) done\n", synced ? "synced" : "unsynced");
  return 0;
}

// Stream-ordered allocation: a free on another stream, unordered with the kernel.
static int async_free(bool ordered) {
  setup();
  CUstream a, b;
  CHECK(cuStreamCreate(&a, CU_STREAM_NON_BLOCKING));
  CHECK(cuStreamCreate(&b, CU_STREAM_NON_BLOCKING));
  CUdeviceptr x;
  CHECK(cuMemAllocAsync(&x, 4096, a));
  CHECK(cuMemsetD32Async(x, 0, 1024, a));
  CUfunction f = register_axpy(true);
  CHECK(launch_axpy(f, x, x, 1.0f, 1024, a));
  if (ordered) {
    CUevent e;
    CHECK(cuEventCreate(&e, CU_EVENT_DISABLE_TIMING));
    CHECK(cuEventRecord(e, a));
    CHECK(cuStreamWaitEvent(b, e, 0));
  }
  CHECK(cuMemFreeAsync(x, b));
  CHECK(cuCtxSynchronize());
  std::printf("async_free(%s) done\n", ordered ? "ordered" : "unordered");
  return 0;
}

// The per-thread default stream (through _ptsz exports) is ordered with the legacy
// stream but not with a non-blocking stream.
extern "C" CUresult cuMemsetD32Async_ptsz(CUdeviceptr, unsigned int, size_t, CUstream);
static int per_thread() {
  setup();
  CUdeviceptr x;
  CHECK(cuMemAlloc(&x, 4096));
  std::vector<float> h(1024);
  CHECK(cuMemsetD32Async_ptsz(x, 0, 1024, nullptr));  // per-thread stream
  CHECK(cuMemcpyDtoHAsync(h.data(), x, 4096, CU_STREAM_LEGACY));  // ordered: no race
  CHECK(cuCtxSynchronize());
  CUstream nb;
  CHECK(cuStreamCreate(&nb, CU_STREAM_NON_BLOCKING));
  CHECK(cuMemsetD32Async(x, 0, 1024, CU_STREAM_PER_THREAD));
  CHECK(cuMemcpyDtoHAsync(h.data(), x, 4096, nb));  // unordered: one race
  CHECK(cuCtxSynchronize());
  std::printf("per_thread done\n");
  return 0;
}

#include <thread>

// Several threads allocating, launching on their per-thread streams and touching
// managed memory at once: no deadlock, right results.
static int threads() {
  setup();
  CUcontext ctx;
  CHECK(cuCtxGetCurrent(&ctx));
  CUfunction f = register_axpy(false);
  CUdeviceptr shared;
  const int n = 1 << 16;
  CHECK(cuMemAllocManaged(&shared, n * 4, CU_MEM_ATTACH_GLOBAL));
  std::vector<std::thread> ts;
  for (int t = 0; t < 4; ++t) {
    ts.emplace_back([&, t] {
      CHECK(cuCtxSetCurrent(ctx));
      for (int it = 0; it < 50; ++it) {
        CUdeviceptr x, y;
        CHECK(cuMemAlloc(&x, n * 4));
        CHECK(cuMemAlloc(&y, n * 4));
        CHECK(cuMemsetD32Async(x, 0x3f800000u, n, CU_STREAM_PER_THREAD));
        CHECK(cuMemsetD32Async(y, 0, n, CU_STREAM_PER_THREAD));
        CHECK(launch_axpy(f, y, x, float(t), n, CU_STREAM_PER_THREAD));
        float v = -1;
        CHECK(cuMemcpyDtoHAsync(&v, y + 4 * (n - 1), 4, CU_STREAM_PER_THREAD));
        CHECK(cuStreamSynchronize(CU_STREAM_PER_THREAD));
        EXPECT(v == float(t));
        CHECK(cuMemFree(x));
        CHECK(cuMemFree(y));
        volatile float* m = reinterpret_cast<float*>(shared);
        m[t * 1000 + it] = 1.0f;  // host touches of managed memory, concurrently
      }
    });
  }
  for (auto& th : ts) th.join();
  std::printf("threads ok\n");
  return 0;
}

#include <atomic>
#include <condition_variable>
#include <latch>
#include <mutex>

// SIMGPU_LOCKSTEP=1 (Note [Host threads in lockstep] in tests/simgpu/driver/clock.h):
//   - two threads calling at once, one with cheap calls and one with dear ones
//     (cuMemCreate), take turns in host time, their own code included: the host times
//     they log after their calls, in the real order they logged them, never go back;
//   - a thread woken through a condition variable calls no earlier than the host
//     time of the calls made while it slept.
static int lockstep() {
  setup();
  CUcontext ctx;
  CHECK(cuCtxGetCurrent(&ctx));
  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  size_t gran = 0;
  CHECK(cuMemGetAllocationGranularity(&gran, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
  constexpr int kCalls = 300;
  std::vector<uint64_t> log(4 * kCalls);
  std::atomic<size_t> at{0};
  auto note = [&] { log[at.fetch_add(1)] = simgpuVirtualTimeNs(); };
  // Both threads have called once (their clocks have begun) before either goes on. The
  // latch sleeps: a thread spinning on another without a call would look runnable,
  // and hold the other back until taken to be computing.
  std::latch ready(2);
  auto start_together = [&] {
    CUdeviceptr x;
    CHECK(cuMemAlloc(&x, 4096));
    CHECK(cuMemFree(x));
    ready.arrive_and_wait();
  };
  std::thread dear([&] {
    CHECK(cuCtxSetCurrent(ctx));
    start_together();
    for (int i = 0; i < kCalls / 10; ++i) {
      CUmemGenericAllocationHandle h;
      CHECK(cuMemCreate(&h, gran, &prop, 0));
      note();
      CHECK(cuMemRelease(h));
      note();
    }
  });
  start_together();
  for (int i = 0; i < kCalls; ++i) {
    CUdeviceptr x;
    CHECK(cuMemAlloc(&x, 4096));
    CHECK(cuMemFree(x));
    note();
  }
  dear.join();
  uint64_t latest = 0, back = 0;
  for (size_t i = 0; i < at.load(); ++i) {
    if (log[i] < latest) back = std::max(back, latest - log[i]);
    latest = std::max(latest, log[i]);
  }
  std::printf("lockstep: %zu host times logged, the most one went back %.1f us\n", at.load(),
              back / 1e3);
  EXPECT(back <= 1000);  // none; a cuMemCreate is 193 us on the H100 model

  // A sleeper woken by a condition variable.
  std::mutex m;
  std::condition_variable cv;
  bool go = false;
  uint64_t woke_at = 0;
  std::latch asleep(2);
  std::thread sleeper([&] {
    CHECK(cuCtxSetCurrent(ctx));
    CUdeviceptr x;  // its first calls: its clock starts here
    CHECK(cuMemAlloc(&x, 4096));
    CHECK(cuMemFree(x));
    asleep.arrive_and_wait();
    std::unique_lock<std::mutex> lock(m);
    cv.wait(lock, [&] { return go; });
    lock.unlock();
    woke_at = simgpuVirtualTimeNs();
  });
  asleep.arrive_and_wait();
  uint64_t before = simgpuVirtualTimeNs();
  for (int i = 0; i < 100; ++i) {  // host time passes while the sleeper sleeps
    CUmemGenericAllocationHandle h;
    CHECK(cuMemCreate(&h, gran, &prop, 0));
    CHECK(cuMemRelease(h));
  }
  uint64_t signalled = simgpuVirtualTimeNs();
  {
    std::lock_guard<std::mutex> lock(m);
    go = true;
  }
  cv.notify_one();
  sleeper.join();
  std::printf("lockstep: signalled at %.1f us (%.1f us after the sleeper slept), woken at "
              "%.1f us\n", signalled / 1e3, (signalled - before) / 1e3, woke_at / 1e3);
  EXPECT(woke_at + 250000 >= signalled);
  std::printf("lockstep ok\n");
  return 0;
}

int main(int argc, char** argv) {
  std::string mode = argc > 1 ? argv[1] : "basic";
  if (mode == "basic") return basic();
  if (mode == "uaf") return uaf();
  if (mode == "host_touch") return host_touch();
  if (mode == "race") return race(false);
  if (mode == "norace") return race(true);
  if (mode == "vmm") return vmm();
  if (mode == "managed") return managed();
  if (mode == "oom") return oom();
  if (mode == "managed_room") return managed_room();
  if (mode == "capture") return capture();
  if (mode == "uaf_fault") return uaf_fault();
  if (mode == "fork") return fork_child();
  if (mode == "fail") return fail();
  if (mode == "residency") return residency(false);
  if (mode == "residency_synced") return residency(true);
  if (mode == "async_free") return async_free(false);
  if (mode == "async_free_ordered") return async_free(true);
  if (mode == "per_thread") return per_thread();
  if (mode == "threads") return threads();
  if (mode == "lockstep") return lockstep();
  if (mode == "prefetch_unordered") return prefetch_unordered();
  std::fprintf(stderr, "unknown mode %s\n", mode.c_str());
  return 2;
}
