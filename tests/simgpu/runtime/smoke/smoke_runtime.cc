// Smoke test for simgpu's libcudart.so.13 and libcupti.so.13 together with the
// driver: kernels written with simgpu/kernel.h, launched through every runtime
// launch entry point, copies, sets, streams, events, allocation errors, and the
// CUPTI callbacks and activity records those calls produce. Not part of the
// libraries; built by hand (see build.sh next to it) until the test suite takes
// over what it checks. Prints each failed check and exits non-zero if any failed.
#include <cuda.h>
#include <cuda_runtime_api.h>
#include <cupti.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>
#include <thread>
#include <vector>

// The kernels (smoke_kernels.cc): kernel.h's threadIdx/blockDim/gridDim macros
// would clash with cudaLaunchConfig_t::gridDim here.
void axpy(float* y, const float* x, float a, int n);
void fill(float* y, float v, int n);

// nvcc-style registration of a kernel simgpu cannot run.
extern "C" void** __cudaRegisterFatBinary(void*);
extern "C" void __cudaUnregisterFatBinary(void**);
extern "C" void __cudaRegisterFunction(void**, const char*, char*, const char*, int, uint3*, uint3*,
                                       dim3*, dim3*, int*);
extern "C" cudaError_t __cudaGetKernel(cudaKernel_t*, const void*);
extern "C" cudaError_t __cudaLaunchKernel(cudaKernel_t, dim3, dim3, void**, size_t, cudaStream_t);
// What nvcc -default-stream per-thread code calls.
extern "C" cudaError_t cudaLaunchKernel_ptsz(const void*, dim3, dim3, void**, size_t, cudaStream_t);
extern "C" cudaError_t cudaMemcpyAsync_ptsz(void*, const void*, size_t, cudaMemcpyKind,
                                            cudaStream_t);
extern "C" cudaError_t cudaStreamSynchronize_ptsz(cudaStream_t);
static void device_only_stub() {}

