// Launches the way a CUDA 12+/13 program and its libraries do, with parameter blocks
// past 4 KiB, for the profiler and swap tests (profile_test.py, case library):
//
//   tensor_sum   nvcc 13's path: __cudaGetKernel, then __cudaLaunchKernel, whose
//                CUPTI callback has no params; the runtime launches the CUkernel of
//                the library it loaded the kernel from;
//   lib_sum      the program's own library: cuLibraryLoadData of a simgpu library
//                image, cuLibraryGetKernel, cuLaunchKernel of the CUkernel cast to
//                CUfunction (all three found with cudaGetDriverEntryPointByVersion);
//   tensor_sum   again through __cudaLaunchKernel, found with dlsym on the runtime's
//                own handle, as a library holding its own view of the runtime would:
//                oversub's runtime hook does not see it, so the profiler has only the
//                CUPTI callbacks (the runtime's without params, the driver's under it).
//
// Both take multi_tensor_apply's shape of argument: 1024 device pointers by value (8
// KiB), the first 4 KiB of them all to one buffer and the rest to eight others, then
// an output pointer past 8 KiB. Each iteration (marked with oversub_iteration_begin()
// when liboversub is there) allocates a temporary output, launches both, checks
// nothing. At the end the outputs are checked: every element the sum of 1024 ones.
//
// Usage: library_launch_probe ITERATIONS BUFFER_BYTES [faults]. With "faults" (run
// with SIMGPU_FAIL=library_load:1,kernel_query:1) the first cuLibraryLoadData and the
// first cuLibraryGetKernel fail and are tried again; their codes are printed. Prints
// "ok" and exits 0 when every other call succeeded and the results are right.
#include <cuda.h>
#include <cuda_runtime.h>
#include <dlfcn.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "simgpu/kernel.h"

extern "C" cudaError_t __cudaGetKernel(cudaKernel_t*, const void*);
extern "C" cudaError_t __cudaLaunchKernel(cudaKernel_t, dim3, dim3, void**, size_t, cudaStream_t);

constexpr int kLists = 1024;
constexpr int kLate = 8;  // buffers behind the pointers past 4 KiB
constexpr int kSummed = 64;  // elements each launch computes

// At namespace scope with external linkage, so the kernel's symbol (and the name
// CUPTI reports) is the mangled one.
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

namespace {

// The program's own library: the same code under another identity, and the name
// lib_sum(tensor_lists, float*, int) would have.
constexpr const char* kLibSumName = "_Z7lib_sum12tensor_listsPfi";
int lib_sum_identity;
constexpr simgpu::detail::param_layout<tensor_lists, float*, int> kLayout{};
const simgpuKernelImage kLibKernels[] = {
    {&lib_sum_identity, kLibSumName, kLayout.info, kLayout.count,
     &simgpu::detail::kernel_traits<&tensor_sum>::run, nullptr},
};
const simgpuLibraryImage kImage{SIMGPU_LIBRARY_MAGIC, 1, kLibKernels};

int g_failures = 0;

void check(int rc, const char* what) {
  if (rc != 0) {
    std::fprintf(stderr, "library_launch_probe: %s failed with %d\n", what, rc);
    ++g_failures;
  }
}

template <typename F>
F driver_fn(const char* name) {
  void* fn = nullptr;
  cudaDriverEntryPointQueryResult status{};
  if (cudaGetDriverEntryPointByVersion(name, &fn, 13000, cudaEnableDefault, &status) !=
          cudaSuccess ||
      fn == nullptr) {
    std::fprintf(stderr, "library_launch_probe: no %s\n", name);
    std::exit(1);
  }
  return reinterpret_cast<F>(fn);
}

float* filled(size_t bytes) {
  float* p = nullptr;
  check(cudaMalloc(&p, bytes), "cudaMalloc");
  std::vector<float> ones(bytes / sizeof(float), 1.0f);
  check(cudaMemcpy(p, ones.data(), bytes, cudaMemcpyHostToDevice), "upload");
  return p;
}

tensor_lists lists_of(const float* first, float* const* late) {
  tensor_lists l{};
  for (int k = 0; k < kLists; ++k)
    l.ptrs[k] = k * sizeof(float*) < 4096 ? first : late[k % kLate];
  return l;
}

}  // namespace

