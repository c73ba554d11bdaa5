// driver_probe: checks of oversub's driver-level interception (interpose/driver_hooks.h),
// run on simgpu under LD_PRELOAD=liboversub.so by driver_test.py. One case per run:
//
//   versions   cuGetProcAddress(_v2) and cudaGetDriverEntryPointByVersion answer our
//              hook for the ABI the requested version names (cuMemAlloc at CUDA 11, 12
//              and 13: cuMemAlloc_v2; cuGetProcAddress at 11.3: the v1 ABI, at 12.0:
//              _v2; cuLaunchKernel per-thread: _ptsz), the driver's own answer for an
//              ABI we do not intercept (cuMemAlloc before 3.2), for a function we do
//              not hook, and for an unknown name;
//   dlsym      dlsym on a dlopen'ed libcuda, and RTLD_DEFAULT, answer our hooks for
//              our names and libcuda's functions for the rest; a missing name fails
//              as glibc's does, with dlerror() set;
//   rtld-next  a library that wraps a function and finds the next definition with
//              dlsym(RTLD_NEXT) gets the next library's, not its own (no recursion);
//   cross      a cudaMalloc pointer freed with cuMemFree_v2 and a cuMemAlloc_v2 pointer
//              freed with cudaFree, both counted as tracked frees; an unknown pointer
//              is forwarded and CUDA's error returned;
//   vmm-limit  (OVERSUB_DEVICE_LIMIT) memory created with cuMemCreate by "another
//              library" counts against the limit: cuMemGetInfo_v2 drops by its size, a
//              cuMemCreate past the limit is refused with CUDA_ERROR_OUT_OF_MEMORY;
//   vmm-swap   (OVERSUB_MODE=swap, OVERSUB_DEVICE_LIMIT = the whole device) NCCL-like
//              memory created and mapped outside oversub, then more cudaMalloc memory
//              than fits, each buffer written: without counting the foreign bytes the
//              device would overflow; the foreign buffer keeps its bytes and address.
//   graph-driver (OVERSUB_MODE=swap, PROBE_DEVICE_BYTES = the device) four graphs
//              captured and instantiated through the driver entry points that
//              cuGetProcAddress_v2 answers (cuStreamBeginCapture, cuMemsetD32Async,
//              cuStreamEndCapture, cuGraphInstantiateWithFlags, cuGraphLaunch), each
//              filling three buffers of its own, together twice the device; each graph
//              fits. Replayed in turn three times, every buffer then holds its graph's
//              value (driver_test.py checks that replays fetched their footprint);
//   throw      (OVERSUB_TEST_THROW, throw_test.py) prints what each kind of entry
//              point returns when oversub's work inside it throws: cudaMalloc twice,
//              cuMemAlloc_v2 through cuGetProcAddress_v2, cuGetProcAddress_v2's and
//              dlsym's answers for cuMemAlloc; the test compares them with CUDA's codes.
// Prints "ok <case>" and exits 0, or "FAIL: ..." and exits 1.
#include <cuda.h>
#include <cuda_runtime_api.h>
#include <dlfcn.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

extern "C" int probe_value();  // probe_next_a.cc wraps probe_next_b.cc's
extern "C" int probe_next_b_loaded();

