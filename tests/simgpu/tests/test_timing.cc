// The virtual clock against the device model. Run once per model (meson sets
// SIMGPU_DEVICE); every expected time is computed from the model's own .model file,
// so no figure is written twice. Within 1%:
// - a copy takes copy latency + bytes / bandwidth, with the pinned or pageable
//   bandwidth of its direction (registered host memory counts as pinned);
// - a kernel takes max(flops / fp32 peak, bytes / memory bandwidth) from its
//   footprint; on an idle stream it starts launch latency after the host issued it
//   (see Note [Launch latency]);
// and work on different streams overlaps where a GPU's engines overlap (a copy beside
// a kernel), shares what a GPU shares (one host link per direction); cudaFree waits
// for the device. Each driver call family costs the host its own model figure (VMM
// calls per call and per 2 MiB page, events, stream waits, copy and launch
// enqueues), and kernels reach host memory at the model's zero-copy rate, paying
// for every read.
//
// Note [Measuring one operation]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// The stream is first given a long kernel, so that
// the host is far ahead of the device when the events and the measured operation
// are enqueued; the interval between the two events is then the operation alone,
// without host API overhead.
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <latch>
#include <thread>
#include <vector>

#include "simgpu/kernel.h"
#include "simgpu_test.h"

namespace {

__global__ void flop_kernel(float* out, double flops) {
  (void)flops;
  if (blockIdx.x == 0 && threadIdx.x == 0) out[0] = 1.0f;
}
SIMGPU_KERNEL_FOOTPRINT(flop_kernel, [](simgpu::footprint& fp, float* out, double flops) {
  fp.write(out, 1);
  fp.flops(flops);
});

// Streams n floats from x to y, stating `flops` of arithmetic; one CUDA thread per
// 4096 elements keeps the host run short while the footprint states the whole
// transfer.
__global__ void stream_kernel(const float* x, float* y, long n, double flops) {
  (void)flops;
  long begin = (static_cast<long>(blockIdx.x) * blockDim.x + threadIdx.x) * 4096;
  for (long i = begin; i < begin + 4096 && i < n; ++i) y[i] = x[i];
}
SIMGPU_KERNEL_FOOTPRINT(stream_kernel, [](simgpu::footprint& fp, const float* x, float* y,
                                          long n, double flops) {
  fp.read(x, static_cast<std::size_t>(n));
  fp.write(y, static_cast<std::size_t>(n));
  fp.flops(flops);
});

// Reads n floats of x `reads` times (a kernel that re-reads; the footprint says so).
__global__ void reread_kernel(const float* x, float* out, long n, int reads) {
  if (blockIdx.x != 0 || threadIdx.x != 0) return;
  float sum = 0;
  for (int r = 0; r < reads; ++r)
    for (long i = 0; i < n; i += 1024) sum += x[i];
  out[0] = sum;
}
SIMGPU_KERNEL_FOOTPRINT(reread_kernel, [](simgpu::footprint& fp, const float* x, float* out,
                                          long n, int reads) {
  for (int r = 0; r < reads; ++r) fp.read(x, static_cast<std::size_t>(n));
  fp.write(out, 1);
});

// The VMM calls the tests below make, looked up once per test.
struct vmm_calls {
  decltype(&cuMemAddressReserve) reserve = SIMGPU_DRV(cuMemAddressReserve);
  decltype(&cuMemCreate) create = SIMGPU_DRV(cuMemCreate);
  decltype(&cuMemMap) map = SIMGPU_DRV(cuMemMap);
  decltype(&cuMemSetAccess) access = SIMGPU_DRV(cuMemSetAccess);
  decltype(&cuMemUnmap) unmap = SIMGPU_DRV(cuMemUnmap);
  decltype(&cuMemRelease) release = SIMGPU_DRV(cuMemRelease);
  decltype(&cuMemAddressFree) address_free = SIMGPU_DRV(cuMemAddressFree);
};

// Two mappings of `half` bytes side by side, one of device memory and one of host
// memory (the host one first where host_first), read-write for the device: a swap
// engine's pages, some resident, some on the host.
struct mixed_range {
  CUdeviceptr va = 0;
  CUmemGenericAllocationHandle h[2] = {0, 0};
  std::size_t bytes = 0;
};
void map_mixed(const vmm_calls& vmm, std::size_t half, bool host_first, mixed_range* m) {
  m->bytes = 2 * half;
  for (int k = 0; k < 2; ++k) {
    CUmemAllocationProp prop{};
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    const bool host = (k == 0) == host_first;
    prop.location.type = host ? CU_MEM_LOCATION_TYPE_HOST : CU_MEM_LOCATION_TYPE_DEVICE;
    ASSERT_EQ(vmm.create(&m->h[k], half, &prop, 0), CUDA_SUCCESS);
  }
  ASSERT_EQ(vmm.reserve(&m->va, m->bytes, 0, 0, 0), CUDA_SUCCESS);
  ASSERT_EQ(vmm.map(m->va, half, 0, m->h[0], 0), CUDA_SUCCESS);
  ASSERT_EQ(vmm.map(m->va + half, half, 0, m->h[1], 0), CUDA_SUCCESS);
  CUmemAccessDesc d{};
  d.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  d.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  ASSERT_EQ(vmm.access(m->va, m->bytes, &d, 1), CUDA_SUCCESS);
}
void unmap_mixed(const vmm_calls& vmm, const mixed_range& m) {
  ASSERT_EQ(vmm.unmap(m.va, m.bytes), CUDA_SUCCESS);
  for (CUmemGenericAllocationHandle one : m.h) ASSERT_EQ(vmm.release(one), CUDA_SUCCESS);
  ASSERT_EQ(vmm.address_free(m.va, m.bytes), CUDA_SUCCESS);
}

struct model_figures {
  double fp32_flops;      // flop/s
  double mem_bw;          // bytes/s, device memory
  double h2d_pinned, h2d_pageable, d2h_pinned, d2h_pageable;  // bytes/s
  double copy_latency_s;  // s
  double launch_latency_s;
  double api_overhead_s;  // host time per enqueued call
  double launch_enqueue_s, copy_enqueue_s, event_record_s;
  double kernel_host_bw;  // bytes/s, a kernel's reads of host memory
};

model_figures figures() {
  auto m = simgpu_test::device_model::current();
  model_figures f{};
  f.fp32_flops = m.number({"fp32_flops"});
  f.mem_bw = m.number({"memory_bandwidth"});
  f.h2d_pinned = m.number({"h2d_pinned_bandwidth"});
  f.h2d_pageable = m.number({"h2d_pageable_bandwidth"});
  f.d2h_pinned = m.number({"d2h_pinned_bandwidth"});
  f.d2h_pageable = m.number({"d2h_pageable_bandwidth"});
  f.copy_latency_s = m.number({"copy_latency_ns"}) * 1e-9;
  f.launch_latency_s = m.number({"launch_latency_ns"}) * 1e-9;
  f.api_overhead_s = m.number({"api_overhead_ns"}) * 1e-9;
  f.launch_enqueue_s = m.number({"launch_enqueue_ns"}) * 1e-9;
  f.copy_enqueue_s = m.number({"copy_enqueue_ns"}) * 1e-9;
  f.event_record_s = m.number({"event_record_ns"}) * 1e-9;
  f.kernel_host_bw = m.number({"kernel_host_access_bandwidth"});
  return f;
}

class Timing : public ::testing::Test {
 protected:
  void SetUp() override {
    f_ = figures();
    CUDA_OK(cudaStreamCreateWithFlags(&s_, cudaStreamNonBlocking));
    CUDA_OK(cudaStreamCreateWithFlags(&s2_, cudaStreamNonBlocking));
    CUDA_OK(cudaEventCreate(&e0_));
    CUDA_OK(cudaEventCreate(&e1_));
    CUDA_OK(cudaEventCreate(&e2_));
    CUDA_OK(cudaMalloc(&scratch_, 256));
  }
  void TearDown() override {
    cudaEventDestroy(e0_);
    cudaEventDestroy(e1_);
    cudaEventDestroy(e2_);
    cudaStreamDestroy(s_);
    cudaStreamDestroy(s2_);
    cudaFree(scratch_);
  }