int main(int argc, char** argv) {
  const int iterations = argc > 1 ? std::atoi(argv[1]) : 4;
  const size_t bytes = argc > 2 ? std::strtoull(argv[2], nullptr, 10) : 4096;
  const bool faults = argc > 3 && std::strcmp(argv[3], "faults") == 0;
  auto begin = reinterpret_cast<void (*)()>(dlsym(RTLD_DEFAULT, "oversub_iteration_begin"));
  check(cudaFree(nullptr), "cudaFree(nullptr)");  // the context
  auto load = driver_fn<decltype(&cuLibraryLoadData)>("cuLibraryLoadData");
  auto get_kernel = driver_fn<decltype(&cuLibraryGetKernel)>("cuLibraryGetKernel");
  auto launch = driver_fn<decltype(&cuLaunchKernel)>("cuLaunchKernel");

  CUlibrary lib = nullptr;
  CUresult r = load(&lib, &kImage, nullptr, nullptr, 0, nullptr, nullptr, 0);
  if (faults) {
    std::printf("cuLibraryLoadData %d", static_cast<int>(r));
    r = load(&lib, &kImage, nullptr, nullptr, 0, nullptr, nullptr, 0);
    std::printf(" then %d\n", static_cast<int>(r));
  }
  check(r, "cuLibraryLoadData");
  CUkernel lib_sum = nullptr;
  r = get_kernel(&lib_sum, lib, kLibSumName);
  if (faults) {
    std::printf("cuLibraryGetKernel %d", static_cast<int>(r));
    r = get_kernel(&lib_sum, lib, kLibSumName);
    std::printf(" then %d\n", static_cast<int>(r));
  }
  check(r, "cuLibraryGetKernel");
  using launch_rt_t = decltype(&__cudaLaunchKernel);
  void* cudart = dlopen("libcudart.so.13", RTLD_NOW | RTLD_NOLOAD);
  auto unhooked_launch =
      cudart ? reinterpret_cast<launch_rt_t>(dlsym(cudart, "__cudaLaunchKernel")) : nullptr;
  if (unhooked_launch == nullptr) {
    std::fprintf(stderr, "library_launch_probe: no __cudaLaunchKernel in libcudart.so.13\n");
    return 1;
  }
  cudaKernel_t runtime_sum = nullptr;
  check(__cudaGetKernel(&runtime_sum, reinterpret_cast<const void*>(&tensor_sum)),
        "__cudaGetKernel");
  if (g_failures != 0) return 1;

  float* first = filled(bytes);
  float* late_a[kLate];
  float* late_b[kLate];
  for (float*& p : late_a) p = filled(bytes);
  for (float*& p : late_b) p = filled(bytes);
  float* y = filled(bytes);
  std::vector<float> got(kSummed);
  int n = kSummed;
  for (int it = 0; it < iterations; ++it) {
    if (begin != nullptr) begin();
    float* tmp = filled(bytes);
    tensor_lists a = lists_of(first, late_a);
    void* args_a[] = {&a, &tmp, &n};
    check(__cudaLaunchKernel(runtime_sum, dim3(1), dim3(kSummed), args_a, 0, nullptr),
          "__cudaLaunchKernel(tensor_sum)");
    tensor_lists b = lists_of(first, late_b);
    void* args_b[] = {&b, &y, &n};
    check(launch(reinterpret_cast<CUfunction>(lib_sum), 1, 1, 1, kSummed, 1, 1, 0, nullptr,
                 args_b, nullptr),
          "cuLaunchKernel(lib_sum)");
    float* tmp2 = filled(bytes);
    void* args_c[] = {&b, &tmp2, &n};
    check(unhooked_launch(runtime_sum, dim3(1), dim3(kSummed), args_c, 0, nullptr),
          "__cudaLaunchKernel(tensor_sum) through the runtime's handle");
    check(cudaMemcpy(got.data(), tmp2, kSummed * sizeof(float), cudaMemcpyDeviceToHost),
          "download tmp2");
    if (got[0] != kLists) ++g_failures;
    check(cudaFree(tmp2), "cudaFree tmp2");
    check(cudaMemcpy(got.data(), tmp, kSummed * sizeof(float), cudaMemcpyDeviceToHost),
          "download tmp");
    if (got[0] != kLists || got[kSummed - 1] != kLists) {
      std::fprintf(stderr, "library_launch_probe: tensor_sum gave %g\n", got[0]);
      ++g_failures;
    }
    check(cudaFree(tmp), "cudaFree tmp");
  }
  check(cudaMemcpy(got.data(), y, kSummed * sizeof(float), cudaMemcpyDeviceToHost), "download y");
  if (got[0] != kLists || got[kSummed - 1] != kLists) {
    std::fprintf(stderr, "library_launch_probe: lib_sum gave %g\n", got[0]);
    ++g_failures;
  }
  if (g_failures != 0) return 1;
  std::printf("ok\n");
  return 0;
}