namespace {

int g_failures = 0;

void expect(bool ok, const std::string& what) {
  if (!ok) {
    std::printf("FAIL: %s\n", what.c_str());
    ++g_failures;
  }
}

void* libcuda() {
  static void* h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (h == nullptr) {
    std::printf("FAIL: dlopen(libcuda.so.1): %s\n", dlerror());
    std::exit(1);
  }
  return h;
}

// Our own export of name (liboversub.so is preloaded, so RTLD_NOLOAD finds it).
void* ours(const char* name) {
  static void* h = dlopen("liboversub.so", RTLD_NOW | RTLD_NOLOAD);
  if (h == nullptr) {
    std::printf("FAIL: liboversub.so is not loaded (run under LD_PRELOAD)\n");
    std::exit(1);
  }
  return dlsym(h, name);
}

std::string object_of(const void* p) {
  Dl_info info{};
  if (p == nullptr || dladdr(p, &info) == 0 || info.dli_fname == nullptr) return "?";
  const char* slash = std::strrchr(info.dli_fname, '/');
  return slash != nullptr ? slash + 1 : info.dli_fname;
}

using get_proc_v2_t = CUresult (*)(const char*, void**, int, cuuint64_t,
                                   CUdriverProcAddressQueryResult*);
using get_proc_v1_t = CUresult (*)(const char*, void**, int, cuuint64_t);

get_proc_v2_t get_proc() {
  return reinterpret_cast<get_proc_v2_t>(dlsym(libcuda(), "cuGetProcAddress_v2"));
}

void* query(const char* symbol, int version, cuuint64_t flags, CUresult* rc = nullptr,
            CUdriverProcAddressQueryResult* found = nullptr) {
  void* p = nullptr;
  CUdriverProcAddressQueryResult status{};
  const CUresult r = get_proc()(symbol, &p, version, flags, &status);
  if (rc != nullptr) *rc = r;
  if (found != nullptr) *found = status;
  return r == CUDA_SUCCESS ? p : nullptr;
}

void case_versions() {
  expect(get_proc() != nullptr && reinterpret_cast<void*>(get_proc()) == ours("cuGetProcAddress_v2"),
         "dlsym(libcuda, cuGetProcAddress_v2) is oversub's");
  for (int version : {11000, 12000, 13000}) {
    void* p = query("cuMemAlloc", version, CU_GET_PROC_ADDRESS_DEFAULT);
    expect(p != nullptr && p == ours("cuMemAlloc_v2"),
           "cuMemAlloc at " + std::to_string(version) + " is our cuMemAlloc_v2, got " +
               object_of(p));
  }
  // Before 3.2 cuMemAlloc was the 32-bit ABI: never ours (simgpu has no such ABI and
  // says VERSION_NOT_SUFFICIENT; a real driver returns its v1 function).
  void* old = query("cuMemAlloc", 3000, CU_GET_PROC_ADDRESS_DEFAULT);
  expect(old == nullptr || object_of(old) != "liboversub.so",
         "cuMemAlloc at 3000 is not ours, got " + object_of(old));
  void* v1 = query("cuGetProcAddress", 11030, CU_GET_PROC_ADDRESS_DEFAULT);
  expect(v1 != nullptr && v1 == ours("cuGetProcAddress"),
         "cuGetProcAddress at 11030 is our v1 ABI, got " + object_of(v1));
  void* v2 = query("cuGetProcAddress", 12000, CU_GET_PROC_ADDRESS_DEFAULT);
  expect(v2 != nullptr && v2 == ours("cuGetProcAddress_v2"),
         "cuGetProcAddress at 12000 is our _v2");
  void* ptsz = query("cuLaunchKernel", 13000, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM);
  expect(ptsz != nullptr && ptsz == ours("cuLaunchKernel_ptsz"),
         "cuLaunchKernel per-thread is our _ptsz, got " + object_of(ptsz));
  void* legacy = query("cuLaunchKernel", 13000, CU_GET_PROC_ADDRESS_LEGACY_STREAM);
  expect(legacy != nullptr && legacy == ours("cuLaunchKernel"), "cuLaunchKernel legacy is ours");
  void* ptds = query("cuMemcpyHtoD", 13000, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM);
  expect(ptds != nullptr && ptds == ours("cuMemcpyHtoD_v2_ptds"),
         "cuMemcpyHtoD per-thread is our _v2_ptds, got " + object_of(ptds));
  void* ctx = query("cuCtxGetCurrent", 13000, CU_GET_PROC_ADDRESS_DEFAULT);
  expect(ctx != nullptr && ctx == dlsym(libcuda(), "cuCtxGetCurrent"),
         "cuCtxGetCurrent (not hooked) is the driver's, got " + object_of(ctx));
  // The driver answers a symbol it lacks with success, a null pointer and
  // SYMBOL_NOT_FOUND (as a real driver 580 does); under the library the same.
  CUresult rc = CUDA_ERROR_UNKNOWN;
  CUdriverProcAddressQueryResult found = CU_GET_PROC_ADDRESS_SUCCESS;
  expect(query("cuNoSuchFunction", 13000, CU_GET_PROC_ADDRESS_DEFAULT, &rc, &found) == nullptr &&
             rc == CUDA_SUCCESS && found == CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND,
         "an unknown symbol is the driver's success, null and SYMBOL_NOT_FOUND, got rc " +
             std::to_string(rc) + ", status " + std::to_string(found));
  // The v1 ABI of cuGetProcAddress answers the same way.
  auto get_v1 = reinterpret_cast<get_proc_v1_t>(dlsym(libcuda(), "cuGetProcAddress"));
  void* p = nullptr;
  expect(get_v1 != nullptr && get_v1("cuMemFree", &p, 12000, 0) == CUDA_SUCCESS &&
             p == ours("cuMemFree_v2"),
         "cuGetProcAddress (v1 ABI) answers cuMemFree with our cuMemFree_v2");
  // The runtime's way.
  void* entry = nullptr;
  cudaDriverEntryPointQueryResult q{};
  expect(cudaGetDriverEntryPointByVersion("cuMemAlloc", &entry, 13000, cudaEnableDefault, &q) ==
                 cudaSuccess &&
             entry == ours("cuMemAlloc_v2"),
         "cudaGetDriverEntryPointByVersion(cuMemAlloc, 13000) is our cuMemAlloc_v2, got " +
             object_of(entry));
}

void case_dlsym() {
  void* h = libcuda();
  expect(dlsym(h, "cuMemAlloc_v2") == ours("cuMemAlloc_v2"), "dlsym(libcuda, cuMemAlloc_v2)");
  expect(dlsym(h, "cuLaunchKernel") == ours("cuLaunchKernel"), "dlsym(libcuda, cuLaunchKernel)");
  // RTLD_DEFAULT answers what the program would find without liboversub, wrapped: with
  // libcuda loaded privately (RTLD_LOCAL) nothing, once it is global our hook.
  expect(dlsym(RTLD_DEFAULT, "cuMemFree_v2") == nullptr,
         "dlsym(RTLD_DEFAULT, cuMemFree_v2) with a private libcuda finds nothing, as without us");
  expect(dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD | RTLD_GLOBAL) != nullptr,
         "libcuda made global");
  expect(dlsym(RTLD_DEFAULT, "cuMemFree_v2") == ours("cuMemFree_v2"),
         "dlsym(RTLD_DEFAULT, cuMemFree_v2) with a global libcuda is our hook");
  void* init = dlsym(h, "cuInit");
  expect(init != nullptr && object_of(init) == "libcuda.so.1",
         "dlsym(libcuda, cuInit) is the driver's, got " + object_of(init));
  // The old ABI name is not ours.
  void* v1 = dlsym(h, "cuMemAlloc");
  expect(v1 == nullptr || object_of(v1) != "liboversub.so", "dlsym(libcuda, cuMemAlloc) not ours");
  dlerror();
  expect(dlsym(h, "cuNoSuchFunction") == nullptr && dlerror() != nullptr,
         "a missing name fails with dlerror() set");
  // A name that is not the driver's at all.
  expect(dlsym(RTLD_DEFAULT, "strlen") != nullptr, "dlsym(RTLD_DEFAULT, strlen)");
  // The hooks work when called: an allocation through the dlsym'd function.
  CUdeviceptr d = 0;
  auto alloc = reinterpret_cast<CUresult (*)(CUdeviceptr*, size_t)>(dlsym(h, "cuMemAlloc_v2"));
  auto release = reinterpret_cast<CUresult (*)(CUdeviceptr)>(dlsym(h, "cuMemFree_v2"));
  expect(cudaFree(nullptr) == cudaSuccess, "runtime context");
  expect(alloc(&d, 1 << 20) == CUDA_SUCCESS && d != 0, "cuMemAlloc_v2 through dlsym");
  expect(release(d) == CUDA_SUCCESS, "cuMemFree_v2 through dlsym");
}

