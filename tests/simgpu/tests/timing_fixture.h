// The Timing fixture of simgpu's virtual-time tests (test_timing.cc: device time;
// test_host_costs.cc: the host's cost of each driver call family): a model's figures
// read from its own .model file, streams, events and the kernels that state their
// flops and bytes. Each test program includes it once.
//
// Note [Measuring one operation]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// The stream is first given a long kernel, so that
// the host is far ahead of the device when the events and the measured operation
// are enqueued; the interval between the two events is then the operation alone,
// without host API overhead.
#ifndef OVERSUB_TESTS_SIMGPU_TIMING_FIXTURE_H
#define OVERSUB_TESTS_SIMGPU_TIMING_FIXTURE_H

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
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
}  // namespace

#endif  // OVERSUB_TESTS_SIMGPU_TIMING_FIXTURE_H
