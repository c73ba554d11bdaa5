// The CUDA 12+ library path as simgpu presents it: cuLibraryLoadData of a simgpu
// library image, cuLibraryGetKernel / GetKernelCount / EnumerateKernels,
// cuKernelGetName / GetParamInfo / GetAttribute / GetFunction / GetLibrary, a CUkernel
// launched through cuLaunchKernel and cuLaunchKernelEx cast to CUfunction, and
// refused by the cuFunc* queries; cuLibraryUnload; the runtime's own kernels loaded
// the same way (cudaKernel_t is a CUkernel); parameter blocks up to 32764 bytes
// launched and scanned whole, larger ones refused with CUDA_ERROR_INVALID_VALUE; and
// SIMGPU_FAIL=library_load / kernel_query (in a child process: SIMGPU_FAIL is read
// at cuInit).
//
// main() sets SIMGPU_LAUNCH_LOG to a file of its own before any CUDA call, so a test
// can read which allocations simgpu's footprint of a launch reached.
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "simgpu/kernel.h"
#include "simgpu_test.h"

extern "C" cudaError_t __cudaGetKernel(cudaKernel_t*, const void*);
extern "C" cudaError_t __cudaLaunchKernel(cudaKernel_t, dim3, dim3, void**, size_t, cudaStream_t);