void case_rtld_next() {
  // probe_next_a's probe_value() is probe_next_b's plus one, found with
  // dlsym(RTLD_NEXT): 42 + 1. A dlsym that looked up RTLD_NEXT from its own object
  // would hand probe_next_a its own function back and recurse until the stack ends.
  expect(probe_next_b_loaded() == 1, "probe_next_b is loaded");
  expect(probe_value() == 43, "probe_value() through dlsym(RTLD_NEXT) is 43, got " +
                                  std::to_string(probe_value()));
}

void case_cross() {
  void* p = nullptr;
  expect(cudaMalloc(&p, 1 << 20) == cudaSuccess, "cudaMalloc");
  auto release = reinterpret_cast<CUresult (*)(CUdeviceptr)>(dlsym(libcuda(), "cuMemFree_v2"));
  expect(release(reinterpret_cast<CUdeviceptr>(p)) == CUDA_SUCCESS,
         "cuMemFree_v2 of a cudaMalloc pointer");
  auto alloc = reinterpret_cast<CUresult (*)(CUdeviceptr*, size_t)>(dlsym(libcuda(), "cuMemAlloc_v2"));
  CUdeviceptr d = 0;
  expect(alloc(&d, 3 << 20) == CUDA_SUCCESS, "cuMemAlloc_v2");
  expect(cudaFree(reinterpret_cast<void*>(d)) == cudaSuccess, "cudaFree of a cuMemAlloc_v2 pointer");
  // An address nobody allocated: forwarded, CUDA's answer returned.
  expect(release(static_cast<CUdeviceptr>(0x10)) != CUDA_SUCCESS,
         "cuMemFree_v2 of an unknown pointer returns CUDA's error");
}

