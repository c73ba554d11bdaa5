// The virtual memory management API as oversub uses it to keep a buffer's device
// address through a swap: reserve an address range, create physical memory on the
// device or on the host, map, set access, unmap, map again. Data lives in the
// physical allocation, so it survives unmap/remap (at the same or another address),
// and a host-location mapping is readable and writable by kernels at device
// addresses. Granularity is 2 MiB; misaligned requests and misuse (mapping twice,
// outside a reservation, unmapping or releasing twice) are refused.
#include <cstring>
#include <vector>

#include "simgpu/kernel.h"
#include "simgpu_test.h"

namespace {

__global__ void vmm_scale_kernel(const int* x, int* y, int factor, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = x[i] * factor;
}
SIMGPU_KERNEL(vmm_scale_kernel);

class Vmm : public ::testing::Test {
 protected:
  void SetUp() override {
    CUDA_OK(cudaFree(nullptr));  // the primary context, current on this thread
    try {
      reserve_ = SIMGPU_DRV(cuMemAddressReserve);
      free_ = SIMGPU_DRV(cuMemAddressFree);
      create_ = SIMGPU_DRV(cuMemCreate);
      release_ = SIMGPU_DRV(cuMemRelease);
      map_ = SIMGPU_DRV(cuMemMap);
      unmap_ = SIMGPU_DRV(cuMemUnmap);
      access_ = SIMGPU_DRV(cuMemSetAccess);
      gran_fn_ = SIMGPU_DRV(cuMemGetAllocationGranularity);
    } catch (const std::exception& e) {
      GTEST_FAIL() << e.what();
    }
  }

  CUmemAllocationProp prop(CUmemLocationType where) {
    CUmemAllocationProp p{};
    p.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    p.location.type = where;
    p.location.id = 0;
    return p;
  }

  // Device read-write access to [va, va + bytes).
  CUresult grant(CUdeviceptr va, size_t bytes) {
    CUmemAccessDesc d{};
    d.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    d.location.id = 0;
    d.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    return access_(va, bytes, &d, 1);
  }

  // y = x * factor over n ints, on the device, then synchronised.
  cudaError_t scale(const int* x, int* y, int factor, int n) {
    void* args[] = {&x, &y, &factor, &n};
    cudaError_t e = cudaLaunchKernel(reinterpret_cast<const void*>(&vmm_scale_kernel),
                                     dim3((n + 255) / 256), dim3(256), args, 0, nullptr);
    return e != cudaSuccess ? e : cudaDeviceSynchronize();
  }