  // Enqueues a kernel of exactly `flops` on stream s.
  void flops_on(cudaStream_t s, double flops) {
    void* args[] = {&scratch_, &flops};
    ASSERT_EQ(cudaLaunchKernel(reinterpret_cast<const void*>(&flop_kernel), dim3(1), dim3(1),
                               args, 0, s),
              cudaSuccess);
  }

  // See Note [Measuring one operation]: about 50 ms of compute on the model.
  void fill(cudaStream_t s) { flops_on(s, 0.05 * f_.fp32_flops); }

  float elapsed_ms(cudaEvent_t a, cudaEvent_t b) {
    float ms = -1;
    EXPECT_EQ(cudaEventSynchronize(b), cudaSuccess);
    EXPECT_EQ(cudaEventElapsedTime(&ms, a, b), cudaSuccess);
    return ms;
  }

  // Measures one copy of `bytes` from src to dst on stream s_.
  double copy_ms(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind) {
    fill(s_);
    EXPECT_EQ(cudaEventRecord(e0_, s_), cudaSuccess);
    EXPECT_EQ(cudaMemcpyAsync(dst, src, bytes, kind, s_), cudaSuccess);
    EXPECT_EQ(cudaEventRecord(e1_, s_), cudaSuccess);
    return elapsed_ms(e0_, e1_);
  }

  double copy_expected_ms(size_t bytes, double bw) const {
    return (f_.copy_latency_s + static_cast<double>(bytes) / bw) * 1e3;
  }

  // Note [Launch latency]
  // ~~~~~~~~~~~~~~~~~~~~~
  // A kernel cannot start before launch latency has passed
  // since the host issued it; behind other work on its stream that latency is
  // hidden, so a kernel measured after a filler takes exactly its work.
  double kernel_expected_ms(double work_s) const { return work_s * 1e3; }

  // reread_kernel over n floats at x, `reads` times, on a busy stream: its ms.
  double reread_ms(const float* x, long n, int reads) {
    fill(s_);
    void* args[] = {&x, &scratch_, &n, &reads};
    const bool ok =
        cudaEventRecord(e0_, s_) == cudaSuccess &&
        cudaLaunchKernel(reinterpret_cast<const void*>(&reread_kernel), dim3(1), dim3(1), args,
                         0, s_) == cudaSuccess &&
        cudaEventRecord(e1_, s_) == cudaSuccess;
    EXPECT_TRUE(ok) << "recording or launching reread_kernel failed";
    return ok ? elapsed_ms(e0_, e1_) : -1.0;
  }

