// Managed memory is page-granular and migrates: pages move to the device when a
// kernel touches them or when cudaMemPrefetchAsync moves them, and back to the host
// when host code touches them. Migrations are observed through virtual time: a
// kernel over pages resident on the host pays the model's fault cost per page, the
// same kernel over resident pages costs what it costs on cudaMalloc memory, and the
// extra cost is proportional to the number of pages that moved. Data stays right
// through every move. The model comes from $SIMGPU_DEVICE's .model file.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "simgpu/kernel.h"
#include "simgpu_test.h"

namespace {

// out[t] = sum of x over chunk t (kChunk floats per CUDA thread); touches every page.
constexpr long kChunk = 4096;
__global__ void managed_sum_kernel(const float* x, float* out, long n) {
  long t = static_cast<long>(blockIdx.x) * blockDim.x + threadIdx.x;
  float s = 0;
  for (long i = t * kChunk; i < (t + 1) * kChunk && i < n; ++i) s += x[i];
  if (t * kChunk < n) out[t] = s;
}
SIMGPU_KERNEL_FOOTPRINT(managed_sum_kernel,
                        [](simgpu::footprint& fp, const float* x, float* out, long n) {
                          fp.read(x, static_cast<std::size_t>(n));
                          fp.write(out, static_cast<std::size_t>((n + kChunk - 1) / kChunk));
                          fp.flops(static_cast<double>(n));
                        });

__global__ void busy_kernel(float* out, double flops) {
  (void)flops;
  if (threadIdx.x == 0) out[0] = 0;
}
SIMGPU_KERNEL_FOOTPRINT(busy_kernel, [](simgpu::footprint& fp, float* out, double flops) {
  fp.write(out, 1);
  fp.flops(flops);
});

// Reads x while it runs `flops` of work (a long kernel over managed pages).
__global__ void slow_read_kernel(const float* x, long n, double flops) {
  (void)x;
  (void)n;
  (void)flops;
}
SIMGPU_KERNEL_FOOTPRINT(slow_read_kernel,
                        [](simgpu::footprint& fp, const float* x, long n, double flops) {
                          fp.read(x, static_cast<std::size_t>(n));
                          fp.flops(flops);
                        });

class Managed : public ::testing::Test {
 protected:
  void SetUp() override {
    auto m = simgpu_test::device_model::current();
    page_ = static_cast<size_t>(m.number({"managed_page_size"}));
    fault_s_ = m.number({"managed_fault_ns"}) * 1e-9;
    peak_ = m.number({"fp32_flops"});
    ASSERT_GT(page_, 0u);
    ASSERT_EQ(page_ % 4096, 0u) << "a managed page is whole host pages";
    bytes_ = kPages * page_;
    n_ = static_cast<long>(bytes_ / sizeof(float));
    CUDA_OK(cudaMallocManaged(&x_, bytes_));
    CUDA_OK(cudaMalloc(&dev_x_, bytes_));
    CUDA_OK(cudaMalloc(&out_, static_cast<size_t>(n_ / kChunk + 1) * sizeof(float)));
    CUDA_OK(cudaStreamCreateWithFlags(&s_, cudaStreamNonBlocking));
    CUDA_OK(cudaEventCreate(&e0_));
    CUDA_OK(cudaEventCreate(&e1_));
    for (long i = 0; i < n_; ++i) x_[i] = 1.0f;  // every page on the host
    CUDA_OK(cudaMemset(dev_x_, 0, bytes_));
  }
  void TearDown() override {
    cudaFree(x_);
    cudaFree(dev_x_);
    cudaFree(out_);
    cudaStreamDestroy(s_);
    cudaEventDestroy(e0_);
    cudaEventDestroy(e1_);
  }

