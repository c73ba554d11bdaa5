// SIMGPU_FAIL=kind:n[:code] makes the n-th call of one kind fail (n+ : the n-th and
// every later one) with CUDA's code for it: OUT_OF_MEMORY by default for alloc,
// host_alloc and map, INVALID_VALUE for copy, access and event, or the code given.
// meson runs this program once per setting, each time with a --gtest_filter naming
// the one test written for that setting
// (see meson.build); a test run under another setting would not mean anything.
// Each checks the calls before and after the chosen one succeed, that the failure
// is not sticky, and that a failed allocation takes no capacity.
#include <cstdlib>
#include <string>
#include <vector>

#include "simgpu/kernel.h"
#include "simgpu_test.h"

namespace {

__global__ void inject_fill_kernel(int* p, int v, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) p[i] = v;
}
SIMGPU_KERNEL(inject_fill_kernel);

std::string setting() {
  const char* s = std::getenv("SIMGPU_FAIL");
  return s != nullptr ? s : "";
}

size_t free_bytes() {
  size_t f = 0, t = 0;
  EXPECT_EQ(cudaMemGetInfo(&f, &t), cudaSuccess);
  return f;
}

class FaultInjection : public ::testing::Test {
 protected:
  void expect_setting(const char* want) {
    ASSERT_EQ(setting(), want) << "run this test through meson, which sets SIMGPU_FAIL";
  }
  void SetUp() override {
    // Context creation must not count as any of the injected kinds.
    ASSERT_EQ(cudaFree(nullptr), cudaSuccess);
  }
};

TEST_F(FaultInjection, SecondAllocationFailsAlone) {  // SIMGPU_FAIL=alloc:2
  expect_setting("alloc:2");
  const size_t f0 = free_bytes();
  void *a = nullptr, *b = nullptr, *c = nullptr;
  CUDA_OK(cudaMalloc(&a, 1 << 20));
  EXPECT_EQ(cudaMalloc(&b, 1 << 20), cudaErrorMemoryAllocation);
  EXPECT_EQ(b, nullptr);
  EXPECT_EQ(free_bytes(), f0 - (1 << 20)) << "the failed allocation took no capacity";
  EXPECT_EQ(cudaGetLastError(), cudaErrorMemoryAllocation);
  EXPECT_EQ(cudaGetLastError(), cudaSuccess) << "not sticky";
  CUDA_OK(cudaMalloc(&c, 1 << 20));
  CUDA_OK(cudaFree(a));
  CUDA_OK(cudaFree(c));
  void* d = nullptr;
  CUDA_OK(cudaMalloc(&d, 1 << 20));
  CUDA_OK(cudaFree(d));
}

TEST_F(FaultInjection, SecondAndLaterAllocationsFail) {  // SIMGPU_FAIL=alloc:2+
  expect_setting("alloc:2+");
  void* a = nullptr;
  CUDA_OK(cudaMalloc(&a, 4096));
  for (int i = 0; i < 3; ++i) {
    void* b = nullptr;
    EXPECT_EQ(cudaMalloc(&b, 4096), cudaErrorMemoryAllocation) << "attempt " << i;
  }
  // The driver's allocations are the same kind and fail with the driver's code.
  auto alloc = simgpu_test::driver<decltype(&cuMemAlloc_v2)>("cuMemAlloc_v2");
  CUdeviceptr d = 0;
  EXPECT_EQ(alloc(&d, 4096), CUDA_ERROR_OUT_OF_MEMORY);
  void* m = nullptr;
  EXPECT_EQ(cudaMallocManaged(&m, 4096), cudaErrorMemoryAllocation);
  cudaGetLastError();
  // Physical VMM memory on the device is an allocation; on the host it is not.
  auto create = SIMGPU_DRV(cuMemCreate);
  auto release = SIMGPU_DRV(cuMemRelease);
  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  CUmemGenericAllocationHandle h = 0;
  EXPECT_EQ(create(&h, 2ull << 20, &prop, 0), CUDA_ERROR_OUT_OF_MEMORY);
  prop.location.type = CU_MEM_LOCATION_TYPE_HOST;
  CU_OK(create(&h, 2ull << 20, &prop, 0));
  CU_OK(release(h));
  void* pinned = nullptr;
  CUDA_OK(cudaMallocHost(&pinned, 4096));  // another kind
  CUDA_OK(cudaFreeHost(pinned));
  CUDA_OK(cudaFree(a));
}