CUmemAllocationProp device_prop() {
  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = 0;
  return prop;
}

template <typename F>
F driver(const char* name) {
  return reinterpret_cast<F>(dlsym(libcuda(), name));
}

void case_vmm_limit(std::size_t limit) {
  expect(cudaFree(nullptr) == cudaSuccess, "runtime context");
  auto create = driver<CUresult (*)(CUmemGenericAllocationHandle*, size_t,
                                    const CUmemAllocationProp*, unsigned long long)>("cuMemCreate");
  auto release = driver<CUresult (*)(CUmemGenericAllocationHandle)>("cuMemRelease");
  auto info = driver<CUresult (*)(size_t*, size_t*)>("cuMemGetInfo_v2");
  const CUmemAllocationProp prop = device_prop();
  size_t free0 = 0, total = 0;
  expect(info(&free0, &total) == CUDA_SUCCESS && total == limit,
         "cuMemGetInfo_v2 total is OVERSUB_DEVICE_LIMIT (" + std::to_string(total) + ")");
  const size_t chunk = 8u << 20;
  CUmemGenericAllocationHandle h = 0;
  expect(create(&h, chunk, &prop, 0) == CUDA_SUCCESS, "cuMemCreate 8 MiB");
  size_t free1 = 0;
  expect(info(&free1, &total) == CUDA_SUCCESS && free0 - free1 == chunk,
         "cuMemCreate's bytes are counted: free went from " + std::to_string(free0) + " to " +
             std::to_string(free1));
  CUmemGenericAllocationHandle big = 0;
  expect(create(&big, limit, &prop, 0) == CUDA_ERROR_OUT_OF_MEMORY,
         "a cuMemCreate past the limit is refused with CUDA_ERROR_OUT_OF_MEMORY");
  expect(release(h) == CUDA_SUCCESS, "cuMemRelease");
  size_t free2 = 0;
  expect(info(&free2, &total) == CUDA_SUCCESS && free2 == free0,
         "cuMemRelease gives the bytes back");
}

