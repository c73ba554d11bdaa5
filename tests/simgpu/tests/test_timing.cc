// The virtual clock against the device model. Run once per model (meson sets
// SIMGPU_DEVICE); every expected time is computed from the model's own .model file,
// so no figure is written twice. Within 1%:
// - a copy takes copy latency + bytes / bandwidth, with the pinned or pageable
//   bandwidth of its direction (registered host memory counts as pinned);
// - a kernel takes max(flops / fp32 peak, bytes / memory bandwidth) from its
//   footprint; on an idle stream it starts launch latency after the host issued it
//   (see Note [Launch latency] in tests/simgpu/tests/timing_fixture.h);
// and work on different streams overlaps where a GPU's engines overlap (a copy beside
// a kernel), shares what a GPU shares (one host link per direction); cudaFree waits
// for the device; kernels reach host memory at the model's zero-copy rate, paying
// for every read. What each driver call costs the host: test_host_costs.cc.
#include "timing_fixture.h"

namespace {

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