TEST_F(FaultInjection, AllocationFailsWithTheChosenCode) {  // SIMGPU_FAIL=alloc:1:999
  expect_setting("alloc:1:999");
  void* a = nullptr;
  // 999 is CUDA_ERROR_UNKNOWN, which the runtime reports as cudaErrorUnknown.
  EXPECT_EQ(cudaMalloc(&a, 4096), cudaErrorUnknown);
  cudaGetLastError();
  CUDA_OK(cudaMalloc(&a, 4096));
  CUDA_OK(cudaFree(a));
}

TEST_F(FaultInjection, FirstHostAllocationFails) {  // SIMGPU_FAIL=host_alloc:1
  expect_setting("host_alloc:1");
  void* h = nullptr;
  EXPECT_EQ(cudaMallocHost(&h, 1 << 20), cudaErrorMemoryAllocation);
  cudaGetLastError();
  CUDA_OK(cudaHostAlloc(&h, 1 << 20, cudaHostAllocDefault));
  CUDA_OK(cudaFreeHost(h));
  void* d = nullptr;
  CUDA_OK(cudaMalloc(&d, 1 << 20));  // device allocations are another kind
  CUDA_OK(cudaFree(d));
}

TEST_F(FaultInjection, SecondCopyFailsWithTheChosenCode) {  // SIMGPU_FAIL=copy:2:1
  expect_setting("copy:2:1");
  std::vector<int> host(256, 5), back(256, 0);
  int* d = nullptr;
  CUDA_OK(cudaMalloc(&d, host.size() * sizeof(int)));
  CUDA_OK(cudaMemcpy(d, host.data(), host.size() * sizeof(int), cudaMemcpyHostToDevice));
  EXPECT_EQ(cudaMemcpy(back.data(), d, back.size() * sizeof(int), cudaMemcpyDeviceToHost),
            cudaErrorInvalidValue);  // code 1: CUDA_ERROR_INVALID_VALUE
  EXPECT_EQ(back[0], 0) << "a failed copy moves nothing";
  cudaGetLastError();
  CUDA_OK(cudaMemcpy(back.data(), d, back.size() * sizeof(int), cudaMemcpyDeviceToHost));
  EXPECT_EQ(back, host);
  CUDA_OK(cudaFree(d));
}

TEST_F(FaultInjection, FirstMappingFails) {  // SIMGPU_FAIL=map:1
  expect_setting("map:1");
  auto reserve = SIMGPU_DRV(cuMemAddressReserve);
  auto create = SIMGPU_DRV(cuMemCreate);
  auto map = SIMGPU_DRV(cuMemMap);
  auto unmap = SIMGPU_DRV(cuMemUnmap);
  auto release = SIMGPU_DRV(cuMemRelease);
  auto address_free = SIMGPU_DRV(cuMemAddressFree);
  const size_t gran = 2ull << 20;
  CUdeviceptr va = 0;
  CU_OK(reserve(&va, gran, 0, 0, 0));
  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = 0;
  CUmemGenericAllocationHandle h = 0;
  CU_OK(create(&h, gran, &prop, 0));
  EXPECT_EQ(map(va, gran, 0, h, 0), CUDA_ERROR_OUT_OF_MEMORY);
  CU_OK(map(va, gran, 0, h, 0));
  CU_OK(unmap(va, gran));
  CU_OK(release(h));
  CU_OK(address_free(va, gran));
}

TEST_F(FaultInjection, FirstAccessChangeFails) {  // SIMGPU_FAIL=access:1
  expect_setting("access:1");
  auto reserve = SIMGPU_DRV(cuMemAddressReserve);
  auto create = SIMGPU_DRV(cuMemCreate);
  auto map = SIMGPU_DRV(cuMemMap);
  auto set_access = SIMGPU_DRV(cuMemSetAccess);
  auto unmap = SIMGPU_DRV(cuMemUnmap);
  auto release = SIMGPU_DRV(cuMemRelease);
  auto address_free = SIMGPU_DRV(cuMemAddressFree);
  const size_t gran = 2ull << 20;
  CUdeviceptr va = 0;
  CU_OK(reserve(&va, gran, 0, 0, 0));
  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = 0;
  CUmemGenericAllocationHandle h = 0;
  CU_OK(create(&h, gran, &prop, 0));
  CU_OK(map(va, gran, 0, h, 0));
  CUmemAccessDesc desc{};
  desc.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  desc.location.id = 0;
  desc.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  // The default code, CUDA_ERROR_INVALID_VALUE; the next call is not refused.
  EXPECT_EQ(set_access(va, gran, &desc, 1), CUDA_ERROR_INVALID_VALUE);
  CU_OK(set_access(va, gran, &desc, 1));
  std::vector<int> in(64, 7), back(64, 0);
  int* d = reinterpret_cast<int*>(va);
  CUDA_OK(cudaMemcpy(d, in.data(), in.size() * sizeof(int), cudaMemcpyHostToDevice));
  CUDA_OK(cudaMemcpy(back.data(), d, back.size() * sizeof(int), cudaMemcpyDeviceToHost));
  EXPECT_EQ(back[63], 7) << "the access granted by the retry holds";
  CU_OK(unmap(va, gran));
  CU_OK(release(h));
  CU_OK(address_free(va, gran));
}