  static constexpr size_t kGran = 2ull << 20;  // bytes
  decltype(&cuMemAddressReserve) reserve_ = nullptr;
  decltype(&cuMemAddressFree) free_ = nullptr;
  decltype(&cuMemCreate) create_ = nullptr;
  decltype(&cuMemRelease) release_ = nullptr;
  decltype(&cuMemMap) map_ = nullptr;
  decltype(&cuMemUnmap) unmap_ = nullptr;
  decltype(&cuMemSetAccess) access_ = nullptr;
  decltype(&cuMemGetAllocationGranularity) gran_fn_ = nullptr;
};

TEST_F(Vmm, GranularityIsTwoMiB) {
  for (CUmemLocationType where : {CU_MEM_LOCATION_TYPE_DEVICE, CU_MEM_LOCATION_TYPE_HOST}) {
    CUmemAllocationProp p = prop(where);
    size_t g = 0;
    CU_OK(gran_fn_(&g, &p, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
    EXPECT_EQ(g, kGran) << "location type " << where;
    size_t rec = 0;
    CU_OK(gran_fn_(&rec, &p, CU_MEM_ALLOC_GRANULARITY_RECOMMENDED));
    EXPECT_GE(rec, g);
    EXPECT_EQ(rec % g, 0u);
  }
}

TEST_F(Vmm, MisalignedRequestsAreRefused) {
  CUmemAllocationProp p = prop(CU_MEM_LOCATION_TYPE_DEVICE);
  CUmemGenericAllocationHandle h = 0;
  EXPECT_EQ(create_(&h, kGran + 4096, &p, 0), CUDA_ERROR_INVALID_VALUE);
  CUdeviceptr va = 0;
  CU_OK(reserve_(&va, 2 * kGran, 0, 0, 0));
  EXPECT_EQ(va % kGran, 0u) << "reserved ranges are granularity-aligned";
  CU_OK(create_(&h, kGran, &p, 0));
  EXPECT_EQ(map_(va + 4096, kGran, 0, h, 0), CUDA_ERROR_INVALID_VALUE);
  CU_OK(release_(h));
  CU_OK(free_(va, 2 * kGran));
}

TEST_F(Vmm, MisuseIsRefused) {
  CUmemAllocationProp p = prop(CU_MEM_LOCATION_TYPE_DEVICE);
  CUmemGenericAllocationHandle h = 0;
  CU_OK(create_(&h, kGran, &p, 0));
  CUdeviceptr va = 0;
  CU_OK(reserve_(&va, 2 * kGran, 0, 0, 0));
  CU_OK(map_(va, kGran, 0, h, 0));
  EXPECT_NE(map_(va, kGran, 0, h, 0), CUDA_SUCCESS) << "mapping over a mapping";
  EXPECT_NE(map_(va + kGran, 2 * kGran, 0, h, 0), CUDA_SUCCESS)
      << "mapping more than the allocation / past the reservation";
  EXPECT_NE(map_(va + 64 * kGran, kGran, 0, h, 0), CUDA_SUCCESS) << "outside any reservation";
  CUmemAccessDesc d{};
  d.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  d.location.id = 0;
  d.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  EXPECT_NE(access_(va + kGran, kGran, &d, 1), CUDA_SUCCESS) << "access to an unmapped range";
  CU_OK(unmap_(va, kGran));
  EXPECT_NE(unmap_(va, kGran), CUDA_SUCCESS) << "unmapping twice";
  CU_OK(release_(h));
  EXPECT_NE(release_(h), CUDA_SUCCESS) << "releasing twice";
  CU_OK(free_(va, 2 * kGran));
}

TEST_F(Vmm, MapUnmapRemapKeepsData) {
  const size_t bytes = 2 * kGran;
  const int n = static_cast<int>(bytes / sizeof(int));
  std::vector<int> pattern(n), back(n, 0);
  for (int i = 0; i < n; ++i) pattern[i] = i * 7 + 3;

  CUdeviceptr va = 0;
  CU_OK(reserve_(&va, 2 * bytes, 0, 0, 0));  // room for the data twice
  CUmemAllocationProp p = prop(CU_MEM_LOCATION_TYPE_DEVICE);
  CUmemGenericAllocationHandle h = 0;
  CU_OK(create_(&h, bytes, &p, 0));
  CU_OK(map_(va, bytes, 0, h, 0));
  CU_OK(grant(va, bytes));
  int* first = reinterpret_cast<int*>(va);
  CUDA_OK(cudaMemcpy(first, pattern.data(), bytes, cudaMemcpyHostToDevice));

  // The address is usable like cudaMalloc memory.
  cudaPointerAttributes attr{};
  CUDA_OK(cudaPointerGetAttributes(&attr, first));
  EXPECT_EQ(attr.type, cudaMemoryTypeDevice);

  // Unmap, and map the same allocation back at the same address.
  CU_OK(unmap_(va, bytes));
  CU_OK(map_(va, bytes, 0, h, 0));
  CU_OK(grant(va, bytes));
  CUDA_OK(cudaMemcpy(back.data(), first, bytes, cudaMemcpyDeviceToHost));
  EXPECT_EQ(back, pattern) << "data kept through unmap/remap at the same address";

  // Unmap, and map it at the second half of the range: same bytes, new address.
  CU_OK(unmap_(va, bytes));
  int* second = reinterpret_cast<int*>(va + bytes);
  CU_OK(map_(va + bytes, bytes, 0, h, 0));
  CU_OK(grant(va + bytes, bytes));
  std::fill(back.begin(), back.end(), 0);
  CUDA_OK(cudaMemcpy(back.data(), second, bytes, cudaMemcpyDeviceToHost));
  EXPECT_EQ(back, pattern) << "data kept when mapped at another address";

  // A kernel sees it too, and writes through it.
  CUDA_OK(scale(second, second, 2, n));
  CUDA_OK(cudaMemcpy(back.data(), second, sizeof(int) * 4, cudaMemcpyDeviceToHost));
  EXPECT_EQ(back[3], pattern[3] * 2);

  CU_OK(unmap_(va + bytes, bytes));
  CU_OK(release_(h));
  CU_OK(free_(va, 2 * bytes));
}

TEST_F(Vmm, OneAllocationMappedTwiceAliases) {
  CUdeviceptr va = 0;
  CU_OK(reserve_(&va, 2 * kGran, 0, 0, 0));
  CUmemAllocationProp p = prop(CU_MEM_LOCATION_TYPE_DEVICE);
  CUmemGenericAllocationHandle h = 0;
  CU_OK(create_(&h, kGran, &p, 0));
  CU_OK(map_(va, kGran, 0, h, 0));
  CU_OK(map_(va + kGran, kGran, 0, h, 0));
  CU_OK(grant(va, 2 * kGran));
  int v = 1234, w = 0;
  CUDA_OK(cudaMemcpy(reinterpret_cast<void*>(va + 64), &v, sizeof v, cudaMemcpyHostToDevice));
  CUDA_OK(cudaMemcpy(&w, reinterpret_cast<void*>(va + kGran + 64), sizeof w,
                     cudaMemcpyDeviceToHost));
  EXPECT_EQ(w, 1234);
  CU_OK(unmap_(va, 2 * kGran));
  CU_OK(release_(h));
  CU_OK(free_(va, 2 * kGran));
}

TEST_F(Vmm, SwapThroughHostLocationKeepsTheAddress) {
  // oversub's swap: device allocation -> copy to a host-location allocation -> map the
  // host allocation at the same address -> kernels still read the data there.
  const size_t bytes = kGran;
  const int n = static_cast<int>(bytes / sizeof(int));
  std::vector<int> pattern(n), back(n);
  for (int i = 0; i < n; ++i) pattern[i] = n - i;

  CUdeviceptr va = 0;
  CU_OK(reserve_(&va, bytes, 0, 0, 0));
  CUmemAllocationProp dp = prop(CU_MEM_LOCATION_TYPE_DEVICE);
  CUmemAllocationProp hp = prop(CU_MEM_LOCATION_TYPE_HOST);
  CUmemGenericAllocationHandle dev = 0, host = 0;
  CU_OK(create_(&dev, bytes, &dp, 0));
  CU_OK(create_(&host, bytes, &hp, 0));
  CU_OK(map_(va, bytes, 0, dev, 0));
  CU_OK(grant(va, bytes));
  int* buf = reinterpret_cast<int*>(va);
  CUDA_OK(cudaMemcpy(buf, pattern.data(), bytes, cudaMemcpyHostToDevice));

  // Stage the device bytes through a second range where the host allocation is mapped.
  CUdeviceptr stage = 0;
  CU_OK(reserve_(&stage, bytes, 0, 0, 0));
  CU_OK(map_(stage, bytes, 0, host, 0));
  CU_OK(grant(stage, bytes));
  CUDA_OK(cudaMemcpy(reinterpret_cast<void*>(stage), buf, bytes, cudaMemcpyDeviceToDevice));
  CU_OK(unmap_(stage, bytes));

  // Swap out: the buffer's address now maps host memory; the device memory goes.
  CU_OK(unmap_(va, bytes));
  CU_OK(release_(dev));
  CU_OK(map_(va, bytes, 0, host, 0));
  CU_OK(grant(va, bytes));

  int* out = nullptr;
  CUDA_OK(cudaMalloc(&out, bytes));
  CUDA_OK(scale(buf, out, 3, n));
  CUDA_OK(cudaMemcpy(back.data(), out, bytes, cudaMemcpyDeviceToHost));
  for (int i = 0; i < n; i += 4097) ASSERT_EQ(back[i], pattern[i] * 3) << "element " << i;
  EXPECT_EQ(back[n - 1], pattern[n - 1] * 3);

  // And kernels write through the host mapping.
  CUDA_OK(scale(out, buf, 1, n));
  CUDA_OK(cudaMemcpy(back.data(), buf, bytes, cudaMemcpyDeviceToHost));
  EXPECT_EQ(back[5], pattern[5] * 3);

  CUDA_OK(cudaFree(out));
  CU_OK(unmap_(va, bytes));
  CU_OK(release_(host));
  CU_OK(free_(va, bytes));
  CU_OK(free_(stage, bytes));
}

TEST_F(Vmm, HostLocationMappingReadableByKernels) {
  const size_t bytes = kGran;
  const int n = 4096;
  CUdeviceptr va = 0;
  CU_OK(reserve_(&va, bytes, 0, 0, 0));
  CUmemAllocationProp hp = prop(CU_MEM_LOCATION_TYPE_HOST);
  CUmemGenericAllocationHandle h = 0;
  CU_OK(create_(&h, bytes, &hp, 0));
  CU_OK(map_(va, bytes, 0, h, 0));
  CU_OK(grant(va, bytes));
  std::vector<int> in(n);
  for (int i = 0; i < n; ++i) in[i] = i - 100;
  int* x = reinterpret_cast<int*>(va);
  CUDA_OK(cudaMemcpy(x, in.data(), n * sizeof(int), cudaMemcpyHostToDevice));
  int* y = nullptr;
  CUDA_OK(cudaMalloc(&y, n * sizeof(int)));
  CUDA_OK(scale(x, y, -2, n));
  std::vector<int> out(n);
  CUDA_OK(cudaMemcpy(out.data(), y, n * sizeof(int), cudaMemcpyDeviceToHost));
  for (int i = 0; i < n; ++i) ASSERT_EQ(out[i], in[i] * -2) << "element " << i;
  CUDA_OK(cudaFree(y));
  CU_OK(unmap_(va, bytes));
  CU_OK(release_(h));
  CU_OK(free_(va, bytes));
}

TEST_F(Vmm, ReleasedWhileMappedStaysUntilUnmapped) {
  // CUDA: cuMemRelease on a mapped handle frees the memory only when the last
  // mapping goes.
  CUdeviceptr va = 0;
  CU_OK(reserve_(&va, kGran, 0, 0, 0));
  CUmemAllocationProp p = prop(CU_MEM_LOCATION_TYPE_DEVICE);
  CUmemGenericAllocationHandle h = 0;
  CU_OK(create_(&h, kGran, &p, 0));
  CU_OK(map_(va, kGran, 0, h, 0));
  CU_OK(grant(va, kGran));
  CU_OK(release_(h));
  int v = 99, w = 0;
  CUDA_OK(cudaMemcpy(reinterpret_cast<void*>(va), &v, sizeof v, cudaMemcpyHostToDevice));
  CUDA_OK(cudaMemcpy(&w, reinterpret_cast<void*>(va), sizeof w, cudaMemcpyDeviceToHost));
  EXPECT_EQ(w, 99);
  CU_OK(unmap_(va, kGran));
  CU_OK(free_(va, kGran));
}

}  // namespace