void case_vmm_swap(std::size_t device_bytes) {
  expect(cudaFree(nullptr) == cudaSuccess, "runtime context");
  auto create = driver<CUresult (*)(CUmemGenericAllocationHandle*, size_t,
                                    const CUmemAllocationProp*, unsigned long long)>("cuMemCreate");
  auto release = driver<CUresult (*)(CUmemGenericAllocationHandle)>("cuMemRelease");
  auto reserve = driver<CUresult (*)(CUdeviceptr*, size_t, size_t, CUdeviceptr,
                                     unsigned long long)>("cuMemAddressReserve");
  auto map = driver<CUresult (*)(CUdeviceptr, size_t, size_t, CUmemGenericAllocationHandle,
                                 unsigned long long)>("cuMemMap");
  auto unmap = driver<CUresult (*)(CUdeviceptr, size_t)>("cuMemUnmap");
  auto set_access = driver<CUresult (*)(CUdeviceptr, size_t, const CUmemAccessDesc*, size_t)>(
      "cuMemSetAccess");
  auto free_va = driver<CUresult (*)(CUdeviceptr, size_t)>("cuMemAddressFree");
  auto memset32 = driver<CUresult (*)(CUdeviceptr, unsigned, size_t)>("cuMemsetD32_v2");
  auto dtoh = driver<CUresult (*)(void*, CUdeviceptr, size_t)>("cuMemcpyDtoH_v2");

  // A quarter of the device, created and mapped the way NCCL maps its buffers.
  const CUmemAllocationProp prop = device_prop();
  const size_t foreign_bytes = (device_bytes / 4) & ~((size_t{2} << 20) - 1);
  CUmemGenericAllocationHandle h = 0;
  CUdeviceptr va = 0;
  expect(create(&h, foreign_bytes, &prop, 0) == CUDA_SUCCESS, "cuMemCreate");
  expect(reserve(&va, foreign_bytes, 0, 0, 0) == CUDA_SUCCESS, "cuMemAddressReserve");
  expect(map(va, foreign_bytes, 0, h, 0) == CUDA_SUCCESS, "cuMemMap");
  CUmemAccessDesc access{};
  access.location = prop.location;
  access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  expect(set_access(va, foreign_bytes, &access, 1) == CUDA_SUCCESS, "cuMemSetAccess");
  expect(memset32(va, 0x5eedf00d, foreign_bytes / 4) == CUDA_SUCCESS, "fill the foreign buffer");

  // Twice the device in application buffers, each written: the residency engine must
  // evict to make room, and may only use what the foreign buffer leaves.
  std::vector<void*> buffers;
  const size_t each = 4u << 20;
  for (size_t made = 0; made < 2 * device_bytes; made += each) {
    void* p = nullptr;
    if (cudaMalloc(&p, each) != cudaSuccess) {
      expect(false, "cudaMalloc " + std::to_string(buffers.size()));
      break;
    }
    expect(cudaMemset(p, static_cast<int>(buffers.size() & 0xff), each) == cudaSuccess,
           "cudaMemset of buffer " + std::to_string(buffers.size()));
    buffers.push_back(p);
  }
  // Every buffer still holds its bytes, and so does the foreign one.
  for (size_t i = 0; i < buffers.size(); ++i) {
    unsigned char b = 0;
    expect(cudaMemcpy(&b, static_cast<char*>(buffers[i]) + each - 1, 1, cudaMemcpyDeviceToHost) ==
                   cudaSuccess &&
               b == (i & 0xff),
           "buffer " + std::to_string(i) + " kept its bytes");
  }
  std::vector<std::uint32_t> words(foreign_bytes / 4);
  expect(dtoh(words.data(), va, foreign_bytes) == CUDA_SUCCESS, "read the foreign buffer");
  std::size_t wrong = 0;
  for (std::uint32_t w : words) wrong += w != 0x5eedf00du;
  expect(wrong == 0, std::to_string(wrong) + " words of the foreign buffer changed");
  for (void* p : buffers) cudaFree(p);
  expect(unmap(va, foreign_bytes) == CUDA_SUCCESS, "cuMemUnmap");
  expect(free_va(va, foreign_bytes) == CUDA_SUCCESS, "cuMemAddressFree");
  expect(release(h) == CUDA_SUCCESS, "cuMemRelease");
  std::printf("foreign %zu bytes kept over %zu buffers of %zu bytes on a %zu-byte device\n",
              foreign_bytes, buffers.size(), each, device_bytes);
}