TEST_F(FaultInjection, SecondEventRecordFailsAlone) {  // SIMGPU_FAIL=event:2
  expect_setting("event:2");
  cudaStream_t s = nullptr;
  cudaEvent_t e = nullptr;
  CUDA_OK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  CUDA_OK(cudaEventCreate(&e));
  CUDA_OK(cudaEventRecord(e, s));
  // The default code, CUDA_ERROR_INVALID_VALUE; the event keeps its first record.
  EXPECT_EQ(cudaEventRecord(e, s), cudaErrorInvalidValue);
  EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidValue);
  EXPECT_EQ(cudaGetLastError(), cudaSuccess) << "not sticky";
  CUDA_OK(cudaEventSynchronize(e));
  CUDA_OK(cudaEventRecord(e, s));
  CUDA_OK(cudaEventSynchronize(e));
  EXPECT_EQ(cudaEventQuery(e), cudaSuccess);
  CUDA_OK(cudaEventDestroy(e));
  CUDA_OK(cudaStreamDestroy(s));
}

TEST_F(FaultInjection, SecondPrefetchFailsAlone) {  // SIMGPU_FAIL=prefetch:2
  expect_setting("prefetch:2");
  const size_t bytes = size_t{1} << 20;
  char* m = nullptr;
  CUDA_OK(cudaMallocManaged(&m, bytes));
  CUDA_OK(cudaMemset(m, 0x5a, bytes));
  cudaStream_t s = nullptr;
  CUDA_OK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  cudaMemLocation device{};
  device.type = cudaMemLocationTypeDevice;
  device.id = 0;
  cudaMemLocation host{};
  host.type = cudaMemLocationTypeHost;
  CUDA_OK(cudaMemPrefetchAsync(m, bytes, device, 0, s));
  // The default code; nothing migrates, and the bytes stay where they were.
  EXPECT_EQ(cudaMemPrefetchAsync(m, bytes, host, 0, s), cudaErrorInvalidValue);
  EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidValue);
  EXPECT_EQ(cudaGetLastError(), cudaSuccess) << "not sticky";
  CUDA_OK(cudaMemPrefetchAsync(m, bytes, host, 0, s));
  CUDA_OK(cudaStreamSynchronize(s));
  EXPECT_EQ(m[0], 0x5a);
  EXPECT_EQ(m[bytes - 1], 0x5a);
  CUDA_OK(cudaStreamDestroy(s));
  CUDA_OK(cudaFree(m));
}

TEST_F(FaultInjection, FirstLaunchFailsWithTheChosenCode) {  // SIMGPU_FAIL=launch:1:701
  expect_setting("launch:1:701");
  const int n = 64;
  int* d = nullptr;
  CUDA_OK(cudaMalloc(&d, n * sizeof(int)));
  CUDA_OK(cudaMemset(d, 0, n * sizeof(int)));
  int v = 9, nn = n;
  void* args[] = {&d, &v, &nn};
  // 701 is CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES / cudaErrorLaunchOutOfResources: the
  // launch is refused, nothing runs, and the error is not sticky.
  EXPECT_EQ(cudaLaunchKernel(reinterpret_cast<const void*>(&inject_fill_kernel), dim3(1),
                             dim3(n), args, 0, nullptr),
            cudaErrorLaunchOutOfResources);
  EXPECT_EQ(cudaGetLastError(), cudaErrorLaunchOutOfResources);
  CUDA_OK(cudaDeviceSynchronize());
  std::vector<int> back(n, -1);
  CUDA_OK(cudaMemcpy(back.data(), d, n * sizeof(int), cudaMemcpyDeviceToHost));
  EXPECT_EQ(back[0], 0) << "the refused kernel did not run";
  CUDA_OK(cudaLaunchKernel(reinterpret_cast<const void*>(&inject_fill_kernel), dim3(1), dim3(n),
                           args, 0, nullptr));
  CUDA_OK(cudaMemcpy(back.data(), d, n * sizeof(int), cudaMemcpyDeviceToHost));
  EXPECT_EQ(back[n - 1], 9);
  CUDA_OK(cudaFree(d));
}