  model_figures f_{};
  cudaStream_t s_ = nullptr, s2_ = nullptr;
  cudaEvent_t e0_ = nullptr, e1_ = nullptr, e2_ = nullptr;
  float* scratch_ = nullptr;
};

#define EXPECT_WITHIN_1PCT(got, want) \
  EXPECT_NEAR((got), (want), 0.01 * std::fabs(want)) << #got " vs model " #want

TEST_F(Timing, PinnedCopiesMatchTheModel) {
  for (size_t bytes : {size_t{4096}, size_t{64} << 20}) {
    void* host = nullptr;
    void* dev = nullptr;
    CUDA_OK(cudaMallocHost(&host, bytes));
    CUDA_OK(cudaMalloc(&dev, bytes));
    std::memset(host, 7, bytes);
    double h2d = copy_ms(dev, host, bytes, cudaMemcpyHostToDevice);
    EXPECT_WITHIN_1PCT(h2d, copy_expected_ms(bytes, f_.h2d_pinned)) << " bytes=" << bytes;
    double d2h = copy_ms(host, dev, bytes, cudaMemcpyDeviceToHost);
    EXPECT_WITHIN_1PCT(d2h, copy_expected_ms(bytes, f_.d2h_pinned)) << " bytes=" << bytes;
    CUDA_OK(cudaFreeHost(host));
    CUDA_OK(cudaFree(dev));
  }
}

TEST_F(Timing, PageableCopiesMatchTheModel) {
  for (size_t bytes : {size_t{4096}, size_t{64} << 20}) {
    std::vector<unsigned char> host(bytes, 3);
    void* dev = nullptr;
    CUDA_OK(cudaMalloc(&dev, bytes));
    double h2d = copy_ms(dev, host.data(), bytes, cudaMemcpyHostToDevice);
    EXPECT_WITHIN_1PCT(h2d, copy_expected_ms(bytes, f_.h2d_pageable)) << " bytes=" << bytes;
    double d2h = copy_ms(host.data(), dev, bytes, cudaMemcpyDeviceToHost);
    EXPECT_WITHIN_1PCT(d2h, copy_expected_ms(bytes, f_.d2h_pageable)) << " bytes=" << bytes;
    EXPECT_EQ(host[bytes - 1], 3);
    CUDA_OK(cudaFree(dev));
  }
}

TEST_F(Timing, RegisteredHostMemoryCopiesAtPinnedSpeed) {
  const size_t bytes = 16ull << 20;
  void* host = std::aligned_alloc(4096, bytes);
  ASSERT_NE(host, nullptr);
  std::memset(host, 5, bytes);
  void* dev = nullptr;
  CUDA_OK(cudaMalloc(&dev, bytes));
  CUDA_OK(cudaHostRegister(host, bytes, cudaHostRegisterDefault));
  EXPECT_WITHIN_1PCT(copy_ms(dev, host, bytes, cudaMemcpyHostToDevice),
                     copy_expected_ms(bytes, f_.h2d_pinned));
  CUDA_OK(cudaHostUnregister(host));
  EXPECT_WITHIN_1PCT(copy_ms(dev, host, bytes, cudaMemcpyHostToDevice),
                     copy_expected_ms(bytes, f_.h2d_pageable))
      << " unregistered memory is pageable again";
  CUDA_OK(cudaFree(dev));
  std::free(host);
}

// A VMM mapping of host memory (how oversub keeps a swapped-out buffer's address)
// has a device address, but a copy between it and device memory crosses the host
// link on a copy engine: it takes the pinned rate, not the device's memory rate.
TEST_F(Timing, CopiesToHostLocatedMappingsCrossTheLink) {
  const size_t bytes = 8ull << 20;
  const vmm_calls vmm;
  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_HOST;
  CUmemGenericAllocationHandle h = 0;
  ASSERT_EQ(vmm.create(&h, bytes, &prop, 0), CUDA_SUCCESS);
  CUdeviceptr va = 0;
  ASSERT_EQ(vmm.reserve(&va, bytes, 0, 0, 0), CUDA_SUCCESS);
  ASSERT_EQ(vmm.map(va, bytes, 0, h, 0), CUDA_SUCCESS);
  CUmemAccessDesc d{};
  d.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  d.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  ASSERT_EQ(vmm.access(va, bytes, &d, 1), CUDA_SUCCESS);
  void* dev = nullptr;
  CUDA_OK(cudaMalloc(&dev, bytes));
  void* host_mapped = reinterpret_cast<void*>(va);
  EXPECT_WITHIN_1PCT(copy_ms(dev, host_mapped, bytes, cudaMemcpyDeviceToDevice),
                     copy_expected_ms(bytes, f_.h2d_pinned));
  EXPECT_WITHIN_1PCT(copy_ms(host_mapped, dev, bytes, cudaMemcpyDeviceToDevice),
                     copy_expected_ms(bytes, f_.d2h_pinned));
  CUDA_OK(cudaFree(dev));
  ASSERT_EQ(vmm.unmap(va, bytes), CUDA_SUCCESS);
  ASSERT_EQ(vmm.release(h), CUDA_SUCCESS);
  ASSERT_EQ(vmm.address_free(va, bytes), CUDA_SUCCESS);
}

// A copy whose range lies across a device mapping and a host-located one pays each part
// at its own rate, whichever comes first (See Note [Copies to host-located mappings] in
// tests/simgpu/driver/copy.cc): from it to device memory, the device half at the memory
// rate and the host half inbound; into it, the host half outbound; from it to pinned
// memory, the device half outbound and the host half through the device.
TEST_F(Timing, ACopyAcrossMappingsPaysEachPartAtItsRate) {
  const size_t half = 4ull << 20, bytes = 2 * half;
  const vmm_calls vmm;
  void* dev = nullptr;
  void* pinned = nullptr;
  CUDA_OK(cudaMalloc(&dev, bytes));
  CUDA_OK(cudaMallocHost(&pinned, bytes));
  const double device_s = 2.0 * static_cast<double>(half) / f_.mem_bw;
  const double in_s = static_cast<double>(half) / f_.h2d_pinned;
  const double out_s = static_cast<double>(half) / f_.d2h_pinned;
  const double through_s = static_cast<double>(half) / std::min(f_.h2d_pinned, f_.d2h_pinned);
  for (bool host_first : {false, true}) {
    mixed_range m;
    map_mixed(vmm, half, host_first, &m);
    if (HasFatalFailure()) return;
    void* mixed = reinterpret_cast<void*>(m.va);
    const char* order = host_first ? "the host half first" : "the device half first";
    EXPECT_WITHIN_1PCT(copy_ms(dev, mixed, bytes, cudaMemcpyDeviceToDevice),
                       copy_expected_ms(0, 1) + (device_s + in_s) * 1e3)
        << " to device memory, " << order;
    EXPECT_WITHIN_1PCT(copy_ms(mixed, dev, bytes, cudaMemcpyDeviceToDevice),
                       copy_expected_ms(0, 1) + (device_s + out_s) * 1e3)
        << " from device memory, " << order;
    EXPECT_WITHIN_1PCT(copy_ms(pinned, mixed, bytes, cudaMemcpyDeviceToHost),
                       copy_expected_ms(0, 1) + (out_s + through_s) * 1e3)
        << " to pinned memory, " << order;
    CUDA_OK(cudaStreamSynchronize(s_));
    unmap_mixed(vmm, m);
  }
  CUDA_OK(cudaFreeHost(pinned));
  CUDA_OK(cudaFree(dev));
}

TEST_F(Timing, PinnedIsFasterThanPageable) {
  EXPECT_GT(f_.h2d_pinned, f_.h2d_pageable) << "the model itself";
  EXPECT_GT(f_.d2h_pinned, f_.d2h_pageable) << "the model itself";
}

TEST_F(Timing, ComputeBoundKernelMatchesTheModel) {
  for (double work_s : {1e-3, 20e-3}) {
    double flops = work_s * f_.fp32_flops;
    fill(s_);
    CUDA_OK(cudaEventRecord(e0_, s_));
    flops_on(s_, flops);
    CUDA_OK(cudaEventRecord(e1_, s_));
    EXPECT_WITHIN_1PCT(elapsed_ms(e0_, e1_), kernel_expected_ms(work_s)) << " flops=" << flops;
  }
}

// Enqueues stream_kernel over n floats with the given flops on stream s.
void launch_stream(const float* x, float* y, long n, double flops, cudaStream_t s) {
  void* args[] = {&x, &y, &n, &flops};
  ASSERT_EQ(cudaLaunchKernel(reinterpret_cast<const void*>(&stream_kernel),
                             dim3(static_cast<unsigned>((n + 4096 * 64 - 1) / (4096 * 64))),
                             dim3(64), args, 0, s),
            cudaSuccess);
}

TEST_F(Timing, MemoryBoundKernelMatchesTheModel) {
  const long n = 8l << 20;  // floats: 32 MiB read, 32 MiB written
  float *x = nullptr, *y = nullptr;
  CUDA_OK(cudaMalloc(&x, n * sizeof(float)));
  CUDA_OK(cudaMalloc(&y, n * sizeof(float)));
  fill(s_);
  CUDA_OK(cudaEventRecord(e0_, s_));
  launch_stream(x, y, n, 0.0, s_);
  CUDA_OK(cudaEventRecord(e1_, s_));
  double bytes = 2.0 * n * sizeof(float);
  EXPECT_WITHIN_1PCT(elapsed_ms(e0_, e1_), kernel_expected_ms(bytes / f_.mem_bw));
  CUDA_OK(cudaFree(x));
  CUDA_OK(cudaFree(y));
}

TEST_F(Timing, KernelOnAnIdleStreamWaitsForTheLaunchLatency) {
  // Host and device idle: the event is recorded at host time t; the kernel is issued
  // one event-record cost later and starts one launch latency after that.
  CUDA_OK(cudaDeviceSynchronize());
  const double work_s = 50e-6;
  CUDA_OK(cudaEventRecord(e0_, s_));
  flops_on(s_, work_s * f_.fp32_flops);
  CUDA_OK(cudaEventRecord(e1_, s_));
  EXPECT_WITHIN_1PCT(elapsed_ms(e0_, e1_),
                     (f_.event_record_s + f_.launch_latency_s + work_s) * 1e3);
}

TEST_F(Timing, KernelTimeIsTheLargerOfComputeAndMemory) {
  // One footprint with both terms: the time is the larger, not the sum.
  const long n = 8l << 20;
  float *x = nullptr, *y = nullptr;
  CUDA_OK(cudaMalloc(&x, n * sizeof(float)));
  CUDA_OK(cudaMalloc(&y, n * sizeof(float)));
  const double mem_s = 2.0 * n * sizeof(float) / f_.mem_bw;
  for (double ratio : {3.0, 0.3}) {  // compute-bound, then memory-bound
    fill(s_);
    CUDA_OK(cudaEventRecord(e0_, s_));
    launch_stream(x, y, n, ratio * mem_s * f_.fp32_flops, s_);
    CUDA_OK(cudaEventRecord(e1_, s_));
    EXPECT_WITHIN_1PCT(elapsed_ms(e0_, e1_), kernel_expected_ms(std::max(ratio, 1.0) * mem_s))
        << " compute/memory ratio " << ratio;
  }
  CUDA_OK(cudaFree(x));
  CUDA_OK(cudaFree(y));
}

TEST_F(Timing, CopyOverlapsKernelOnAnotherStream) {
  const size_t bytes = 64ull << 20;
  void* host = nullptr;
  void* dev = nullptr;
  CUDA_OK(cudaMallocHost(&host, bytes));
  CUDA_OK(cudaMalloc(&dev, bytes));
  std::memset(host, 1, bytes);
  double copy_s = copy_expected_ms(bytes, f_.h2d_pinned) / 1e3;

  // Both streams start from one event after a filler, so both start at one time.
  fill(s_);
  CUDA_OK(cudaEventRecord(e0_, s_));
  CUDA_OK(cudaStreamWaitEvent(s2_, e0_, 0));
  flops_on(s_, 2 * copy_s * f_.fp32_flops);  // the kernel takes twice the copy
  CUDA_OK(cudaMemcpyAsync(dev, host, bytes, cudaMemcpyHostToDevice, s2_));
  CUDA_OK(cudaEventRecord(e1_, s_));
  CUDA_OK(cudaEventRecord(e2_, s2_));
  EXPECT_WITHIN_1PCT(elapsed_ms(e0_, e1_), kernel_expected_ms(2 * copy_s));
  EXPECT_WITHIN_1PCT(elapsed_ms(e0_, e2_), copy_s * 1e3) << "the copy did not wait";
  CUDA_OK(cudaFreeHost(host));
  CUDA_OK(cudaFree(dev));
}

TEST_F(Timing, TwoCopiesOneDirectionShareTheLink) {
  const size_t bytes = 32ull << 20;
  void* host = nullptr;
  void *d1 = nullptr, *d2 = nullptr;
  CUDA_OK(cudaMallocHost(&host, 2 * bytes));
  CUDA_OK(cudaMalloc(&d1, bytes));
  CUDA_OK(cudaMalloc(&d2, bytes));
  fill(s_);
  CUDA_OK(cudaEventRecord(e0_, s_));
  CUDA_OK(cudaStreamWaitEvent(s2_, e0_, 0));
  CUDA_OK(cudaMemcpyAsync(d1, host, bytes, cudaMemcpyHostToDevice, s_));
  CUDA_OK(cudaMemcpyAsync(d2, static_cast<char*>(host) + bytes, bytes, cudaMemcpyHostToDevice,
                          s2_));
  CUDA_OK(cudaEventRecord(e1_, s_));
  CUDA_OK(cudaEventRecord(e2_, s2_));
  double last = std::max(elapsed_ms(e0_, e1_), elapsed_ms(e0_, e2_));
  // The two together move 2 * bytes over one link: no faster than one copy of that.
  EXPECT_GE(last, 0.99 * (2.0 * bytes / f_.h2d_pinned) * 1e3);
  CUDA_OK(cudaFreeHost(host));
  CUDA_OK(cudaFree(d1));
  CUDA_OK(cudaFree(d2));
}

// See Note [Copy engines serve ready copies] in tests/simgpu/driver/clock.h: a copy whose
// stream waits for a kernel leaves the copy engine to one issued after it that is ready.
TEST_F(Timing, ACopyWaitingOnItsStreamLeavesTheEngineToAReadyOne) {
  const size_t bytes = 64ull << 20;
  void* host = nullptr;
  void *d1 = nullptr, *d2 = nullptr;
  CUDA_OK(cudaMallocHost(&host, 2 * bytes));
  CUDA_OK(cudaMalloc(&d1, bytes));
  CUDA_OK(cudaMalloc(&d2, bytes));
  cudaStream_t s3 = nullptr;
  CUDA_OK(cudaStreamCreateWithFlags(&s3, cudaStreamNonBlocking));
  const double copy_ms_model = copy_expected_ms(bytes, f_.h2d_pinned);
  fill(s_);                            // about 50 ms, much longer than a copy
  CUDA_OK(cudaEventRecord(e0_, s_));   // the kernel's end
  CUDA_OK(cudaStreamWaitEvent(s2_, e0_, 0));
  CUDA_OK(cudaMemcpyAsync(d1, host, bytes, cudaMemcpyHostToDevice, s2_));  // waits
  CUDA_OK(cudaEventRecord(e1_, s3));   // s3 is idle: recorded at host time
  CUDA_OK(cudaMemcpyAsync(d2, static_cast<char*>(host) + bytes, bytes, cudaMemcpyHostToDevice,
                          s3));        // ready now
  CUDA_OK(cudaEventRecord(e2_, s3));
  EXPECT_WITHIN_1PCT(elapsed_ms(e1_, e2_), copy_ms_model) << " the ready copy waited";
  EXPECT_GT(elapsed_ms(e2_, e0_), 0.0) << " the ready copy ran after the kernel";
  cudaEvent_t after = nullptr;
  CUDA_OK(cudaEventCreate(&after));
  CUDA_OK(cudaEventRecord(after, s2_));
  EXPECT_WITHIN_1PCT(elapsed_ms(e0_, after), copy_ms_model) << " the waiting copy was delayed";
  CUDA_OK(cudaEventDestroy(after));
  CUDA_OK(cudaStreamDestroy(s3));
  CUDA_OK(cudaFreeHost(host));
  CUDA_OK(cudaFree(d1));
  CUDA_OK(cudaFree(d2));
}

TEST_F(Timing, FreeWaitsForTheDevice) {
  // cudaFree synchronises the device (CUDA's documented behaviour): work enqueued
  // after it on an idle stream cannot start before earlier kernels have finished.
  void* p = nullptr;
  CUDA_OK(cudaMalloc(&p, 4096));
  CUDA_OK(cudaDeviceSynchronize());
  fill(s_);
  CUDA_OK(cudaEventRecord(e1_, s_));  // the end of about 50 ms of work
  CUDA_OK(cudaFree(p));
  CUDA_OK(cudaEventRecord(e2_, s2_));  // s2_ is idle: recorded at host time
  EXPECT_GE(elapsed_ms(e1_, e2_), 0.0) << "the host went on before the device finished";
}

TEST_F(Timing, EventsOnOneStreamAreMonotonic) {
  fill(s_);
  CUDA_OK(cudaEventRecord(e0_, s_));
  flops_on(s_, 1e-3 * f_.fp32_flops);
  CUDA_OK(cudaEventRecord(e1_, s_));
  flops_on(s_, 1e-3 * f_.fp32_flops);
  CUDA_OK(cudaEventRecord(e2_, s_));
  double a = elapsed_ms(e0_, e1_), b = elapsed_ms(e1_, e2_), ab = elapsed_ms(e0_, e2_);
  EXPECT_GT(a, 0);
  EXPECT_GT(b, 0);
  EXPECT_NEAR(ab, a + b, 1e-3);
  EXPECT_NEAR(elapsed_ms(e2_, e0_), -ab, 1e-3) << "elapsed time is signed";
}

// Host time taken by one driver call, in ns of virtual time.
template <typename F>
double host_ns_of(F&& call) {
  static auto now = simgpu_test::driver<uint64_t (*)()>("simgpuVirtualTimeNs");
  uint64_t before = now();
  call();
  return static_cast<double>(now() - before);
}

#define EXPECT_NS(got, want) EXPECT_NEAR((got), (want), 1.0) << #got " vs model " #want

// cuMemCreate, cuMemMap, cuMemSetAccess, cuMemUnmap and cuMemRelease cost their
// model's per-call part plus their part per 2 MiB page, here for 3 pages.
TEST_F(Timing, VmmCallsCostTheModelsFigures) {
  auto m = simgpu_test::device_model::current();
  auto cost = [&](const std::string& family, double pages) {
    return m.number({(family + "_ns").c_str()}) +
           pages * m.number({(family + "_per_2mib_ns").c_str()});
  };
  const size_t bytes = 6ull << 20;
  const vmm_calls vmm;
  CUDA_OK(cudaDeviceSynchronize());
  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  CUmemGenericAllocationHandle h = 0;
  CUdeviceptr va = 0;
  ASSERT_EQ(vmm.reserve(&va, bytes, 0, 0, 0), CUDA_SUCCESS);
  EXPECT_NS(host_ns_of([&] { ASSERT_EQ(vmm.create(&h, bytes, &prop, 0), CUDA_SUCCESS); }),
            cost("vmm_create", 3));
  EXPECT_NS(host_ns_of([&] { ASSERT_EQ(vmm.map(va, bytes, 0, h, 0), CUDA_SUCCESS); }),
            cost("vmm_map", 3));
  CUmemAccessDesc d{};
  d.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  d.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  EXPECT_NS(host_ns_of([&] { ASSERT_EQ(vmm.access(va, bytes, &d, 1), CUDA_SUCCESS); }),
            cost("vmm_set_access", 3));
  EXPECT_NS(host_ns_of([&] { ASSERT_EQ(vmm.unmap(va, bytes), CUDA_SUCCESS); }),
            cost("vmm_unmap", 3));
  EXPECT_NS(host_ns_of([&] { ASSERT_EQ(vmm.release(h), CUDA_SUCCESS); }), cost("vmm_release", 3));
  ASSERT_EQ(vmm.address_free(va, bytes), CUDA_SUCCESS);
}

// See Note [Repeated VMM calls] in tests/simgpu/driver/device_model.cc: a cuMemMap
// right after another (a stream query between them allowed) costs the model's
// vmm_map_repeat_ns (vmm_map_ns where the model has none); one after another family's
// call, or after more than 5 us of other calls, costs vmm_map_ns.
TEST_F(Timing, VmmCallsRepeatingTheirFamilyCostTheRepeatFigure) {
  auto m = simgpu_test::device_model::current();
  const double page = m.number({"vmm_map_per_2mib_ns"});
  const double first = m.number({"vmm_map_ns"}) + page;
  const double repeat = m.number({"vmm_map_repeat_ns", "vmm_map_ns"}) + page;
  const size_t bytes = 2ull << 20;
  auto reserve = SIMGPU_DRV(cuMemAddressReserve);
  auto create = SIMGPU_DRV(cuMemCreate);
  auto map = SIMGPU_DRV(cuMemMap);
  auto unmap = SIMGPU_DRV(cuMemUnmap);
  auto release = SIMGPU_DRV(cuMemRelease);
  auto address_free = SIMGPU_DRV(cuMemAddressFree);
  auto record = SIMGPU_DRV(cuEventRecord);
  CUDA_OK(cudaDeviceSynchronize());
  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  constexpr int kPages = 5;
  CUmemGenericAllocationHandle h[kPages] = {};
  CUdeviceptr va = 0;
  ASSERT_EQ(reserve(&va, kPages * bytes, 0, 0, 0), CUDA_SUCCESS);
  for (auto& handle : h) ASSERT_EQ(create(&handle, bytes, &prop, 0), CUDA_SUCCESS);
  EXPECT_NS(host_ns_of([&] { ASSERT_EQ(map(va, bytes, 0, h[0], 0), CUDA_SUCCESS); }), first);
  EXPECT_NS(host_ns_of([&] { ASSERT_EQ(map(va + bytes, bytes, 0, h[1], 0), CUDA_SUCCESS); }),
            repeat);
  EXPECT_EQ(cudaStreamQuery(nullptr), cudaSuccess);  // another call between: still a run
  EXPECT_NS(host_ns_of([&] { ASSERT_EQ(map(va + 2 * bytes, bytes, 0, h[2], 0), CUDA_SUCCESS); }),
            repeat);
  // More than 5 us of other calls: the next map pays in full.
  cudaEvent_t e = nullptr;
  CUDA_OK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
  const double record_ns = m.number({"event_record_ns"});
  for (int i = 0; i < static_cast<int>(5000 / std::max(record_ns, 1.0)) + 2; ++i) {
    ASSERT_EQ(record(reinterpret_cast<CUevent>(e), nullptr), CUDA_SUCCESS);
  }
  EXPECT_NS(host_ns_of([&] { ASSERT_EQ(map(va + 3 * bytes, bytes, 0, h[3], 0), CUDA_SUCCESS); }),
            first);
  // Another family's call between: in full too.
  ASSERT_EQ(unmap(va, bytes), CUDA_SUCCESS);
  EXPECT_NS(host_ns_of([&] { ASSERT_EQ(map(va + 4 * bytes, bytes, 0, h[4], 0), CUDA_SUCCESS); }),
            first);
  for (int k = 1; k < kPages; ++k) ASSERT_EQ(unmap(va + k * bytes, bytes), CUDA_SUCCESS);
  for (auto handle : h) ASSERT_EQ(release(handle), CUDA_SUCCESS);
  ASSERT_EQ(address_free(va, kPages * bytes), CUDA_SUCCESS);
  CUDA_OK(cudaEventDestroy(e));
}

// Event record, query and synchronize, a stream's wait, a copy's and a kernel's
// enqueue and a graph launch each cost the host their model figure.
TEST_F(Timing, EventStreamCopyAndLaunchCallsCostTheModelsFigures) {
  auto m = simgpu_test::device_model::current();
  auto record = SIMGPU_DRV(cuEventRecord);
  auto query = SIMGPU_DRV(cuEventQuery);
  auto sync = SIMGPU_DRV(cuEventSynchronize);
  auto wait = SIMGPU_DRV(cuStreamWaitEvent);
  CUDA_OK(cudaDeviceSynchronize());
  CUevent e = reinterpret_cast<CUevent>(e0_);
  CUstream s = reinterpret_cast<CUstream>(s_);
  EXPECT_NS(host_ns_of([&] { ASSERT_EQ(record(e, s), CUDA_SUCCESS); }),
            m.number({"event_record_ns"}));
  EXPECT_NS(host_ns_of([&] { ASSERT_EQ(query(e), CUDA_SUCCESS); }), m.number({"event_query_ns"}));
  EXPECT_NS(host_ns_of([&] { ASSERT_EQ(sync(e), CUDA_SUCCESS); }), m.number({"event_sync_ns"}));
  EXPECT_NS(host_ns_of([&] { ASSERT_EQ(wait(reinterpret_cast<CUstream>(s2_), e, 0), CUDA_SUCCESS); }),
            m.number({"stream_wait_event_ns"}));
  void* host = nullptr;
  CUDA_OK(cudaMallocHost(&host, 4096));
  EXPECT_NS(host_ns_of([&] {
              ASSERT_EQ(cudaMemcpyAsync(scratch_, host, 256, cudaMemcpyHostToDevice, s_),
                        cudaSuccess);
            }),
            f_.copy_enqueue_s * 1e9);
  EXPECT_NS(host_ns_of([&] { flops_on(s_, 1e3); }), f_.launch_enqueue_s * 1e9);
  // A graph of three kernels is one launch enqueue.
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  CUDA_OK(cudaStreamBeginCapture(s_, cudaStreamCaptureModeGlobal));
  for (int i = 0; i < 3; ++i) flops_on(s_, 1e3);
  CUDA_OK(cudaStreamEndCapture(s_, &graph));
  CUDA_OK(cudaGraphInstantiate(&exec, graph, 0));
  EXPECT_NS(host_ns_of([&] { ASSERT_EQ(cudaGraphLaunch(exec, s_), cudaSuccess); }),
            f_.launch_enqueue_s * 1e9);
  CUDA_OK(cudaStreamSynchronize(s_));
  CUDA_OK(cudaGraphExecDestroy(exec));
  CUDA_OK(cudaGraphDestroy(graph));
  CUDA_OK(cudaFreeHost(host));
}

// See Note [A clock per host thread] in tests/simgpu/driver/clock.h: another thread's
// calls cost its own clock, not this one's; a thread starts at the latest host time any
// thread reached; and a thread that waits on an event another thread recorded is moved
// to the host time at which that record was issued.
TEST_F(Timing, EachHostThreadHasItsOwnClock) {
  static auto now = simgpu_test::driver<uint64_t (*)()>("simgpuVirtualTimeNs");
  auto m = simgpu_test::device_model::current();
  auto create = SIMGPU_DRV(cuMemCreate);
  auto release = SIMGPU_DRV(cuMemRelease);
  auto record = SIMGPU_DRV(cuEventRecord);
  auto wait = SIMGPU_DRV(cuStreamWaitEvent);
  auto query = SIMGPU_DRV(cuEventQuery);
  CUDA_OK(cudaDeviceSynchronize());
  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  const int calls = 8;
  // A 4 MiB handle made and released: two pages each (no call repeats its family).
  const double per_call = m.number({"vmm_create_ns"}) + 2 * m.number({"vmm_create_per_2mib_ns"}) +
                          m.number({"vmm_release_ns"}) +
                          2 * m.number({"vmm_release_per_2mib_ns"});
  const uint64_t main_start = now();
  uint64_t other_start = 0, other_before_record = 0, other_end = 0;
  CUevent e = reinterpret_cast<CUevent>(e1_);
  std::thread other([&] {
    CUDA_OK(cudaSetDevice(0));  // the runtime makes the primary context current here
    other_start = now();
    for (int i = 0; i < calls; ++i) {
      CUmemGenericAllocationHandle h = 0;
      ASSERT_EQ(create(&h, 4u << 20, &prop, 0), CUDA_SUCCESS);
      ASSERT_EQ(release(h), CUDA_SUCCESS);
    }
    other_before_record = now();
    ASSERT_EQ(record(e, reinterpret_cast<CUstream>(s2_)), CUDA_SUCCESS);
    other_end = now();
  });
  other.join();
  // The other thread started where this one was, and its calls cost only its clock.
  EXPECT_GE(other_start, main_start);
  EXPECT_NEAR(static_cast<double>(other_before_record - other_start), calls * per_call, 1.0 * calls);
  EXPECT_LT(now() - main_start, static_cast<uint64_t>(per_call));
  // Waiting on its event brings this thread to the record's issue time, then costs the wait.
  const double waited = host_ns_of([&] {
    ASSERT_EQ(wait(reinterpret_cast<CUstream>(s_), e, 0), CUDA_SUCCESS);
  });
  EXPECT_GE(now(), other_before_record);
  EXPECT_GT(waited, per_call);
  // A later observation of the same record costs only its own call.
  EXPECT_NS(host_ns_of([&] { (void)query(e); }), m.number({"event_query_ns"}));
  EXPECT_GE(other_end, other_before_record);
  CUDA_OK(cudaDeviceSynchronize());
}

// See Note [VMM calls one at a time] in tests/simgpu/driver/vmm.cc: another thread's VMM
// call, made while this thread's was under way in host time, waits for it to end (the
// models here have no vmm_calls_serialized key: the default, one at a time).
TEST_F(Timing, VmmCallsOfTwoThreadsRunOneAtATime) {
  static auto now = simgpu_test::driver<uint64_t (*)()>("simgpuVirtualTimeNs");
  auto m = simgpu_test::device_model::current();
  auto create = SIMGPU_DRV(cuMemCreate);
  auto release = SIMGPU_DRV(cuMemRelease);
  CUDA_OK(cudaDeviceSynchronize());
  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  const double create_ns = m.number({"vmm_create_ns"}) + m.number({"vmm_create_per_2mib_ns"});
  std::latch started(1), main_created(1);
  uint64_t other_start = 0, other_before = 0, other_after = 0;
  CUmemGenericAllocationHandle theirs = 0;
  std::thread other([&] {
    CUDA_OK(cudaSetDevice(0));
    other_start = now();  // its clock starts where this thread's is now
    started.count_down();
    main_created.wait();
    other_before = now();
    ASSERT_EQ(create(&theirs, 2u << 20, &prop, 0), CUDA_SUCCESS);
    other_after = now();
  });
  started.wait();
  const uint64_t main_before = now();
  CUmemGenericAllocationHandle mine = 0;
  ASSERT_EQ(create(&mine, 2u << 20, &prop, 0), CUDA_SUCCESS);
  const uint64_t main_after = now();
  main_created.count_down();
  other.join();
  EXPECT_GT(main_after, main_before);
  // It asked before this thread's call had ended in host time: it waited for that end.
  EXPECT_LE(other_start, main_before);
  EXPECT_LT(other_before, main_after);
  EXPECT_NS(static_cast<double>(other_after), static_cast<double>(main_after) + create_ns);
  ASSERT_EQ(release(mine), CUDA_SUCCESS);
  ASSERT_EQ(release(theirs), CUDA_SUCCESS);
  CUDA_OK(cudaDeviceSynchronize());
}

// A kernel reads host memory (pinned, or a host-located VMM mapping) at the model's
// zero-copy rate, below the pinned copy rate, and pays again for every re-read.
TEST_F(Timing, KernelsReadHostMemoryAtTheZeroCopyRateForEveryRead) {
  EXPECT_LT(f_.kernel_host_bw, f_.h2d_pinned) << "the model itself";
  const size_t bytes = 4ull << 20;
  const long n = static_cast<long>(bytes / sizeof(float));
  const vmm_calls vmm;
  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_HOST;
  CUmemGenericAllocationHandle h = 0;
  CUdeviceptr va = 0;
  ASSERT_EQ(vmm.create(&h, bytes, &prop, 0), CUDA_SUCCESS);
  ASSERT_EQ(vmm.reserve(&va, bytes, 0, 0, 0), CUDA_SUCCESS);
  ASSERT_EQ(vmm.map(va, bytes, 0, h, 0), CUDA_SUCCESS);
  CUmemAccessDesc d{};
  d.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  d.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  ASSERT_EQ(vmm.access(va, bytes, &d, 1), CUDA_SUCCESS);
  float* pinned = nullptr;
  CUDA_OK(cudaMallocHost(&pinned, bytes));
  std::memset(pinned, 0, bytes);
  for (const float* x : {static_cast<const float*>(reinterpret_cast<void*>(va)),
                         static_cast<const float*>(pinned)}) {
    for (int reads : {1, 3}) {
      EXPECT_WITHIN_1PCT(reread_ms(x, n, reads),
                         kernel_expected_ms(reads * static_cast<double>(bytes) / f_.kernel_host_bw))
          << reads << " reads of " << (x == pinned ? "pinned memory" : "a host-located mapping");
    }
  }
  CUDA_OK(cudaStreamSynchronize(s_));
  CUDA_OK(cudaFreeHost(pinned));
  ASSERT_EQ(vmm.unmap(va, bytes), CUDA_SUCCESS);
  ASSERT_EQ(vmm.release(h), CUDA_SUCCESS);
  ASSERT_EQ(vmm.address_free(va, bytes), CUDA_SUCCESS);
}

// One range across a device mapping and a host-located one (a swap engine's pages, some
// resident, some on the host): the kernel pays for each part at its own rate, whichever
// comes first (See Note [A range across mappings] in tests/simgpu/driver/address_space.cc).
TEST_F(Timing, ARangeAcrossMappingsPaysTheHostPartOverTheLink) {
  const size_t half = 2ull << 20, bytes = 2 * half;
  const long n = static_cast<long>(bytes / sizeof(float));
  const vmm_calls vmm;
  for (bool host_first : {false, true}) {
    mixed_range m;
    map_mixed(vmm, half, host_first, &m);
    if (HasFatalFailure()) return;
    const double device_s = (static_cast<double>(half) + sizeof(float)) / f_.mem_bw;
    EXPECT_WITHIN_1PCT(reread_ms(reinterpret_cast<const float*>(m.va), n, 1),
                       kernel_expected_ms(device_s + static_cast<double>(half) / f_.kernel_host_bw))
        << (host_first ? "the host half first" : "the device half first");
    CUDA_OK(cudaStreamSynchronize(s_));
    unmap_mixed(vmm, m);
  }
}

}  // namespace
