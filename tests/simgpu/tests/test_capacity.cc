// Device capacity: run with SIMGPU_MEMORY=256MiB. Allocations past the capacity fail
// with CUDA's own codes (cudaErrorMemoryAllocation from the runtime,
// CUDA_ERROR_OUT_OF_MEMORY from the driver), the failure is not sticky,
// cudaMemGetInfo and cuMemGetInfo agree and move by exactly what was allocated, and
// freeing gives the capacity back. Host allocations (pinned, untouched managed) do
// not use device capacity; VMM device allocations do, host-location ones do not.
// Managed memory larger than the device works (pages are evicted), and a device
// allocation evicts resident managed pages rather than failing, as on a GPU.
#include <algorithm>
#include <vector>

#include "simgpu/kernel.h"
#include "simgpu_test.h"

namespace {

// Adds 1 to n ints; one CUDA thread per 64 Ki elements keeps the host run short.
__global__ void capacity_increment_kernel(int* p, long n) {
  long begin = (static_cast<long>(blockIdx.x) * blockDim.x + threadIdx.x) * 65536;
  for (long i = begin; i < begin + 65536 && i < n; ++i) p[i] += 1;
}
SIMGPU_KERNEL_FOOTPRINT(capacity_increment_kernel, [](simgpu::footprint& fp, int* p, long n) {
  fp.readwrite(p, static_cast<std::size_t>(n));
});

constexpr size_t kCapacity = 256ull << 20;  // bytes, as set by meson
constexpr size_t kChunk = 16ull << 20;      // bytes

size_t free_bytes() {
  size_t f = 0, t = 0;
  EXPECT_EQ(cudaMemGetInfo(&f, &t), cudaSuccess);
  return f;
}

TEST(Capacity, MemGetInfoReportsTheConfiguredCapacity) {
  size_t f = 0, t = 0;
  CUDA_OK(cudaMemGetInfo(&f, &t));
  EXPECT_EQ(t, kCapacity);
  EXPECT_LE(f, t);
  EXPECT_GT(f, t / 2) << "most of an idle device is free";
  cudaDeviceProp p{};
  CUDA_OK(cudaGetDeviceProperties(&p, 0));
  EXPECT_EQ(p.totalGlobalMem, kCapacity);
}

TEST(Capacity, RuntimeAllocationsAreBoundedAndCounted) {
  const size_t f0 = free_bytes();
  std::vector<void*> held;
  cudaError_t last = cudaSuccess;
  for (int i = 0; i < 64; ++i) {  // 64 * 16 MiB = 1 GiB, well past the capacity
    void* p = nullptr;
    last = cudaMalloc(&p, kChunk);
    if (last != cudaSuccess) {
      EXPECT_EQ(p, nullptr) << "a failed cudaMalloc leaves no pointer";
      break;
    }
    held.push_back(p);
    EXPECT_EQ(free_bytes(), f0 - held.size() * kChunk) << "after " << held.size() << " chunks";
  }
  EXPECT_EQ(last, cudaErrorMemoryAllocation) << cudaGetErrorName(last);
  EXPECT_LE(held.size() * kChunk, f0);
  EXPECT_LT(f0 - held.size() * kChunk, kChunk) << "capacity refused before it was used up";

  // Not sticky: the error is reported once, then calls work again.
  EXPECT_EQ(cudaGetLastError(), cudaErrorMemoryAllocation);
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
  void* small = nullptr;
  if (free_bytes() >= 4096) {
    CUDA_OK(cudaMalloc(&small, 4096));
    CUDA_OK(cudaFree(small));
  }

  for (void* p : held) CUDA_OK(cudaFree(p));
  EXPECT_EQ(free_bytes(), f0) << "freeing restores the capacity";
  void* again = nullptr;
  CUDA_OK(cudaMalloc(&again, kChunk));
  CUDA_OK(cudaFree(again));
}

TEST(Capacity, SingleAllocationLargerThanTheDeviceFails) {
  void* p = reinterpret_cast<void*>(0x1);
  EXPECT_EQ(cudaMalloc(&p, kCapacity + 1), cudaErrorMemoryAllocation);
  EXPECT_EQ(cudaGetLastError(), cudaErrorMemoryAllocation);
  EXPECT_EQ(cudaMalloc(&p, free_bytes() + (1u << 20)), cudaErrorMemoryAllocation);
  cudaGetLastError();
}

TEST(Capacity, ZeroByteAllocationSucceedsWithNull) {
  void* p = reinterpret_cast<void*>(0x1);
  CUDA_OK(cudaMalloc(&p, 0));
  EXPECT_EQ(p, nullptr);
  CUDA_OK(cudaFree(nullptr));
}

TEST(Capacity, StreamOrderedAllocationsShareTheCapacity) {
  const size_t f0 = free_bytes();
  cudaStream_t s;
  CUDA_OK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  void* big = nullptr;
  CUDA_OK(cudaMallocAsync(&big, f0 - kChunk, s));
  CUDA_OK(cudaStreamSynchronize(s));
  void* p = nullptr;
  EXPECT_EQ(cudaMalloc(&p, 2 * kChunk), cudaErrorMemoryAllocation);
  EXPECT_EQ(cudaMallocAsync(&p, 2 * kChunk, s), cudaErrorMemoryAllocation);
  cudaGetLastError();
  CUDA_OK(cudaFreeAsync(big, s));
  CUDA_OK(cudaStreamSynchronize(s));
  // A stream-ordered pool may keep freed memory cached, but a synchronous
  // allocation must be able to use it (real CUDA releases pool memory under
  // pressure).
  CUDA_OK(cudaMalloc(&p, f0 - kChunk));
  CUDA_OK(cudaFree(p));
  CUDA_OK(cudaStreamDestroy(s));
}

TEST(Capacity, HostAndManagedAllocationsDoNotUseDeviceCapacity) {
  const size_t f0 = free_bytes();
  void* pinned = nullptr;
  CUDA_OK(cudaMallocHost(&pinned, 64ull << 20));
  EXPECT_EQ(free_bytes(), f0);
  void* managed = nullptr;
  CUDA_OK(cudaMallocManaged(&managed, kCapacity + (64ull << 20)));  // oversubscribes
  CUDA_OK(cudaFreeHost(pinned));
  CUDA_OK(cudaFree(managed));
  EXPECT_EQ(free_bytes(), f0);
}

TEST(Capacity, DriverAllocationsUseTheDriversCodes) {
  auto cuInit_ = SIMGPU_DRV(cuInit);
  auto memAlloc = simgpu_test::driver<decltype(&cuMemAlloc_v2)>("cuMemAlloc_v2");
  auto memFree = simgpu_test::driver<decltype(&cuMemFree_v2)>("cuMemFree_v2");
  auto memGetInfo = simgpu_test::driver<decltype(&cuMemGetInfo_v2)>("cuMemGetInfo_v2");
  CU_OK(cuInit_(0));
  CUDA_OK(cudaFree(nullptr));  // the runtime makes the primary context current

  size_t df = 0, dt = 0;
  CU_OK(memGetInfo(&df, &dt));
  EXPECT_EQ(dt, kCapacity);
  EXPECT_EQ(df, free_bytes()) << "driver and runtime agree";

  CUdeviceptr big = 0;
  EXPECT_EQ(memAlloc(&big, kCapacity + 1), CUDA_ERROR_OUT_OF_MEMORY);
  CUdeviceptr d = 0;
  CU_OK(memAlloc(&d, kChunk));
  size_t df2 = 0;
  CU_OK(memGetInfo(&df2, &dt));
  EXPECT_EQ(df2, df - kChunk);
  EXPECT_EQ(free_bytes(), df2) << "runtime sees driver allocations";
  EXPECT_EQ(memAlloc(&big, df2 + 1), CUDA_ERROR_OUT_OF_MEMORY);
  CU_OK(memFree(d));
  CU_OK(memGetInfo(&df2, &dt));
  EXPECT_EQ(df2, df);
}

TEST(Capacity, VmmDeviceAllocationsUseCapacityHostOnesDoNot) {
  auto create = SIMGPU_DRV(cuMemCreate);
  auto release = SIMGPU_DRV(cuMemRelease);
  CUDA_OK(cudaFree(nullptr));
  const size_t f0 = free_bytes();
  const size_t gran = 2ull << 20;

  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = 0;
  CUmemGenericAllocationHandle h = 0;
  CU_OK(create(&h, 8 * gran, &prop, 0));
  EXPECT_EQ(free_bytes(), f0 - 8 * gran);
  CUmemGenericAllocationHandle too_big = 0;
  EXPECT_EQ(create(&too_big, (f0 - 8 * gran + gran) / gran * gran + gran, &prop, 0),
            CUDA_ERROR_OUT_OF_MEMORY);
  CU_OK(release(h));
  EXPECT_EQ(free_bytes(), f0);

  prop.location.type = CU_MEM_LOCATION_TYPE_HOST;
  CU_OK(create(&h, 8 * gran, &prop, 0));
  EXPECT_EQ(free_bytes(), f0) << "a host-location allocation uses no device memory";
  CU_OK(release(h));
}

// Fills the device from a managed allocation larger than it (kCapacity + 64 MiB):
// the host writes a pattern, then kernels add 1 to all of it, 64 MiB at a time.
// Answers the allocation; its n ints hold pattern + 1.
int* oversubscribe_with_managed(long* n_out) {
  const size_t bytes = kCapacity + (64ull << 20);
  const long n = static_cast<long>(bytes / sizeof(int));
  const long chunk = static_cast<long>((64ull << 20) / sizeof(int));
  int* m = nullptr;
  EXPECT_EQ(cudaMallocManaged(&m, bytes), cudaSuccess);
  if (m == nullptr) return nullptr;
  for (long i = 0; i < n; ++i) m[i] = static_cast<int>(i & 0xffff);
  for (long at = 0; at < n; at += chunk) {
    int* p = m + at;
    long len = std::min(chunk, n - at);
    void* args[] = {&p, &len};
    EXPECT_EQ(cudaLaunchKernel(reinterpret_cast<const void*>(&capacity_increment_kernel),
                               dim3(static_cast<unsigned>((len + 65536 * 64 - 1) / (65536 * 64))),
                               dim3(64), args, 0, nullptr),
              cudaSuccess);
    EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    size_t f = 0, t = 0;
    EXPECT_EQ(cudaMemGetInfo(&f, &t), cudaSuccess);
    EXPECT_LE(f, t);
  }
  *n_out = n;
  return m;
}

TEST(Capacity, ManagedMemoryOversubscribesTheDevice) {
  // Pages are evicted to make room; data stays right; the capacity holds.
  long n = 0;
  int* m = oversubscribe_with_managed(&n);
  ASSERT_NE(m, nullptr);
  for (long i = 0; i < n; i += 4097) ASSERT_EQ(m[i], static_cast<int>(i & 0xffff) + 1) << i;
  EXPECT_EQ(m[n - 1], static_cast<int>((n - 1) & 0xffff) + 1);
  CUDA_OK(cudaFree(m));
}

TEST(Capacity, DeviceAllocationEvictsManagedPages) {
  // With the device full of managed pages, cudaMalloc still succeeds: on a GPU the
  // UVM driver registers eviction callbacks with the physical allocator that
  // cudaMalloc uses, so managed pages give way to device allocations.
  long n = 0;
  int* m = oversubscribe_with_managed(&n);
  ASSERT_NE(m, nullptr);
  void* d = nullptr;
  EXPECT_EQ(cudaMalloc(&d, 128ull << 20), cudaSuccess);
  cudaGetLastError();
  if (d != nullptr) CUDA_OK(cudaFree(d));
  EXPECT_EQ(m[n - 1], static_cast<int>((n - 1) & 0xffff) + 1) << "evicted data survives";
  CUDA_OK(cudaFree(m));
}

}  // namespace