  // Virtual ms of one launch of `kernel` on s_, measured after a filler (see
  // test_timing.cc, Note [Measuring one operation] in tests/simgpu/tests/timing_fixture.h).
  double launch_ms(const void* kernel, dim3 grid, dim3 block, void** args) {
    double filler = 0.05 * peak_;
    void* fargs[] = {&out_, &filler};
    EXPECT_EQ(cudaLaunchKernel(reinterpret_cast<const void*>(&busy_kernel), dim3(1), dim3(1),
                               fargs, 0, s_),
              cudaSuccess);
    EXPECT_EQ(cudaEventRecord(e0_, s_), cudaSuccess);
    EXPECT_EQ(cudaLaunchKernel(kernel, grid, block, args, 0, s_), cudaSuccess);
    EXPECT_EQ(cudaEventRecord(e1_, s_), cudaSuccess);
    EXPECT_EQ(cudaEventSynchronize(e1_), cudaSuccess);
    float ms = -1;
    EXPECT_EQ(cudaEventElapsedTime(&ms, e0_, e1_), cudaSuccess);
    return ms;
  }

  // Virtual ms of one managed_sum_kernel over x.
  double sum_ms(const float* x) {
    long n = n_;
    void* args[] = {&x, &out_, &n};
    unsigned threads = static_cast<unsigned>((n_ + kChunk - 1) / kChunk);
    return launch_ms(reinterpret_cast<const void*>(&managed_sum_kernel),
                     dim3((threads + 31) / 32), dim3(32), args);
  }

  // The sum of all chunk sums the last kernel wrote.
  double total() {
    std::vector<float> parts(static_cast<size_t>(n_ / kChunk));
    EXPECT_EQ(cudaMemcpy(parts.data(), out_, parts.size() * sizeof(float), cudaMemcpyDeviceToHost),
              cudaSuccess);
    double t = 0;
    for (float p : parts) t += p;
    return t;
  }

  void touch_on_host(size_t pages) {
    for (size_t p = 0; p < pages; ++p) x_[p * page_ / sizeof(float)] += 1.0f;
  }

  cudaError_t prefetch(cudaMemLocationType type) {
    cudaMemLocation loc{};
    loc.type = type;
    loc.id = 0;  // device 0; ignored for the host
    return cudaMemPrefetchAsync(x_, bytes_, loc, 0, s_);
  }