namespace {

std::string g_self;      // this program, for the child scenarios
std::string g_log_path;  // SIMGPU_LAUNCH_LOG

// ---- Kernels of a hand-made library image ------------------------------------------

void scale_run(void** args, dim3 grid, dim3 block) {
  float* y = *static_cast<float**>(args[0]);
  const float a = *static_cast<float*>(args[1]);
  const int n = *static_cast<int*>(args[2]);
  const int threads = static_cast<int>(grid.x * block.x);
  for (int i = 0; i < n && i < threads; ++i) y[i] *= a;
}
const simgpuParamInfo kScaleParams[] = {
    {0, 8, SIMGPU_PARAM_POINTER}, {8, 4, 0}, {12, 4, 0}};

void fill_run(void** args, dim3, dim3) {
  int* out = *static_cast<int**>(args[0]);
  out[0] = *static_cast<int*>(args[1]);
}
const simgpuParamInfo kFillParams[] = {{0, 8, SIMGPU_PARAM_POINTER}, {8, 4, 0}};

int scale_host, fill_host;  // identities only
const simgpuKernelImage kKernels[] = {
    {&scale_host, "lib_scale", kScaleParams, 3, &scale_run, nullptr},
    {&fill_host, "lib_fill", kFillParams, 2, &fill_run, nullptr},
};
const simgpuLibraryImage kImage{SIMGPU_LIBRARY_MAGIC, 2, kKernels};

CUresult load(CUlibrary* lib, const void* image = &kImage) {
  return SIMGPU_DRV(cuLibraryLoadData)(lib, image, nullptr, nullptr, 0, nullptr, nullptr, 0);
}

// ---- Parameter blocks past 4 KiB ---------------------------------------------------

// multi_tensor_apply's shape: many device pointers by value, then the output.
constexpr int kLists = 1024;  // 8 KiB of pointers
struct tensor_lists {
  const float* ptrs[kLists];
};
__global__ void tensor_sum(tensor_lists l, float* out, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  float s = 0;
  for (int k = 0; k < kLists; ++k) s += l.ptrs[k][i];
  out[i] = s;
}
SIMGPU_KERNEL(tensor_sum);

// 32768 bytes of parameters: one past CUDA's limit of 32764.
struct too_big {
  char bytes[32760];
};
__global__ void too_big_kernel(too_big, float* out) { out[0] = 1; }
SIMGPU_KERNEL(too_big_kernel);

// 32760 + 4 = 32764 bytes: the largest block CUDA launches.
struct largest {
  char bytes[32760];
};
__global__ void largest_kernel(largest b, int v) { (void)b, (void)v; }
SIMGPU_KERNEL(largest_kernel);

std::vector<std::string> log_lines() {
  std::ifstream in(g_log_path);
  std::vector<std::string> lines;
  for (std::string l; std::getline(in, l);) lines.push_back(l);
  return lines;
}

std::set<uintptr_t> bases_of(const std::string& line) {
  std::istringstream in(line);
  std::string corr, name, word;
  in >> corr >> name;
  std::set<uintptr_t> out;
  while (in >> word) {
    if (word.rfind("ns=", 0) == 0) continue;
    out.insert(std::stoull(word, nullptr, 16));
  }
  return out;
}

TEST(Library, LoadQueryLaunchUnload) {
  CU_OK(SIMGPU_DRV(cuInit)(0));
  CUlibrary lib = nullptr;
  CU_OK(load(&lib));
  unsigned count = 0;
  CU_OK(SIMGPU_DRV(cuLibraryGetKernelCount)(&count, lib));
  EXPECT_EQ(count, 2u);
  CUkernel all[2] = {};
  CU_OK(SIMGPU_DRV(cuLibraryEnumerateKernels)(all, 2, lib));
  CUkernel scale = nullptr;
  CU_OK(SIMGPU_DRV(cuLibraryGetKernel)(&scale, lib, "lib_scale"));
  EXPECT_EQ(scale, all[0]);
  CUkernel missing = nullptr;
  EXPECT_EQ(SIMGPU_DRV(cuLibraryGetKernel)(&missing, lib, "no_such"), CUDA_ERROR_NOT_FOUND);
  const char* name = nullptr;
  CU_OK(SIMGPU_DRV(cuKernelGetName)(&name, all[1]));
  EXPECT_STREQ(name, "lib_fill");
  size_t off = 0, size = 0;
  CU_OK(SIMGPU_DRV(cuKernelGetParamInfo)(scale, 2, &off, &size));
  EXPECT_EQ(off, 12u);
  EXPECT_EQ(size, 4u);
  EXPECT_EQ(SIMGPU_DRV(cuKernelGetParamInfo)(scale, 3, &off, &size), CUDA_ERROR_INVALID_VALUE);
  int threads = 0;
  CU_OK(SIMGPU_DRV(cuKernelGetAttribute)(&threads, CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK, scale,
                                         0));
  EXPECT_GT(threads, 0);
  CUlibrary owner = nullptr;
  CU_OK(SIMGPU_DRV(cuKernelGetLibrary)(&owner, scale));
  EXPECT_EQ(owner, lib);
  // A CUkernel is not a CUfunction to the cuFunc* queries (Note [Kernels and
  // functions] in tests/simgpu/driver/library.cc); its context's function is.
  CUfunction as_function = reinterpret_cast<CUfunction>(scale);
  EXPECT_EQ(SIMGPU_DRV(cuFuncGetParamInfo)(as_function, 0, &off, &size),
            CUDA_ERROR_INVALID_HANDLE);
  EXPECT_EQ(SIMGPU_DRV(cuFuncGetName)(&name, as_function), CUDA_ERROR_INVALID_HANDLE);
  CUDA_OK(cudaFree(nullptr));  // a current context for cuKernelGetFunction
  CUfunction fn = nullptr;
  CU_OK(SIMGPU_DRV(cuKernelGetFunction)(&fn, scale));
  EXPECT_NE(reinterpret_cast<void*>(fn), reinterpret_cast<void*>(scale));
  CU_OK(SIMGPU_DRV(cuFuncGetParamInfo)(fn, 1, &off, &size));
  EXPECT_EQ(off, 8u);

  // Launch the CUkernel cast to CUfunction (cuLaunchKernel and Ex), and the function.
  constexpr int n = 256;
  float* y = nullptr;
  CUDA_OK(cudaMalloc(&y, n * sizeof(float)));
  std::vector<float> host(n, 1.0f);
  CUDA_OK(cudaMemcpy(y, host.data(), n * sizeof(float), cudaMemcpyHostToDevice));
  float a = 2.0f;
  int count_n = n;
  void* args[] = {&y, &a, &count_n};
  CU_OK(SIMGPU_DRV(cuLaunchKernel)(as_function, 1, 1, 1, n, 1, 1, 0, nullptr, args, nullptr));
  CUlaunchConfig config{};
  config.gridDimX = config.gridDimY = config.gridDimZ = 1;
  config.blockDimX = n;
  config.blockDimY = config.blockDimZ = 1;
  CU_OK(SIMGPU_DRV(cuLaunchKernelEx)(&config, as_function, args, nullptr));
  CU_OK(SIMGPU_DRV(cuLaunchKernel)(fn, 1, 1, 1, n, 1, 1, 0, nullptr, args, nullptr));
  CUDA_OK(cudaMemcpy(host.data(), y, n * sizeof(float), cudaMemcpyDeviceToHost));
  EXPECT_EQ(host[0], 8.0f);
  EXPECT_EQ(host[n - 1], 8.0f);

  // Unloaded: its kernels are gone.
  CU_OK(SIMGPU_DRV(cuLibraryUnload)(lib));
  EXPECT_EQ(SIMGPU_DRV(cuLaunchKernel)(as_function, 1, 1, 1, n, 1, 1, 0, nullptr, args, nullptr),
            CUDA_ERROR_INVALID_HANDLE);
  EXPECT_EQ(SIMGPU_DRV(cuKernelGetName)(&name, scale), CUDA_ERROR_INVALID_HANDLE);
  EXPECT_EQ(SIMGPU_DRV(cuLibraryUnload)(lib), CUDA_ERROR_INVALID_HANDLE);
  CUDA_OK(cudaFree(y));
}

TEST(Library, NotAnImage) {
  CU_OK(SIMGPU_DRV(cuInit)(0));
  const unsigned char cubin[16] = {0x7f, 'E', 'L', 'F'};
  CUlibrary lib = nullptr;
  EXPECT_EQ(load(&lib, cubin), CUDA_ERROR_INVALID_IMAGE);
  EXPECT_EQ(load(nullptr), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(SIMGPU_DRV(cuLibraryLoadFromFile)(&lib, "/nonexistent/lib.so", nullptr, nullptr, 0,
                                              nullptr, nullptr, 0),
            CUDA_ERROR_FILE_NOT_FOUND);
}

TEST(Library, FoundThroughGetProcAddress) {
  auto gpa = SIMGPU_DRV(cuGetProcAddress);
  for (const char* name : {"cuLibraryLoadData", "cuLibraryLoadFromFile", "cuLibraryUnload",
                           "cuLibraryGetKernel", "cuLibraryGetKernelCount",
                           "cuLibraryEnumerateKernels", "cuKernelGetFunction", "cuKernelGetName",
                           "cuKernelGetParamInfo", "cuKernelGetAttribute", "cuKernelGetLibrary"}) {
    void* fn = nullptr;
    CUdriverProcAddressQueryResult status{};
    EXPECT_EQ(gpa(name, &fn, 13000, CU_GET_PROC_ADDRESS_DEFAULT, &status), CUDA_SUCCESS) << name;
    EXPECT_EQ(fn, dlsym(dlopen("libcuda.so.1", RTLD_NOW), name)) << name;
  }
  void* fn = nullptr;
  CUdriverProcAddressQueryResult status{};
  EXPECT_EQ(gpa("cuKernelGetParamInfo", &fn, 12030, CU_GET_PROC_ADDRESS_DEFAULT, &status),
            CUDA_SUCCESS);
  EXPECT_EQ(status, CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT);
}

// The runtime loads its kernels as libraries: __cudaGetKernel's cudaKernel_t is a
// CUkernel, which the cuKernel* queries accept and the cuFunc* ones refuse.
TEST(Library, RuntimeKernelsAreLibraryKernels) {
  cudaKernel_t k = nullptr;
  CUDA_OK(__cudaGetKernel(&k, reinterpret_cast<const void*>(&tensor_sum)));
  CUkernel as_kernel = reinterpret_cast<CUkernel>(k);
  const char* name = nullptr;
  CU_OK(SIMGPU_DRV(cuKernelGetName)(&name, as_kernel));
  EXPECT_NE(std::strstr(name, "tensor_sum"), nullptr) << name;
  size_t off = 0, size = 0;
  EXPECT_EQ(SIMGPU_DRV(cuFuncGetParamInfo)(reinterpret_cast<CUfunction>(k), 0, &off, &size),
            CUDA_ERROR_INVALID_HANDLE);
  CUDA_OK(cudaFuncGetParamInfo(reinterpret_cast<const void*>(k), 1, &off, &size));
  EXPECT_EQ(off, sizeof(tensor_lists));
  EXPECT_EQ(size, 8u);
  cudaFunction_t fn = nullptr;
  CUDA_OK(cudaGetFuncBySymbol(&fn, reinterpret_cast<const void*>(&tensor_sum)));
  CU_OK(SIMGPU_DRV(cuFuncGetParamInfo)(reinterpret_cast<CUfunction>(fn), 1, &off, &size));
  EXPECT_EQ(off, sizeof(tensor_lists));
}

// See Note [32 KB parameter blocks] in profiler/launch_scan.h: an 8 KiB block of tensor
// pointers is copied and scanned whole: the allocations behind pointers past 4 KiB
// are in the launch's footprint (the launch log), and the kernel reads them.
TEST(Library, ParameterBlockPast4KiBIsScannedWhole) {
  constexpr int n = 32;
  constexpr int kDistinct = 8;
  float* first = nullptr;  // every pointer in the first 4 KiB
  float* late[kDistinct] = {};
  float* out = nullptr;
  std::vector<float> ones(n, 1.0f);
  CUDA_OK(cudaMalloc(&first, n * sizeof(float)));
  CUDA_OK(cudaMemcpy(first, ones.data(), n * sizeof(float), cudaMemcpyHostToDevice));
  for (float*& p : late) {
    CUDA_OK(cudaMalloc(&p, n * sizeof(float)));
    CUDA_OK(cudaMemcpy(p, ones.data(), n * sizeof(float), cudaMemcpyHostToDevice));
  }
  CUDA_OK(cudaMalloc(&out, n * sizeof(float)));
  tensor_lists lists{};
  for (int k = 0; k < kLists; ++k)
    lists.ptrs[k] = k * sizeof(float*) < 4096 ? first : late[k % kDistinct];
  int count = n;
  void* args[] = {&lists, &out, &count};
  cudaKernel_t k = nullptr;
  CUDA_OK(__cudaGetKernel(&k, reinterpret_cast<const void*>(&tensor_sum)));
  const size_t before = log_lines().size();
  CUDA_OK(__cudaLaunchKernel(k, dim3(1), dim3(n), args, 0, nullptr));
  CUDA_OK(cudaDeviceSynchronize());
  std::vector<float> host(n);
  CUDA_OK(cudaMemcpy(host.data(), out, n * sizeof(float), cudaMemcpyDeviceToHost));
  EXPECT_EQ(host[0], static_cast<float>(kLists));
  const std::vector<std::string> lines = log_lines();
  ASSERT_EQ(lines.size(), before + 1);
  std::set<uintptr_t> want{reinterpret_cast<uintptr_t>(first), reinterpret_cast<uintptr_t>(out)};
  for (float* p : late) want.insert(reinterpret_cast<uintptr_t>(p));
  EXPECT_EQ(bases_of(lines.back()), want) << lines.back();
  for (float* p : late) CUDA_OK(cudaFree(p));
  CUDA_OK(cudaFree(first));
  CUDA_OK(cudaFree(out));
}

TEST(Library, ParameterBlocksPast32764BytesAreRefused) {
  float* out = nullptr;
  CUDA_OK(cudaMalloc(&out, sizeof(float)));
  static too_big big{};
  void* args[] = {&big, &out};
  EXPECT_EQ(cudaLaunchKernel(reinterpret_cast<const void*>(&too_big_kernel), dim3(1), dim3(1),
                             args, 0, nullptr),
            cudaErrorInvalidValue);
  EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidValue);  // not sticky
  static largest most{};
  int v = 1;
  void* largest_args[] = {&most, &v};
  CUDA_OK(cudaLaunchKernel(reinterpret_cast<const void*>(&largest_kernel), dim3(1), dim3(1),
                           largest_args, 0, nullptr));
  CUDA_OK(cudaDeviceSynchronize());
  CUDA_OK(cudaFree(out));
}

// The child of Faults: SIMGPU_FAIL=library_load:1,kernel_query:1. Prints the codes.
int fault_child() {
  CUlibrary lib = nullptr;
  SIMGPU_DRV(cuInit)(0);
  const int load1 = load(&lib);
  const int load2 = load(&lib);
  CUkernel k = nullptr;
  const int get1 = SIMGPU_DRV(cuLibraryGetKernel)(&k, lib, "lib_fill");
  const int get2 = SIMGPU_DRV(cuLibraryGetKernel)(&k, lib, "lib_fill");
  // The runtime's own load of a kernel (library_load 3) and its query succeed.
  float* out = nullptr;
  const int alloc = cudaMalloc(&out, 4 * sizeof(float));
  int value = 7;
  void* args[] = {&out, &value};
  const int launch = SIMGPU_DRV(cuLaunchKernel)(reinterpret_cast<CUfunction>(k), 1, 1, 1, 1, 1, 1,
                                                0, nullptr, args, nullptr);
  int got = 0;
  const int copy = cudaMemcpy(&got, out, sizeof got, cudaMemcpyDeviceToHost);
  std::printf("load %d %d get %d %d alloc %d launch %d copy %d value %d\n", load1, load2, get1,
              get2, alloc, launch, copy, got);
  return 0;
}

int runtime_fault_child() {
  // SIMGPU_FAIL=library_load:1: the runtime's first load fails and is answered to the
  // launch that needed it, mapped; the next use loads it.
  float* out = nullptr;
  cudaMalloc(&out, 64 * sizeof(float));
  int n = 4;
  static tensor_lists lists{};
  for (auto& p : lists.ptrs) p = out;
  void* args[] = {&lists, &out, &n};
  const int first = cudaLaunchKernel(reinterpret_cast<const void*>(&tensor_sum), dim3(1), dim3(4),
                                     args, 0, nullptr);
  const int last_error = cudaGetLastError();
  const int second = cudaLaunchKernel(reinterpret_cast<const void*>(&tensor_sum), dim3(1),
                                      dim3(4), args, 0, nullptr);
  std::printf("first %d last_error %d second %d sync %d\n", first, last_error, second,
              cudaDeviceSynchronize());
  return 0;
}

TEST(Library, Faults) {
  simgpu_test::process_result r = simgpu_test::run_process(
      {g_self, "--fault-child"}, {{"SIMGPU_FAIL", "library_load:1,kernel_query:1"}});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "load 2 0 get 500 0 alloc 0 launch 0 copy 0 value 7\n") << r.err;
  r = simgpu_test::run_process({g_self, "--runtime-fault-child"},
                               {{"SIMGPU_FAIL", "library_load:1"}});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "first 2 last_error 2 second 0 sync 0\n") << r.err;
}

}  // namespace

int main(int argc, char** argv) {
  g_self = argv[0];
  if (argc > 1 && std::strcmp(argv[1], "--fault-child") == 0) return fault_child();
  if (argc > 1 && std::strcmp(argv[1], "--runtime-fault-child") == 0)
    return runtime_fault_child();
  char path[] = "/tmp/simgpu-library-log-XXXXXX";
  const int fd = mkstemp(path);
  if (fd >= 0) close(fd);
  g_log_path = path;
  setenv("SIMGPU_LAUNCH_LOG", path, 1);
  ::testing::InitGoogleTest(&argc, argv);
  const int rc = RUN_ALL_TESTS();
  unlink(path);
  return rc;
}