static std::atomic<int> failures{0};
#define CHECK(cond)                                                        \
  do {                                                                     \
    if (!(cond)) {                                                         \
      std::fprintf(stderr, "FAIL %s:%d: %s\n", __FILE__, __LINE__, #cond); \
      ++failures;                                                          \
    }                                                                      \
  } while (0)
#define CHECK_CUDA(call) CHECK((call) == cudaSuccess)

// ---- CUPTI client -------------------------------------------------------------------

struct api_seen {
  int enters = 0;
  int exits = 0;
  std::string symbol;
  uint32_t correlation = 0;
  bool correlation_data_ok = true;
  dim3 grid{0, 0, 0};
};
static std::map<int, api_seen> runtime_calls;
static std::map<int, api_seen> driver_calls;
static std::vector<uint32_t> launch_correlations;

static void CUPTIAPI on_api(void*, CUpti_CallbackDomain domain, CUpti_CallbackId cbid,
                            const void* data) {
  const auto* cb = static_cast<const CUpti_CallbackData*>(data);
  api_seen& s = (domain == CUPTI_CB_DOMAIN_RUNTIME_API ? runtime_calls : driver_calls)[cbid];
  if (cb->callbackSite == CUPTI_API_ENTER) {
    ++s.enters;
    *cb->correlationData = 0xfeed0000u + cb->correlationId;
    s.correlation = cb->correlationId;
    if (cb->symbolName != nullptr) s.symbol = cb->symbolName;
    if (domain == CUPTI_CB_DOMAIN_RUNTIME_API &&
        cbid == CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernel_v7000) {
      s.grid = static_cast<const cudaLaunchKernel_v7000_params*>(cb->functionParams)->gridDim;
      launch_correlations.push_back(cb->correlationId);
    }
  } else {
    ++s.exits;
    if (*cb->correlationData != 0xfeed0000u + cb->correlationId) s.correlation_data_ok = false;
    if (cb->functionReturnValue == nullptr) s.correlation_data_ok = false;
  }
}

struct kernel_record {
  std::string name;
  uint64_t start, end;
  uint32_t correlation;
};
static std::vector<kernel_record> kernels;
static std::vector<CUpti_ActivityMemcpy6> memcpys;
static std::vector<CUpti_ActivityMemset4> memsets;
static int buffers_completed = 0;

static void CUPTIAPI buffer_requested(uint8_t** buffer, size_t* size, size_t* max_records) {
  *size = 1024;  // small, so that buffers are handed over mid-run
  *buffer = static_cast<uint8_t*>(std::aligned_alloc(8, *size));
  *max_records = 0;
}

static void CUPTIAPI buffer_completed(CUcontext, uint32_t, uint8_t* buffer, size_t, size_t valid) {
  ++buffers_completed;
  CUpti_Activity* r = nullptr;
  while (cuptiActivityGetNextRecord(buffer, valid, &r) == CUPTI_SUCCESS) {
    if (r->kind == CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL) {
      auto* k = reinterpret_cast<CUpti_ActivityKernel10*>(r);
      kernels.push_back({k->name ? k->name : "", k->start, k->end, k->correlationId});
    } else if (r->kind == CUPTI_ACTIVITY_KIND_MEMCPY) {
      memcpys.push_back(*reinterpret_cast<CUpti_ActivityMemcpy6*>(r));
    } else if (r->kind == CUPTI_ACTIVITY_KIND_MEMSET) {
      memsets.push_back(*reinterpret_cast<CUpti_ActivityMemset4*>(r));
    }
  }
  std::free(buffer);
}

static bool contains(const std::string& s, const char* part) {
  return s.find(part) != std::string::npos;
}

int main() {
  // CUPTI first, as a profiler would.
  CUpti_SubscriberHandle sub = nullptr;
  CUpti_SubscriberParams params{};
  params.structSize = CUpti_SubscriberParams_STRUCT_SIZE;
  params.subscriberName = "smoke";
  CHECK(cuptiSubscribe_v2(&sub, on_api, nullptr, &params) == CUPTI_SUCCESS);
  CUpti_SubscriberHandle second = nullptr;
  char holder[CUPTI_OLD_SUBSCRIBER_NAME_MIN_LEN] = {};
  CUpti_SubscriberParams params2{};
  params2.structSize = CUpti_SubscriberParams_STRUCT_SIZE;
  params2.oldSubscriberName = holder;
  params2.oldSubscriberSize = sizeof(holder);
  CHECK(cuptiSubscribe_v2(&second, on_api, nullptr, &params2) ==
        CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED);
  CHECK(std::strstr(holder, "smoke") != nullptr);
  CHECK(cuptiEnableDomain(1, sub, CUPTI_CB_DOMAIN_RUNTIME_API) == CUPTI_SUCCESS);
  CHECK(cuptiEnableDomain(1, sub, CUPTI_CB_DOMAIN_DRIVER_API) == CUPTI_SUCCESS);
  uint32_t on = 0;
  CHECK(cuptiGetCallbackState(&on, sub, CUPTI_CB_DOMAIN_RUNTIME_API,
                              CUPTI_RUNTIME_TRACE_CBID_cudaMalloc_v3020) == CUPTI_SUCCESS &&
        on);
  CHECK(cuptiActivityRegisterCallbacks(buffer_requested, buffer_completed) == CUPTI_SUCCESS);
  CHECK(cuptiActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL) == CUPTI_SUCCESS);
  CHECK(cuptiActivityEnable(CUPTI_ACTIVITY_KIND_MEMCPY) == CUPTI_SUCCESS);
  CHECK(cuptiActivityEnable(CUPTI_ACTIVITY_KIND_MEMSET) == CUPTI_SUCCESS);

  // Devices.
  int count = 0;
  CHECK_CUDA(cudaGetDeviceCount(&count));
  CHECK(count >= 1);
  if (count < 1) return 1;  // nothing below can work without a device
  CHECK_CUDA(cudaSetDevice(0));
  cudaDeviceProp prop{};
  CHECK_CUDA(cudaGetDeviceProperties(&prop, 0));
  std::printf("device: %s, %zu bytes, cc %d.%d, %d SMs\n", prop.name, prop.totalGlobalMem,
              prop.major, prop.minor, prop.multiProcessorCount);
  CHECK(prop.name[0] != '\0' && prop.totalGlobalMem > 0);
  CHECK(cudaSetDevice(count) == cudaErrorInvalidDevice);
  CHECK(cudaGetLastError() == cudaErrorInvalidDevice);
  CHECK(cudaGetLastError() == cudaSuccess);

  // Memory, copies, kernels.
  const int n = 1000;
  std::vector<float> hx(n), hy(n);
  for (int i = 0; i < n; ++i) hx[i] = float(i), hy[i] = 1.0f;
  float *x = nullptr, *y = nullptr;
  CHECK_CUDA(cudaMalloc(reinterpret_cast<void**>(&x), n * sizeof(float)));
  CHECK_CUDA(cudaMalloc(reinterpret_cast<void**>(&y), n * sizeof(float)));
  CHECK_CUDA(cudaMemcpy(x, hx.data(), n * sizeof(float), cudaMemcpyHostToDevice));
  CHECK_CUDA(cudaMemcpy(y, hy.data(), n * sizeof(float), cudaMemcpyDefault));
  float a = 2.0f;
  int nn = n;
  void* args[] = {&y, &x, &a, &nn};
  CHECK_CUDA(
      cudaLaunchKernel(reinterpret_cast<const void*>(axpy), dim3(4), dim3(256), args, 0, nullptr));
  cudaKernel_t handle = nullptr;
  CHECK_CUDA(__cudaGetKernel(&handle, reinterpret_cast<const void*>(axpy)));
  CHECK_CUDA(__cudaLaunchKernel(handle, dim3(4), dim3(256), args, 0, nullptr));
  cudaLaunchConfig_t config{};
  config.gridDim = dim3(4);
  config.blockDim = dim3(256);
  CHECK_CUDA(cudaLaunchKernelExC(&config, reinterpret_cast<const void*>(axpy), args));
  CHECK_CUDA(cudaDeviceSynchronize());
  CHECK_CUDA(cudaMemcpy(hy.data(), y, n * sizeof(float), cudaMemcpyDeviceToHost));
  bool right = true;
  for (int i = 0; i < n; ++i) right = right && hy[i] == 1.0f + 3 * 2.0f * float(i);
  CHECK(right);

  size_t offset = 0, size = 0;
  CHECK_CUDA(cudaFuncGetParamInfo(reinterpret_cast<const void*>(axpy), 2, &offset, &size));
  CHECK(offset == 16 && size == 4);
  CHECK(cudaFuncGetParamInfo(reinterpret_cast<const void*>(axpy), 4, &offset, &size) !=
        cudaSuccess);
  (void)cudaGetLastError();
  const char* name = nullptr;
  CHECK_CUDA(cudaFuncGetName(&name, reinterpret_cast<const void*>(axpy)));
  CHECK(name != nullptr && contains(name, "axpy"));
  cudaFunction_t fn = nullptr;
  CHECK_CUDA(cudaGetFuncBySymbol(&fn, reinterpret_cast<const void*>(axpy)));
  // The context's CUfunction, not the library's CUkernel that __cudaGetKernel gave.
  CHECK(fn != nullptr && reinterpret_cast<void*>(fn) != reinterpret_cast<void*>(handle));

  // Launch errors.
  CHECK(cudaLaunchKernel(reinterpret_cast<const void*>(axpy), dim3(1), dim3(0), args, 0, nullptr) ==
        cudaErrorInvalidConfiguration);
  void** fatbin = __cudaRegisterFatBinary(nullptr);
  __cudaRegisterFunction(fatbin, reinterpret_cast<const char*>(&device_only_stub), nullptr,
                         "_Z16device_only_stubv", -1, nullptr, nullptr, nullptr, nullptr, nullptr);
  CHECK(cudaLaunchKernel(reinterpret_cast<const void*>(&device_only_stub), dim3(1), dim3(1),
                         nullptr, 0, nullptr) == cudaErrorInvalidDeviceFunction);
  CHECK(runtime_calls[CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernel_v7000].symbol ==
        "_Z16device_only_stubv");
  CHECK(cudaPeekAtLastError() == cudaErrorInvalidDeviceFunction);
  (void)cudaGetLastError();
  __cudaUnregisterFatBinary(fatbin);

  // Memset, streams, events.
  cudaStream_t s1 = nullptr, s2 = nullptr;
  CHECK_CUDA(cudaStreamCreateWithFlags(&s1, cudaStreamNonBlocking));
  CHECK_CUDA(cudaStreamCreate(&s2));
  cudaEvent_t e0 = nullptr, e1 = nullptr;
  CHECK_CUDA(cudaEventCreate(&e0));
  CHECK_CUDA(cudaEventCreate(&e1));
  CHECK_CUDA(cudaEventRecord(e0, s1));
  CHECK_CUDA(cudaMemsetAsync(y, 0, n * sizeof(float), s1));
  void* fill_args[] = {&y, &a, &nn};
  CHECK_CUDA(
      cudaLaunchKernel(reinterpret_cast<const void*>(fill), dim3(4), dim3(256), fill_args, 0, s1));
  CHECK_CUDA(cudaEventRecord(e1, s1));
  CHECK_CUDA(cudaStreamWaitEvent(s2, e1, 0));
  CHECK_CUDA(cudaMemcpyAsync(hy.data(), y, n * sizeof(float), cudaMemcpyDeviceToHost, s2));
  CHECK_CUDA(cudaStreamSynchronize(s2));
  CHECK(hy[0] == 2.0f && hy[n - 1] == 2.0f);
  float ms = -1;
  CHECK_CUDA(cudaEventElapsedTime(&ms, e0, e1));
  std::printf("elapsed (virtual): %g ms\n", ms);
  CHECK(ms > 0);
  unsigned long long sid = 0;
  CHECK_CUDA(cudaStreamGetId(s1, &sid));
  unsigned flags = 0;
  CHECK_CUDA(cudaStreamGetFlags(s1, &flags));
  CHECK(flags == cudaStreamNonBlocking);
  CHECK_CUDA(cudaStreamQuery(s1));

  // Pointer attributes, host, managed and pooled memory.
  cudaPointerAttributes attr{};
  CHECK_CUDA(cudaPointerGetAttributes(&attr, y));
  CHECK(attr.type == cudaMemoryTypeDevice && attr.devicePointer == y);
  CHECK_CUDA(cudaPointerGetAttributes(&attr, hx.data()));
  CHECK(attr.type == cudaMemoryTypeUnregistered);
  float* pinned = nullptr;
  CHECK_CUDA(cudaMallocHost(reinterpret_cast<void**>(&pinned), 4096));
  CHECK_CUDA(cudaPointerGetAttributes(&attr, pinned));
  CHECK(attr.type == cudaMemoryTypeHost);
  CHECK_CUDA(cudaFreeHost(pinned));
  float* managed = nullptr;
  CHECK_CUDA(cudaMallocManaged(reinterpret_cast<void**>(&managed), n * sizeof(float)));
  CHECK_CUDA(cudaPointerGetAttributes(&attr, managed));
  CHECK(attr.type == cudaMemoryTypeManaged);
  for (int i = 0; i < n; ++i) managed[i] = 1.0f;
  cudaMemLocation dev0{cudaMemLocationTypeDevice, 0};
  CHECK_CUDA(cudaMemAdvise(managed, n * sizeof(float), cudaMemAdviseSetPreferredLocation, dev0));
  // Devices without concurrent managed access (K40) refuse prefetches, as CUDA does.
  cudaError_t prefetched = cudaMemPrefetchAsync(managed, n * sizeof(float), dev0, 0, s1);
  CHECK(prop.concurrentManagedAccess ? prefetched == cudaSuccess : prefetched != cudaSuccess);
  (void)cudaGetLastError();
  void* managed_args[] = {&managed, &x, &a, &nn};
  CHECK_CUDA(cudaLaunchKernel(reinterpret_cast<const void*>(axpy), dim3(4), dim3(256), managed_args,
                              0, s1));
  CHECK_CUDA(cudaStreamSynchronize(s1));
  CHECK(managed[10] == 1.0f + 2.0f * 10);
  CHECK_CUDA(cudaFree(managed));
  void* pooled = nullptr;
  CHECK_CUDA(cudaMallocAsync(&pooled, 1 << 20, s1));
  CHECK_CUDA(cudaFreeAsync(pooled, s1));
  CHECK_CUDA(cudaStreamSynchronize(s1));
  size_t free_bytes = 0, total_bytes = 0;
  CHECK_CUDA(cudaMemGetInfo(&free_bytes, &total_bytes));
  CHECK(total_bytes > 0 && free_bytes <= total_bytes);

  // Pitched allocation and 2D copies (rows of 100 floats in a pitched matrix).
  {
    const size_t width = 100 * sizeof(float), rows = 8;
    void* pitched = nullptr;
    size_t pitch = 0;
    CHECK_CUDA(cudaMallocPitch(&pitched, &pitch, width, rows));
    CHECK(pitch >= width && pitch % 256 == 0);
    std::vector<float> in(100 * rows), out(100 * rows, -1.0f);
    for (size_t i = 0; i < in.size(); ++i) in[i] = float(i);
    CHECK_CUDA(cudaMemcpy2D(pitched, pitch, in.data(), width, width, rows, cudaMemcpyHostToDevice));
    CHECK_CUDA(cudaMemcpy2DAsync(out.data(), width, pitched, pitch, width, rows,
                                 cudaMemcpyDeviceToHost, s1));
    CHECK_CUDA(cudaStreamSynchronize(s1));
    CHECK(out == in);
    CHECK(cudaMemcpy2D(pitched, pitch, in.data(), width, pitch + 1, rows, cudaMemcpyHostToDevice) ==
          cudaErrorInvalidPitchValue);
    (void)cudaGetLastError();
    CHECK_CUDA(cudaFree(pitched));
  }

  // Out of memory keeps CUDA's code and is not sticky.
  void* huge = nullptr;
  CHECK(cudaMalloc(&huge, total_bytes + 1) == cudaErrorMemoryAllocation);
  CHECK(cudaGetLastError() == cudaErrorMemoryAllocation);
  CHECK(cudaGetLastError() == cudaSuccess);

  void* entry = nullptr;
  cudaDriverEntryPointQueryResult q{};
  CHECK_CUDA(cudaGetDriverEntryPointByVersion("cuMemAlloc", &entry, 13000, cudaEnableDefault, &q));
  CHECK(entry != nullptr && q == cudaDriverEntryPointSuccess);

  // Per-thread default stream entry points, from several threads at once.
  {
    std::vector<std::thread> threads;
    for (int t = 0; t < 4; ++t) {
      threads.emplace_back([&, t] {
        float* buf = nullptr;
        float v = float(t);
        int m = 256;
        CHECK_CUDA(cudaMalloc(reinterpret_cast<void**>(&buf), m * sizeof(float)));
        void* targs[] = {&buf, &v, &m};
        CHECK_CUDA(cudaLaunchKernel_ptsz(reinterpret_cast<const void*>(fill), dim3(1), dim3(256),
                                         targs, 0, nullptr));
        std::vector<float> back(m);
        CHECK_CUDA(cudaMemcpyAsync_ptsz(back.data(), buf, m * sizeof(float), cudaMemcpyDeviceToHost,
                                        nullptr));
        CHECK_CUDA(cudaStreamSynchronize_ptsz(nullptr));
        CHECK(back[0] == v && back[m - 1] == v);
        CHECK_CUDA(cudaFree(buf));
      });
    }
    for (std::thread& t : threads) t.join();
  }

  // Stream capture and graph replay.
  {
    cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
    CHECK_CUDA(cudaStreamBeginCapture(s1, cudaStreamCaptureModeGlobal));
    CHECK_CUDA(cudaStreamIsCapturing(s1, &status));
    CHECK(status == cudaStreamCaptureStatusActive);
    unsigned long long capture_id = 0;
    CHECK_CUDA(cudaStreamGetCaptureInfo(s1, &status, &capture_id));
    float three = 3.0f;
    void* gargs[] = {&y, &three, &nn};
    CHECK_CUDA(
        cudaLaunchKernel(reinterpret_cast<const void*>(fill), dim3(4), dim3(256), gargs, 0, s1));
    cudaGraph_t graph = nullptr;
    CHECK_CUDA(cudaStreamEndCapture(s1, &graph));
    cudaGraphExec_t exec = nullptr;
    CHECK_CUDA(cudaGraphInstantiate(&exec, graph, 0));
    CHECK_CUDA(cudaGraphLaunch(exec, s1));
    CHECK_CUDA(cudaStreamSynchronize(s1));
    CHECK_CUDA(cudaMemcpy(hy.data(), y, n * sizeof(float), cudaMemcpyDeviceToHost));
    CHECK(hy[0] == 3.0f && hy[n - 1] == 3.0f);
    CHECK_CUDA(cudaGraphExecDestroy(exec));
    CHECK_CUDA(cudaGraphDestroy(graph));
  }

  // A forked child cannot use CUDA: cudaErrorInitializationError, not a crash.
  {
    pid_t pid = fork();
    if (pid == 0) {
      void* p = nullptr;
      _exit(cudaMalloc(&p, 16) == cudaErrorInitializationError ? 0 : 1);
    }
    int wstatus = 0;
    CHECK(pid > 0 && waitpid(pid, &wstatus, 0) == pid && WIFEXITED(wstatus) &&
          WEXITSTATUS(wstatus) == 0);
  }

  CHECK_CUDA(cudaEventDestroy(e0));
  CHECK_CUDA(cudaEventDestroy(e1));
  CHECK_CUDA(cudaStreamDestroy(s1));
  CHECK_CUDA(cudaStreamDestroy(s2));
  CHECK_CUDA(cudaFree(x));
  CHECK_CUDA(cudaFree(y));

  // What CUPTI saw.
  CHECK(cuptiActivityFlushAll(1) == CUPTI_SUCCESS);
  const api_seen& launch = runtime_calls[CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernel_v7000];
  CHECK(launch.enters >= 4 && launch.enters == launch.exits && launch.correlation_data_ok);
  const api_seen& malloc_cb = runtime_calls[CUPTI_RUNTIME_TRACE_CBID_cudaMalloc_v3020];
  CHECK(malloc_cb.enters == malloc_cb.exits && malloc_cb.enters >= 3);
  const api_seen& hidden = runtime_calls[CUPTI_RUNTIME_TRACE_CBID___cudaLaunchKernel_v13000];
  CHECK(hidden.enters == 1 && contains(hidden.symbol, "axpy"));
  CHECK(driver_calls[CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel].enters >= 1);
  std::printf(
      "callbacks: %zu runtime cbids, %zu driver cbids; activity: %zu kernels, %zu "
      "memcpys, %zu memsets in %d buffers\n",
      runtime_calls.size(), driver_calls.size(), kernels.size(), memcpys.size(), memsets.size(),
      buffers_completed);
  CHECK(kernels.size() >= 10);
  bool named = !kernels.empty(), ordered = true, correlated = false;
  for (const kernel_record& k : kernels) {
    named = named && !k.name.empty();
    ordered = ordered && k.start <= k.end && k.end > 0;
    for (uint32_t c : launch_correlations) correlated = correlated || c == k.correlation;
  }
  CHECK(named && ordered && correlated);
  CHECK(memcpys.size() >= 4 && memsets.size() >= 1);
  if (!memcpys.empty()) {
    CHECK(memcpys[0].copyKind == CUPTI_ACTIVITY_MEMCPY_KIND_HTOD &&
          memcpys[0].bytes == n * sizeof(float));
  }
  uint64_t t = 0;
  CHECK(cuptiGetTimestamp(&t) == CUPTI_SUCCESS && t > 0);
  const char* result = nullptr;
  CHECK(cuptiGetResultString(CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED, &result) ==
            CUPTI_SUCCESS &&
        std::strcmp(result, "CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED") == 0);
  CHECK(buffers_completed >= 2);
  size_t dropped = 1;
  CHECK(cuptiActivityGetNumDroppedRecords(nullptr, 0, &dropped) == CUPTI_SUCCESS && dropped == 0);
  CHECK(cuptiUnsubscribe(sub) == CUPTI_SUCCESS);
  CHECK(cuptiSubscribe(&second, on_api, nullptr) == CUPTI_SUCCESS);
  CHECK(cuptiUnsubscribe(second) == CUPTI_SUCCESS);
  CHECK(cuptiFinalize() == CUPTI_SUCCESS);
  std::printf("%s (%d failed checks)\n", failures == 0 ? "PASS" : "FAIL", failures.load());
  return failures == 0 ? 0 : 1;
}