void case_graph_driver(std::size_t device_bytes) {
  expect(cudaFree(nullptr) == cudaSuccess, "runtime context");
  using begin_t = CUresult (*)(CUstream, CUstreamCaptureMode);
  using memset_t = CUresult (*)(CUdeviceptr, unsigned, size_t, CUstream);
  using end_t = CUresult (*)(CUstream, CUgraph*);
  using instantiate_t = CUresult (*)(CUgraphExec*, CUgraph, unsigned long long);
  using launch_t = CUresult (*)(CUgraphExec, CUstream);
  using exec_destroy_t = CUresult (*)(CUgraphExec);
  using destroy_t = CUresult (*)(CUgraph);
  const auto begin = reinterpret_cast<begin_t>(query("cuStreamBeginCapture", 13000, 0));
  const auto memset32 = reinterpret_cast<memset_t>(query("cuMemsetD32Async", 13000, 0));
  const auto end = reinterpret_cast<end_t>(query("cuStreamEndCapture", 13000, 0));
  const auto instantiate =
      reinterpret_cast<instantiate_t>(query("cuGraphInstantiateWithFlags", 13000, 0));
  const auto launch = reinterpret_cast<launch_t>(query("cuGraphLaunch", 13000, 0));
  const auto exec_destroy = reinterpret_cast<exec_destroy_t>(query("cuGraphExecDestroy", 13000, 0));
  const auto destroy = reinterpret_cast<destroy_t>(query("cuGraphDestroy", 13000, 0));
  if (!begin || !memset32 || !end || !instantiate || !launch || !exec_destroy || !destroy) {
    expect(false, "cuGetProcAddress_v2 answers every graph entry point");
    return;
  }
  expect(object_of(reinterpret_cast<void*>(instantiate)) == "liboversub.so",
         "cuGraphInstantiateWithFlags is our hook, not " +
             object_of(reinterpret_cast<void*>(instantiate)));
  cudaStream_t s = nullptr;
  expect(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) == cudaSuccess, "stream");
  const CUstream cs = reinterpret_cast<CUstream>(s);
  constexpr int graphs = 4;
  constexpr int per_graph = 3;
  const size_t each = (device_bytes / (graphs * per_graph / 2)) & ~((size_t{2} << 20) - 1);
  std::vector<void*> buffers;
  for (int i = 0; i < graphs * per_graph; ++i) {
    void* p = nullptr;
    expect(cudaMalloc(&p, each) == cudaSuccess, "cudaMalloc " + std::to_string(i));
    buffers.push_back(p);
  }
  std::vector<CUgraph> g(graphs, nullptr);
  std::vector<CUgraphExec> e(graphs, nullptr);
  for (int k = 0; k < graphs; ++k) {
    expect(begin(cs, CU_STREAM_CAPTURE_MODE_GLOBAL) == CUDA_SUCCESS, "cuStreamBeginCapture");
    for (int j = 0; j < per_graph; ++j) {
      const auto p = reinterpret_cast<CUdeviceptr>(buffers[k * per_graph + j]);
      expect(memset32(p, 0x1000u + k, each / 4, cs) == CUDA_SUCCESS, "captured memset");
    }
    expect(end(cs, &g[k]) == CUDA_SUCCESS, "cuStreamEndCapture");
    expect(instantiate(&e[k], g[k], 0) == CUDA_SUCCESS, "cuGraphInstantiateWithFlags");
  }
  for (int round = 0; round < 3; ++round) {
    for (int k = 0; k < graphs; ++k) expect(launch(e[k], cs) == CUDA_SUCCESS, "cuGraphLaunch");
  }
  expect(cudaStreamSynchronize(s) == cudaSuccess, "synchronize");
  for (int i = 0; i < graphs * per_graph; ++i) {
    std::uint32_t w = 0;
    expect(cudaMemcpy(&w, static_cast<char*>(buffers[i]) + each - 4, 4, cudaMemcpyDeviceToHost) ==
                   cudaSuccess &&
               w == 0x1000u + static_cast<unsigned>(i / per_graph),
           "buffer " + std::to_string(i) + " holds its graph's value");
  }
  for (int k = 0; k < graphs; ++k) {
    expect(exec_destroy(e[k]) == CUDA_SUCCESS, "cuGraphExecDestroy");
    expect(destroy(g[k]) == CUDA_SUCCESS, "cuGraphDestroy");
  }
  for (void* p : buffers) cudaFree(p);
  expect(cudaStreamDestroy(s) == cudaSuccess, "stream destroyed");
  std::printf("%d graphs of %d buffers of %zu bytes replayed in turn on a %zu-byte device\n",
              graphs, per_graph, each, device_bytes);
}