  static constexpr size_t kPages = 16;
  size_t page_ = 0, bytes_ = 0;
  long n_ = 0;
  double fault_s_ = 0, peak_ = 0;
  float* x_ = nullptr;
  float* dev_x_ = nullptr;
  float* out_ = nullptr;
  cudaStream_t s_ = nullptr;
  cudaEvent_t e0_ = nullptr, e1_ = nullptr;
};

TEST_F(Managed, PagesMigrateOnKernelAccessAndBackOnHostAccess) {
  const double resident = sum_ms(dev_x_);  // the same kernel on device memory

  const double cold = sum_ms(x_);  // every page faults to the device
  EXPECT_DOUBLE_EQ(total(), static_cast<double>(n_)) << "data moved intact";
  EXPECT_GE(cold - resident, 0.99 * kPages * fault_s_ * 1e3)
      << "each of " << kPages << " pages pays at least the fault cost";

  const double warm = sum_ms(x_);  // all pages now on the device
  EXPECT_NEAR(warm, resident, 0.01 * resident) << "resident managed pages cost nothing extra";

  // Host code touches 4 pages: they move back, and the next kernel pays for those 4.
  touch_on_host(4);
  const double partial = sum_ms(x_);
  EXPECT_DOUBLE_EQ(total(), static_cast<double>(n_) + 4.0) << "host writes reached the device";
  EXPECT_NEAR((partial - resident) / (cold - resident), 4.0 / kPages, 0.01)
      << "cost proportional to pages moved: cold=" << cold << " partial=" << partial
      << " resident=" << resident;

  const double warm_again = sum_ms(x_);
  EXPECT_NEAR(warm_again, resident, 0.01 * resident);
}

// A kernel's body run on the host may touch none of what its footprint declares; on a
// GPU the kernel reads every byte, so every declared page on the host faults (See Note
// [A kernel touches its footprint] in tests/simgpu/driver/managed.h), or, without
// concurrent managed access, the launch migrates them all first.
TEST_F(Managed, AKernelFaultsInEveryPageItDeclares) {
  const bool concurrent =
      simgpu_test::device_model::current().number({"concurrent_managed_access"}) != 0;
  long n = n_;
  double flops = 0;
  const float* x = dev_x_;
  void* args[] = {&x, &n, &flops};
  const void* k = reinterpret_cast<const void*>(&slow_read_kernel);
  const double resident = launch_ms(k, dim3(1), dim3(1), args);
  x = x_;
  const double cold = launch_ms(k, dim3(1), dim3(1), args);
  if (concurrent) {
    EXPECT_GE(cold - resident, 0.99 * kPages * fault_s_ * 1e3)
        << "each of " << kPages << " declared pages pays at least the fault cost";
  }
  const double warm = launch_ms(k, dim3(1), dim3(1), args);
  EXPECT_NEAR(warm, resident, 0.01 * resident) << "the pages stayed on the device";
  // As much as a kernel whose body touches every page pays for them.
  touch_on_host(kPages);
  const double touched = sum_ms(x_);
  const double touched_extra = touched - sum_ms(dev_x_);
  EXPECT_NEAR(cold - resident, touched_extra, 0.01 * touched_extra);
}

TEST_F(Managed, PrefetchMovesPagesAheadOfTheKernel) {
  const double resident = sum_ms(dev_x_);

  CUDA_OK(cudaEventRecord(e0_, s_));
  CUDA_OK(prefetch(cudaMemLocationTypeDevice));
  CUDA_OK(cudaEventRecord(e1_, s_));
  CUDA_OK(cudaEventSynchronize(e1_));
  float prefetch_ms = -1;
  CUDA_OK(cudaEventElapsedTime(&prefetch_ms, e0_, e1_));
  EXPECT_GT(prefetch_ms, 0.0f) << "a migration takes time on the stream";

  const double after = sum_ms(x_);
  EXPECT_NEAR(after, resident, 0.01 * resident) << "prefetched pages do not fault";
  EXPECT_DOUBLE_EQ(total(), static_cast<double>(n_));

  // Prefetch back to the host: the next kernel faults on every page again.
  CUDA_OK(prefetch(cudaMemLocationTypeHost));
  CUDA_OK(cudaStreamSynchronize(s_));
  const double cold = sum_ms(x_);
  EXPECT_GE(cold - resident, 0.99 * kPages * fault_s_ * 1e3);
}

TEST_F(Managed, PrefetchIsCheaperThanFaulting) {
  // Moving all pages in one prefetch costs less than faulting them in one by one.
  const double resident = sum_ms(dev_x_);
  const double cold = sum_ms(x_);
  touch_on_host(kPages);
  CUDA_OK(cudaEventRecord(e0_, s_));
  CUDA_OK(prefetch(cudaMemLocationTypeDevice));
  CUDA_OK(cudaEventRecord(e1_, s_));
  CUDA_OK(cudaEventSynchronize(e1_));
  float prefetch_ms = -1;
  CUDA_OK(cudaEventElapsedTime(&prefetch_ms, e0_, e1_));
  EXPECT_LT(prefetch_ms, cold - resident);
}

// cudaMemRangeGetAttribute answers from what cudaMemPrefetchAsync and cudaMemAdvise
// recorded, for the whole range or for part of it.
TEST_F(Managed, LastPrefetchLocationIsRecorded) {
  int where = -42;
  CUDA_OK(cudaMemRangeGetAttribute(&where, sizeof where, cudaMemRangeAttributeLastPrefetchLocation,
                                   x_, bytes_));
  EXPECT_EQ(where, cudaInvalidDeviceId) << "never prefetched";

  CUDA_OK(prefetch(cudaMemLocationTypeDevice));
  CUDA_OK(cudaStreamSynchronize(s_));
  CUDA_OK(cudaMemRangeGetAttribute(&where, sizeof where, cudaMemRangeAttributeLastPrefetchLocation,
                                   x_, bytes_));
  EXPECT_EQ(where, 0);
  cudaMemLocationType type = cudaMemLocationTypeInvalid;
  CUDA_OK(cudaMemRangeGetAttribute(&type, sizeof type,
                                   cudaMemRangeAttributeLastPrefetchLocationType, x_, bytes_));
  EXPECT_EQ(type, cudaMemLocationTypeDevice);
  int id = -42;
  CUDA_OK(cudaMemRangeGetAttribute(&id, sizeof id, cudaMemRangeAttributeLastPrefetchLocationId,
                                   x_ + 100, 4));
  EXPECT_EQ(id, 0);

  CUDA_OK(prefetch(cudaMemLocationTypeHost));
  CUDA_OK(cudaStreamSynchronize(s_));
  CUDA_OK(cudaMemRangeGetAttribute(&where, sizeof where, cudaMemRangeAttributeLastPrefetchLocation,
                                   x_, bytes_));
  EXPECT_EQ(where, cudaCpuDeviceId);
  CUDA_OK(cudaMemRangeGetAttribute(&type, sizeof type,
                                   cudaMemRangeAttributeLastPrefetchLocationType, x_, bytes_));
  EXPECT_EQ(type, cudaMemLocationTypeHost);

  // The first half back on the device: the halves agree, the whole range does not.
  cudaMemLocation dev{cudaMemLocationTypeDevice, 0};
  CUDA_OK(cudaMemPrefetchAsync(x_, bytes_ / 2, dev, 0, s_));
  CUDA_OK(cudaStreamSynchronize(s_));
  CUDA_OK(cudaMemRangeGetAttribute(&where, sizeof where, cudaMemRangeAttributeLastPrefetchLocation,
                                   x_, bytes_ / 2));
  EXPECT_EQ(where, 0);
  CUDA_OK(cudaMemRangeGetAttribute(&where, sizeof where, cudaMemRangeAttributeLastPrefetchLocation,
                                   x_ + n_ / 2, bytes_ / 2));
  EXPECT_EQ(where, cudaCpuDeviceId);
  CUDA_OK(cudaMemRangeGetAttribute(&where, sizeof where, cudaMemRangeAttributeLastPrefetchLocation,
                                   x_, bytes_));
  EXPECT_EQ(where, cudaInvalidDeviceId) << "mixed prefetch locations";
  CUDA_OK(cudaMemRangeGetAttribute(&type, sizeof type,
                                   cudaMemRangeAttributeLastPrefetchLocationType, x_, bytes_));
  EXPECT_EQ(type, cudaMemLocationTypeInvalid);

  // Preferred location: none, then the device for the whole range, then mixed.
  CUDA_OK(cudaMemRangeGetAttribute(&where, sizeof where, cudaMemRangeAttributePreferredLocation,
                                   x_, bytes_));
  EXPECT_EQ(where, cudaInvalidDeviceId) << "no preferred location advised";
  CUDA_OK(cudaMemAdvise(x_, bytes_, cudaMemAdviseSetPreferredLocation, dev));
  CUDA_OK(cudaMemRangeGetAttribute(&where, sizeof where, cudaMemRangeAttributePreferredLocation,
                                   x_, bytes_));
  EXPECT_EQ(where, 0);
  CUDA_OK(cudaMemRangeGetAttribute(&type, sizeof type,
                                   cudaMemRangeAttributePreferredLocationType, x_, bytes_));
  EXPECT_EQ(type, cudaMemLocationTypeDevice);
  CUDA_OK(cudaMemRangeGetAttribute(&id, sizeof id, cudaMemRangeAttributePreferredLocationId, x_,
                                   bytes_));
  EXPECT_EQ(id, 0);
  cudaMemLocation host{cudaMemLocationTypeHost, 0};
  CUDA_OK(cudaMemAdvise(x_ + n_ / 2, bytes_ / 2, cudaMemAdviseSetPreferredLocation, host));
  CUDA_OK(cudaMemRangeGetAttribute(&where, sizeof where, cudaMemRangeAttributePreferredLocation,
                                   x_ + n_ / 2, bytes_ / 2));
  EXPECT_EQ(where, cudaCpuDeviceId);
  CUDA_OK(cudaMemRangeGetAttribute(&where, sizeof where, cudaMemRangeAttributePreferredLocation,
                                   x_, bytes_));
  EXPECT_EQ(where, cudaInvalidDeviceId) << "mixed preferred locations";
  CUDA_OK(cudaMemRangeGetAttribute(&type, sizeof type,
                                   cudaMemRangeAttributePreferredLocationType, x_, bytes_));
  EXPECT_EQ(type, cudaMemLocationTypeInvalid);
  CUDA_OK(cudaMemAdvise(x_, bytes_, cudaMemAdviseUnsetPreferredLocation, host));
  CUDA_OK(cudaMemRangeGetAttribute(&where, sizeof where, cudaMemRangeAttributePreferredLocation,
                                   x_ + n_ / 2, bytes_ / 2));
  EXPECT_EQ(where, cudaInvalidDeviceId) << "unset";

  // Read-mostly: 1 only where every page has it.
  int read_mostly = -42;
  CUDA_OK(cudaMemRangeGetAttribute(&read_mostly, sizeof read_mostly,
                                   cudaMemRangeAttributeReadMostly, x_, bytes_));
  EXPECT_EQ(read_mostly, 0);
  CUDA_OK(cudaMemAdvise(x_, bytes_ / 2, cudaMemAdviseSetReadMostly, dev));
  CUDA_OK(cudaMemRangeGetAttribute(&read_mostly, sizeof read_mostly,
                                   cudaMemRangeAttributeReadMostly, x_, bytes_ / 2));
  EXPECT_EQ(read_mostly, 1);
  CUDA_OK(cudaMemRangeGetAttribute(&read_mostly, sizeof read_mostly,
                                   cudaMemRangeAttributeReadMostly, x_, bytes_));
  EXPECT_EQ(read_mostly, 0) << "only half is read-mostly";
  CUDA_OK(cudaMemAdvise(x_, bytes_, cudaMemAdviseSetReadMostly, dev));
  CUDA_OK(cudaMemRangeGetAttribute(&read_mostly, sizeof read_mostly,
                                   cudaMemRangeAttributeReadMostly, x_, bytes_));
  EXPECT_EQ(read_mostly, 1);
  CUDA_OK(cudaMemAdvise(x_, bytes_, cudaMemAdviseUnsetReadMostly, dev));
  CUDA_OK(cudaMemRangeGetAttribute(&read_mostly, sizeof read_mostly,
                                   cudaMemRangeAttributeReadMostly, x_, bytes_));
  EXPECT_EQ(read_mostly, 0);
}

TEST_F(Managed, RangeAttributesTogetherAndTheirErrors) {
  cudaMemLocation dev{cudaMemLocationTypeDevice, 0};
  CUDA_OK(cudaMemAdvise(x_, bytes_, cudaMemAdviseSetAccessedBy, dev));
  CUDA_OK(cudaMemAdvise(x_, bytes_, cudaMemAdviseSetReadMostly, dev));
  CUDA_OK(prefetch(cudaMemLocationTypeDevice));
  CUDA_OK(cudaStreamSynchronize(s_));

  int read_mostly = -42, prefetched = -42;
  int accessed_by[3] = {-42, -42, -42};
  void* data[] = {&read_mostly, accessed_by, &prefetched};
  size_t sizes[] = {sizeof read_mostly, sizeof accessed_by, sizeof prefetched};
  cudaMemRangeAttribute which[] = {cudaMemRangeAttributeReadMostly,
                                   cudaMemRangeAttributeAccessedBy,
                                   cudaMemRangeAttributeLastPrefetchLocation};
  CUDA_OK(cudaMemRangeGetAttributes(data, sizes, which, 3, x_, bytes_));
  EXPECT_EQ(read_mostly, 1);
  EXPECT_EQ(accessed_by[0], 0);
  EXPECT_EQ(accessed_by[1], cudaInvalidDeviceId) << "the rest is padded";
  EXPECT_EQ(accessed_by[2], cudaInvalidDeviceId);
  EXPECT_EQ(prefetched, 0);

  CUDA_OK(cudaMemAdvise(x_, bytes_ / 2, cudaMemAdviseUnsetAccessedBy, dev));
  CUDA_OK(cudaMemRangeGetAttribute(accessed_by, sizeof accessed_by,
                                   cudaMemRangeAttributeAccessedBy, x_, bytes_));
  EXPECT_EQ(accessed_by[0], cudaInvalidDeviceId) << "device 0 is not advised for all of it";

  // Not managed memory, a wrong size, a range past the allocation: invalid values.
  int v = 0;
  EXPECT_EQ(cudaMemRangeGetAttribute(&v, sizeof v, cudaMemRangeAttributeReadMostly, dev_x_, 4),
            cudaErrorInvalidValue);
  EXPECT_EQ(cudaMemRangeGetAttribute(&v, 8, cudaMemRangeAttributeReadMostly, x_, 4),
            cudaErrorInvalidValue);
  EXPECT_EQ(cudaMemRangeGetAttribute(accessed_by, 6, cudaMemRangeAttributeAccessedBy, x_, 4),
            cudaErrorInvalidValue);
  EXPECT_EQ(cudaMemRangeGetAttribute(&v, sizeof v, cudaMemRangeAttributeReadMostly, x_,
                                     bytes_ + page_),
            cudaErrorInvalidValue);
  EXPECT_EQ(cudaMemRangeGetAttribute(&v, sizeof v, cudaMemRangeAttributeReadMostly, x_, 0),
            cudaErrorInvalidValue);
  std::vector<float> host(4);
  EXPECT_EQ(cudaMemRangeGetAttribute(&v, sizeof v, cudaMemRangeAttributeReadMostly, host.data(),
                                     sizeof(float) * host.size()),
            cudaErrorInvalidValue);
  (void)cudaGetLastError();
}

TEST_F(Managed, CopiesToAndFromManagedMemoryMoveTheData) {
  // x_ holds 1.0f everywhere (written by the host). Copy it to device memory and
  // back into x_ after the device changed it; the host then reads the new values.
  CUDA_OK(cudaMemcpy(dev_x_, x_, bytes_, cudaMemcpyDefault));
  CUDA_OK(cudaMemset(dev_x_, 0, sizeof(float) * 8));
  CUDA_OK(cudaMemcpy(x_, dev_x_, bytes_, cudaMemcpyDefault));
  EXPECT_EQ(x_[0], 0.0f);
  EXPECT_EQ(x_[8], 1.0f);
  EXPECT_EQ(x_[n_ - 1], 1.0f);
  // A kernel sees what the copy wrote.
  sum_ms(x_);
  EXPECT_DOUBLE_EQ(total(), static_cast<double>(n_ - 8));
}

// See Note [Migrations of pages in use] in tests/simgpu/driver/managed.h: a prefetch to the
// host that nothing orders after the kernel reading the pages finds that kernel still
// running, which faults every page back: the pages end on the device, and the kernels
// after it start later by the faults' time. Ordered after the kernel (an event), the
// same prefetch leaves the pages on the host and costs the kernels nothing.
TEST_F(Managed, APrefetchToTheHostUnderAKernelUsingThePagesIsFaultedBack) {
  auto m = simgpu_test::device_model::current();
  const double h2d = m.number({"managed_h2d_bandwidth", "h2d_pinned_bandwidth"});
  const double back_ms = kPages * (fault_s_ * 1e3 + page_ / h2d * 1e3);
  const double resident = sum_ms(dev_x_);
  cudaStream_t other = nullptr;
  CUDA_OK(cudaStreamCreateWithFlags(&other, cudaStreamNonBlocking));
  cudaEvent_t after = nullptr;
  CUDA_OK(cudaEventCreate(&after));
  for (bool ordered : {false, true}) {
    SCOPED_TRACE(ordered ? "ordered after the kernel" : "unordered");
    CUDA_OK(prefetch(cudaMemLocationTypeDevice));
    CUDA_OK(cudaDeviceSynchronize());
    long n = n_;
    double flops = 0.01 * peak_;  // 10 ms
    void* args[] = {&x_, &n, &flops};
    CUDA_OK(cudaLaunchKernel(reinterpret_cast<const void*>(&slow_read_kernel), dim3(1),
                             dim3(32), args, 0, s_));
    CUDA_OK(cudaEventRecord(e0_, s_));
    if (ordered) {
      CUDA_OK(cudaEventRecord(after, s_));
      CUDA_OK(cudaStreamWaitEvent(other, after, 0));
    }
    cudaMemLocation host{};
    host.type = cudaMemLocationTypeHost;
    CUDA_OK(cudaMemPrefetchAsync(x_, bytes_, host, 0, other));
    double tiny = 1;
    void* fargs[] = {&out_, &tiny};
    CUDA_OK(cudaLaunchKernel(reinterpret_cast<const void*>(&busy_kernel), dim3(1), dim3(1),
                             fargs, 0, s_));
    CUDA_OK(cudaEventRecord(e1_, s_));
    CUDA_OK(cudaDeviceSynchronize());
    float late_ms = -1;
    CUDA_OK(cudaEventElapsedTime(&late_ms, e0_, e1_));
    const double next = sum_ms(x_);
    if (ordered) {
      EXPECT_LT(late_ms, 0.1 * back_ms) << "the kernels after it wait for nothing";
      EXPECT_GE(next - resident, 0.99 * kPages * fault_s_ * 1e3) << "the pages left";
    } else {
      EXPECT_GE(late_ms, 0.99 * back_ms) << "the faults back delay the later kernels";
      EXPECT_NEAR(next, resident, 0.01 * resident) << "the faults brought the pages back";
    }
    EXPECT_DOUBLE_EQ(total(), static_cast<double>(n_)) << "the data is right either way";
  }
  CUDA_OK(cudaEventDestroy(after));
  CUDA_OK(cudaStreamDestroy(other));
}

TEST_F(Managed, AdviseAndPointerAttributes) {
  cudaMemLocation dev{};
  dev.type = cudaMemLocationTypeDevice;
  dev.id = 0;
  CUDA_OK(cudaMemAdvise(x_, bytes_, cudaMemAdviseSetPreferredLocation, dev));
  CUDA_OK(cudaMemAdvise(x_, bytes_, cudaMemAdviseSetAccessedBy, dev));
  cudaPointerAttributes attr{};
  CUDA_OK(cudaPointerGetAttributes(&attr, x_ + 10));
  EXPECT_EQ(attr.type, cudaMemoryTypeManaged);
  EXPECT_EQ(attr.devicePointer, static_cast<void*>(x_ + 10));
  EXPECT_EQ(attr.hostPointer, static_cast<void*>(x_ + 10));
}

// cuMemDiscardBatchAsync (Note [Discards] in tests/simgpu/driver/managed.h): the device
// pages come back to the capacity with nothing migrated, in a fraction of a migration's
// time, and the bytes read afterwards are the poison, not the old values.
TEST_F(Managed, ADiscardGivesBackItsPagesWithoutMigratingAndPoisonsThem) {
  auto m = simgpu_test::device_model::current();
  auto discard = SIMGPU_DRV(cuMemDiscardBatchAsync);
  CUdeviceptr ptr = reinterpret_cast<CUdeviceptr>(x_);
  size_t size = bytes_;
  if (m.number({"concurrent_managed_access"}) == 0) {
    EXPECT_EQ(discard(&ptr, &size, 1, 0, s_), CUDA_ERROR_NOT_SUPPORTED);
    return;
  }
  CUDA_OK(prefetch(cudaMemLocationTypeDevice));
  CUDA_OK(cudaStreamSynchronize(s_));
  size_t free_before = 0, total = 0;
  CUDA_OK(cudaMemGetInfo(&free_before, &total));
  CUDA_OK(cudaEventRecord(e0_, s_));
  ASSERT_EQ(discard(&ptr, &size, 1, 0, s_), CUDA_SUCCESS);
  CUDA_OK(cudaEventRecord(e1_, s_));
  CUDA_OK(cudaEventSynchronize(e1_));
  float discard_ms = -1;
  CUDA_OK(cudaEventElapsedTime(&discard_ms, e0_, e1_));
  const double d2h = m.number({"managed_d2h_bandwidth", "d2h_pinned_bandwidth"});
  const double per_page_ns =
      m.has("managed_discard_page_ns")
          ? m.number({"managed_discard_page_ns"})
          : std::min(m.number({"managed_fault_ns"}), page_ / d2h * 1e9);
  const double expect_ms = (m.number({"copy_latency_ns"}) + kPages * per_page_ns) * 1e-6;
  // Give or take the host's own part of the calls between the events.
  EXPECT_NEAR(discard_ms, expect_ms, 0.01 * expect_ms + 2e-6 * m.number({"api_overhead_ns"}));
  size_t free_after = 0;
  CUDA_OK(cudaMemGetInfo(&free_after, &total));
  EXPECT_EQ(free_after - free_before, bytes_) << "the device pages were given back";
  std::uint32_t poison = 0;
  std::memset(&poison, 0xDB, sizeof poison);
  std::size_t old = 0;
  for (long i = 0; i < n_; ++i) {
    std::uint32_t bits = 0;
    std::memcpy(&bits, &x_[i], sizeof bits);
    old += bits != poison;
  }
  EXPECT_EQ(old, 0u) << "a read after a discard finds no old value";
  const double resident = sum_ms(dev_x_);
  EXPECT_GE(sum_ms(x_) - resident, 0.99 * kPages * fault_s_ * 1e3)
      << "the pages come back as any page on the host does";
}

TEST_F(Managed, ADiscardRefusesWhatTheDocumentationRefuses) {
  if (simgpu_test::device_model::current().number({"concurrent_managed_access"}) == 0) {
    GTEST_SKIP() << "refused as a whole on this model (the test above)";
  }
  auto discard = SIMGPU_DRV(cuMemDiscardBatchAsync);
  CUdeviceptr ptrs[] = {reinterpret_cast<CUdeviceptr>(x_), reinterpret_cast<CUdeviceptr>(dev_x_)};
  size_t sizes[] = {bytes_, bytes_};
  EXPECT_EQ(discard(ptrs, sizes, 1, 0, nullptr), CUDA_ERROR_INVALID_VALUE) << "legacy stream";
  EXPECT_EQ(discard(ptrs, sizes, 1, 0, CU_STREAM_LEGACY), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(discard(ptrs, sizes, 1, 1, s_), CUDA_ERROR_INVALID_VALUE) << "flags";
  EXPECT_EQ(discard(ptrs, sizes, 0, 0, s_), CUDA_ERROR_INVALID_VALUE) << "no range";
  EXPECT_EQ(discard(ptrs, sizes, 2, 0, s_), CUDA_ERROR_INVALID_VALUE) << "device memory";
  size_t past[] = {bytes_ * 64};
  EXPECT_EQ(discard(ptrs, past, 1, 0, s_), CUDA_ERROR_INVALID_VALUE) << "past the allocation";
  // Nothing was discarded by the refused calls.
  CUDA_OK(cudaStreamSynchronize(s_));
  EXPECT_EQ(x_[0], 1.0f);
  EXPECT_EQ(x_[n_ - 1], 1.0f);
}

TEST_F(Managed, ConcurrentManagedAccessMatchesTheModel) {
  auto m = simgpu_test::device_model::current();
  int v = -1;
  CUDA_OK(cudaDeviceGetAttribute(&v, cudaDevAttrConcurrentManagedAccess, 0));
  EXPECT_EQ(v, static_cast<int>(m.number({"concurrent_managed_access"})));
  cudaDeviceProp p{};
  CUDA_OK(cudaGetDeviceProperties(&p, 0));
  EXPECT_EQ(p.concurrentManagedAccess, v);
  EXPECT_EQ(p.managedMemory, 1);
}

}  // namespace