// Captures one fill of d with v on stream s into a graph.
cudaGraph_t capture_fill(cudaStream_t s, int* d, int v, int n) {
  cudaGraph_t g = nullptr;
  void* args[] = {&d, &v, &n};
  EXPECT_EQ(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal), cudaSuccess);
  EXPECT_EQ(cudaLaunchKernel(reinterpret_cast<const void*>(&inject_fill_kernel), dim3(1),
                             dim3(n), args, 0, s),
            cudaSuccess);
  EXPECT_EQ(cudaStreamEndCapture(s, &g), cudaSuccess);
  return g;
}

TEST_F(FaultInjection, FirstGraphInstantiateFails) {  // SIMGPU_FAIL=graph_instantiate:1
  expect_setting("graph_instantiate:1");
  const int n = 64;
  int* d = nullptr;
  cudaStream_t s = nullptr;
  CUDA_OK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  CUDA_OK(cudaMalloc(&d, n * sizeof(int)));
  CUDA_OK(cudaMemset(d, 0, n * sizeof(int)));
  cudaGraph_t g = capture_fill(s, d, 5, n);
  cudaGraphExec_t exec = nullptr;
  // The default code, CUDA_ERROR_OUT_OF_MEMORY: instantiation allocates.
  EXPECT_EQ(cudaGraphInstantiate(&exec, g, 0), cudaErrorMemoryAllocation);
  EXPECT_EQ(cudaGetLastError(), cudaErrorMemoryAllocation);
  EXPECT_EQ(cudaGetLastError(), cudaSuccess) << "not sticky";
  CUDA_OK(cudaGraphInstantiate(&exec, g, 0));
  CUDA_OK(cudaGraphLaunch(exec, s));
  CUDA_OK(cudaStreamSynchronize(s));
  std::vector<int> back(n, -1);
  CUDA_OK(cudaMemcpy(back.data(), d, n * sizeof(int), cudaMemcpyDeviceToHost));
  EXPECT_EQ(back[n - 1], 5) << "the graph instantiated later runs";
  CUDA_OK(cudaGraphExecDestroy(exec));
  CUDA_OK(cudaGraphDestroy(g));
  CUDA_OK(cudaFree(d));
  CUDA_OK(cudaStreamDestroy(s));
}

TEST_F(FaultInjection, SecondGraphLaunchFailsAlone) {  // SIMGPU_FAIL=graph_launch:2
  expect_setting("graph_launch:2");
  const int n = 64;
  int* d = nullptr;
  cudaStream_t s = nullptr;
  CUDA_OK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  CUDA_OK(cudaMalloc(&d, n * sizeof(int)));
  CUDA_OK(cudaMemset(d, 0, n * sizeof(int)));
  cudaGraph_t g1 = capture_fill(s, d, 1, n);
  cudaGraph_t g2 = capture_fill(s, d, 2, n);
  cudaGraphExec_t e1 = nullptr, e2 = nullptr;
  CUDA_OK(cudaGraphInstantiate(&e1, g1, 0));
  CUDA_OK(cudaGraphInstantiate(&e2, g2, 0));
  std::vector<int> back(n, -1);
  CUDA_OK(cudaGraphLaunch(e1, s));
  CUDA_OK(cudaStreamSynchronize(s));
  // The default code, CUDA_ERROR_OUT_OF_MEMORY (not sticky); nothing of the graph runs.
  EXPECT_EQ(cudaGraphLaunch(e2, s), cudaErrorMemoryAllocation);
  EXPECT_EQ(cudaGetLastError(), cudaErrorMemoryAllocation);
  EXPECT_EQ(cudaGetLastError(), cudaSuccess) << "not sticky";
  CUDA_OK(cudaStreamSynchronize(s));
  CUDA_OK(cudaMemcpy(back.data(), d, n * sizeof(int), cudaMemcpyDeviceToHost));
  EXPECT_EQ(back[0], 1) << "the refused replay wrote nothing";
  CUDA_OK(cudaGraphLaunch(e2, s));
  CUDA_OK(cudaStreamSynchronize(s));
  CUDA_OK(cudaMemcpy(back.data(), d, n * sizeof(int), cudaMemcpyDeviceToHost));
  EXPECT_EQ(back[n - 1], 2) << "the next replay runs";
  CUDA_OK(cudaGraphExecDestroy(e1));
  CUDA_OK(cudaGraphExecDestroy(e2));
  CUDA_OK(cudaGraphDestroy(g1));
  CUDA_OK(cudaGraphDestroy(g2));
  CUDA_OK(cudaFree(d));
  CUDA_OK(cudaStreamDestroy(s));
}

}  // namespace