std::size_t env_bytes(const char* name) {
  const char* v = std::getenv(name);
  return v != nullptr ? std::strtoull(v, nullptr, 10) : 0;
}

}  // namespace

// OVERSUB_TEST_THROW (Note [A test-only fault point] in interpose/abi_guard.h): each
// call's code and where each lookup's answer lives, one line each, for throw_test.py.
void case_throw() {
  cudaFree(nullptr);  // the runtime's context, for the driver calls below
  for (const char* what : {"cudaMalloc", "cudaMalloc-again"}) {
    void* p = nullptr;
    const cudaError_t rc = cudaMalloc(&p, std::size_t{1} << 20);
    std::printf("%s %d %s\n", what, static_cast<int>(rc), p == nullptr ? "null" : "allocated");
    if (p != nullptr) cudaFree(p);
  }
  using alloc_t = CUresult (*)(CUdeviceptr*, size_t);
  using free_t = CUresult (*)(CUdeviceptr);
  const auto alloc =
      reinterpret_cast<alloc_t>(query("cuMemAlloc", 13000, CU_GET_PROC_ADDRESS_DEFAULT));
  const auto release =
      reinterpret_cast<free_t>(query("cuMemFree", 13000, CU_GET_PROC_ADDRESS_DEFAULT));
  std::printf("cuGetProcAddress_v2 cuMemAlloc %s\n",
              object_of(reinterpret_cast<void*>(alloc)).c_str());
  std::printf("dlsym cuMemAlloc_v2 %s\n", object_of(dlsym(libcuda(), "cuMemAlloc_v2")).c_str());
  if (alloc == nullptr || release == nullptr) {
    std::printf("FAIL: no cuMemAlloc/cuMemFree from cuGetProcAddress_v2\n");
    ++g_failures;
    return;
  }
  CUdeviceptr d = 0;
  const CUresult rc = alloc(&d, std::size_t{1} << 20);
  std::printf("cuMemAlloc_v2 %d %s\n", static_cast<int>(rc), d == 0 ? "null" : "allocated");
  if (d != 0) release(d);
}

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr,
                 "usage: driver_probe versions|dlsym|rtld-next|cross|vmm-limit|vmm-swap|throw\n");
    return 2;
  }
  const std::string c = argv[1];
  if (c == "versions") case_versions();
  else if (c == "dlsym") case_dlsym();
  else if (c == "rtld-next") case_rtld_next();
  else if (c == "cross") case_cross();
  else if (c == "vmm-limit") case_vmm_limit(env_bytes("PROBE_LIMIT_BYTES"));
  else if (c == "vmm-swap") case_vmm_swap(env_bytes("PROBE_DEVICE_BYTES"));
  else if (c == "throw") case_throw();
  else if (c == "graph-driver") case_graph_driver(env_bytes("PROBE_DEVICE_BYTES"));
  else {
    std::fprintf(stderr, "driver_probe: unknown case %s\n", c.c_str());
    return 2;
  }
  if (g_failures != 0) return 1;
  std::printf("ok %s\n", c.c_str());
  return 0;
}
