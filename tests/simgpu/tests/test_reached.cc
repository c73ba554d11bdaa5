// What kernels really reach, and the race detector seeing it (Note [Accesses a
// kernel really makes] in tests/simgpu/driver/fault.h); the VMM switches of the device
// model.
//
// A kernel that chases a pointer stored in device memory (a batched GEMM's pointer
// array, an optimizer's foreach list) names only the pointer array in its
// footprint. Queued behind a long kernel, on a GPU it reads the chased page long
// after the host's calls return: if the host unmaps that page, or takes access to
// it away, without waiting for the kernel, the GPU faults or reads another
// allocation. simgpu runs kernels at enqueue, so it records each page the kernel
// reached outside its footprint and the race detector must report the unmap. Each
// scenario runs in a child process (this program re-run with --scenario NAME), so
// that SIMGPU_RACE=abort and the exit status can be checked.
//
// Without the recording of reached pages (or with the old whole-allocation opening
// of footprints), the *_races tests see no race and fail.
#include <csignal>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "simgpu/kernel.h"
#include "simgpu_test.h"

namespace {

// Adds 1 to *table[i] for i < n: the ints it writes are reached through pointers
// loaded from device memory; its footprint names only the table.
__global__ void chase_add_kernel(int* const* table, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) *table[i] += 1;
}
SIMGPU_KERNEL_FOOTPRINT(chase_add_kernel, [](simgpu::footprint& fp, int* const* table, int n) {
  fp.read(table, static_cast<std::size_t>(n));
});

// Copies *table[i] into out[i]: reads through the table.
__global__ void chase_read_kernel(const int* const* table, int* out, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = *table[i];
}
SIMGPU_KERNEL_FOOTPRINT(chase_read_kernel, [](simgpu::footprint& fp, const int* const* table,
                                              int* out, int n) {
  fp.read(table, static_cast<std::size_t>(n));
  fp.write(out, static_cast<std::size_t>(n));
});

// About 20 ms of arithmetic on the H100 model, writing one int.
__global__ void long_kernel(int* out) {
  if (blockIdx.x == 0 && threadIdx.x == 0) out[0] = 7;
}
SIMGPU_KERNEL_FOOTPRINT(long_kernel, [](simgpu::footprint& fp, int* out) {
  fp.write(out, 1);
  fp.flops(1e12);
});

// Declares a write of the first `n` ints of p but also writes p[far].
__global__ void stray_write_kernel(int* p, int n, int far) {
  if (blockIdx.x == 0 && threadIdx.x == 0) {
    for (int i = 0; i < n; ++i) p[i] = i;
    p[far] = -1;
  }
}
SIMGPU_KERNEL_FOOTPRINT(stray_write_kernel, [](simgpu::footprint& fp, int* p, int n, int) {
  fp.write(p, static_cast<std::size_t>(n));
});

// Reads ints [lo, lo+n) of p into out.
__global__ void range_read_kernel(const int* p, int lo, int n, int* out) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = p[lo + i];
}
SIMGPU_KERNEL_FOOTPRINT(range_read_kernel, [](simgpu::footprint& fp, const int* p, int lo,
                                              int n, int* out) {
  fp.read(p + lo, static_cast<std::size_t>(n));
  fp.write(out, static_cast<std::size_t>(n));
});

// Writes i + 1 to table[0][i] for i < n, each thread declaring its element first
// (simgpu::reach_write): the exact range [table[0], table[0] + n) is recorded.
__global__ void reach_write_kernel(int* const* table, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  int* q = table[0];
  simgpu::reach_write(q + i, 1);
  q[i] = i + 1;
}
SIMGPU_KERNEL_FOOTPRINT(reach_write_kernel, [](simgpu::footprint& fp, int* const* table, int) {
  fp.read(table, 1);
});

// Declares a write of table[0][0, n) but also writes table[0][far] undeclared.
__global__ void reach_stray_kernel(int* const* table, int n, int far) {
  if (blockIdx.x != 0 || threadIdx.x != 0) return;
  int* q = table[0];
  simgpu::reach_write(q, static_cast<std::size_t>(n));
  for (int i = 0; i < n; ++i) q[i] = i;
  q[far] = -1;
}
SIMGPU_KERNEL_FOOTPRINT(reach_stray_kernel, [](simgpu::footprint& fp, int* const* table, int,
                                               int) {
  fp.read(table, 1);
});

// Declares a read of table[0][0, n) and then writes table[0][0].
__global__ void reach_read_then_write_kernel(int* const* table, int n) {
  if (blockIdx.x != 0 || threadIdx.x != 0) return;
  int* q = table[0];
  simgpu::reach_read(q, static_cast<std::size_t>(n));
  q[0] = q[n - 1] + 1;
}
SIMGPU_KERNEL_FOOTPRINT(reach_read_then_write_kernel, [](simgpu::footprint& fp,
                                                         int* const* table, int) {
  fp.read(table, 1);
});

#define CHECK(expr)                                                                      \
  do {                                                                                   \
    if (!(expr)) {                                                                       \
      std::fprintf(stderr, "scenario check failed: %s (line %d)\n", #expr, __LINE__);  \
      return 10;                                                                         \
    }                                                                                    \
  } while (0)
#define CHECK_RT(expr) CHECK((expr) == cudaSuccess)
#define CHECK_CU(expr) CHECK((expr) == CUDA_SUCCESS)

constexpr size_t kGran = 2ull << 20;
constexpr int kN = 4;  // chased ints, one per 4 KiB page of the mapping

// One VMM mapping of 2 MiB (device-located, read-write), a table in cudaMalloc memory
// holding kN pointers into it (one per page), and a non-blocking stream.
struct chase_setup {
  CUdeviceptr va = 0;
  CUmemGenericAllocationHandle h = 0;
  int** table = nullptr;
  int* out = nullptr;
  int* scratch = nullptr;
  cudaStream_t s = nullptr;

  int init() {
    CHECK_RT(cudaFree(nullptr));
    CUmemAllocationProp prop{};
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    CHECK_CU(SIMGPU_DRV(cuMemAddressReserve)(&va, kGran, 0, 0, 0));
    CHECK_CU(SIMGPU_DRV(cuMemCreate)(&h, kGran, &prop, 0));
    CHECK_CU(SIMGPU_DRV(cuMemMap)(va, kGran, 0, h, 0));
    CHECK_CU(grant(CU_MEM_ACCESS_FLAGS_PROT_READWRITE));
    std::vector<int> values(kGran / sizeof(int), 0);
    for (int i = 0; i < kN; ++i) values[i * 1024] = 100 + i;
    CHECK_RT(cudaMemcpy(reinterpret_cast<void*>(va), values.data(), kGran,
                        cudaMemcpyHostToDevice));
    std::vector<int*> pointers(kN);
    for (int i = 0; i < kN; ++i) pointers[i] = reinterpret_cast<int*>(va) + i * 1024;
    CHECK_RT(cudaMalloc(&table, kN * sizeof(int*)));
    CHECK_RT(cudaMemcpy(table, pointers.data(), kN * sizeof(int*), cudaMemcpyHostToDevice));
    CHECK_RT(cudaMalloc(&out, kN * sizeof(int)));
    CHECK_RT(cudaMalloc(&scratch, sizeof(int)));
    CHECK_RT(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    return 0;
  }

  CUresult grant(CUmemAccess_flags flags) {
    CUmemAccessDesc d{};
    d.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    d.flags = flags;
    return SIMGPU_DRV(cuMemSetAccess)(va, kGran, &d, 1);
  }

  cudaError_t long_work() {
    void* args[] = {&scratch};
    return cudaLaunchKernel(reinterpret_cast<const void*>(&long_kernel), dim3(1), dim3(1), args,
                            0, s);
  }
  cudaError_t chase_add() {
    int n = kN;
    void* args[] = {&table, &n};
    return cudaLaunchKernel(reinterpret_cast<const void*>(&chase_add_kernel), dim3(1), dim3(kN),
                            args, 0, s);
  }
  cudaError_t chase_read() {
    int n = kN;
    const int* const* t = table;
    void* args[] = {&t, &out, &n};
    return cudaLaunchKernel(reinterpret_cast<const void*>(&chase_read_kernel), dim3(1),
                            dim3(kN), args, 0, s);
  }
};

// The long kernel, then the chasing reader, then the unmap with no wait: a race.
int unmap_unordered() {
  chase_setup c;
  if (int r = c.init()) return r;
  CHECK_RT(c.long_work());
  CHECK_RT(c.chase_read());
  CHECK_CU(SIMGPU_DRV(cuMemUnmap)(c.va, kGran));
  return 0;
}

// The same, with the host waiting on an event recorded after the kernel: no race.
int unmap_after_event() {
  chase_setup c;
  if (int r = c.init()) return r;
  cudaEvent_t e = nullptr;
  CHECK_RT(cudaEventCreate(&e));
  CHECK_RT(c.long_work());
  CHECK_RT(c.chase_read());
  CHECK_RT(cudaEventRecord(e, c.s));
  CHECK_RT(cudaEventSynchronize(e));
  CHECK_CU(SIMGPU_DRV(cuMemUnmap)(c.va, kGran));
  std::vector<int> got(kN);
  CHECK_RT(cudaMemcpy(got.data(), c.out, kN * sizeof(int), cudaMemcpyDeviceToHost));
  for (int i = 0; i < kN; ++i) CHECK(got[i] == 100 + i);
  return 0;
}

// The chasing writer, then the host takes write access away: a race (the queued
// kernel would fault on a GPU). The write is seen through the pointer.
int set_access_unordered() {
  chase_setup c;
  if (int r = c.init()) return r;
  CHECK_RT(c.long_work());
  CHECK_RT(c.chase_add());
  CHECK_CU(c.grant(CU_MEM_ACCESS_FLAGS_PROT_READ));
  return 0;
}

// The same after a stream synchronisation: no race; the writes landed.
int set_access_after_sync() {
  chase_setup c;
  if (int r = c.init()) return r;
  CHECK_RT(c.long_work());
  CHECK_RT(c.chase_add());
  CHECK_RT(cudaStreamSynchronize(c.s));
  CHECK_CU(c.grant(CU_MEM_ACCESS_FLAGS_PROT_READ));
  std::vector<int> got(kN);
  for (int i = 0; i < kN; ++i)
    CHECK_RT(cudaMemcpy(&got[i], reinterpret_cast<int*>(c.va) + i * 1024, sizeof(int),
                        cudaMemcpyDeviceToHost));
  for (int i = 0; i < kN; ++i) CHECK(got[i] == 101 + i);
  return 0;
}

// A captured graph (long kernel, chasing reader) replayed, then the unmap with no
// wait: the replayed node's reached pages are recorded too, a race.
int graph_unmap_unordered(bool wait) {
  chase_setup c;
  if (int r = c.init()) return r;
  cudaGraph_t g = nullptr;
  cudaGraphExec_t exec = nullptr;
  CHECK_RT(cudaStreamBeginCapture(c.s, cudaStreamCaptureModeGlobal));
  CHECK_RT(c.long_work());
  CHECK_RT(c.chase_read());
  CHECK_RT(cudaStreamEndCapture(c.s, &g));
  CHECK_RT(cudaGraphInstantiate(&exec, g, 0));
  CHECK_RT(cudaGraphLaunch(exec, c.s));
  if (wait) CHECK_RT(cudaStreamSynchronize(c.s));
  CHECK_CU(SIMGPU_DRV(cuMemUnmap)(c.va, kGran));
  return 0;
}

// A kernel declares a write of the first page of an allocation but also writes its
// fifth page; another stream's kernel reads that fifth page (declared): a race the
// footprints alone, opened whole-allocation, never show.
int stray_write_unordered() {
  CHECK_RT(cudaFree(nullptr));
  int* p = nullptr;
  int* out = nullptr;
  CHECK_RT(cudaMalloc(&p, 8 * 4096));
  CHECK_RT(cudaMalloc(&out, 64 * sizeof(int)));
  cudaStream_t a = nullptr, b = nullptr;
  CHECK_RT(cudaStreamCreateWithFlags(&a, cudaStreamNonBlocking));
  CHECK_RT(cudaStreamCreateWithFlags(&b, cudaStreamNonBlocking));
  int n = 16, far = 4 * 1024 + 3;
  void* wargs[] = {&p, &n, &far};
  CHECK_RT(cudaLaunchKernel(reinterpret_cast<const void*>(&stray_write_kernel), dim3(1), dim3(1),
                            wargs, 0, a));
  const int* cp = p;
  int lo = 4 * 1024, count = 64;
  void* rargs[] = {&cp, &lo, &count, &out};
  CHECK_RT(cudaLaunchKernel(reinterpret_cast<const void*>(&range_read_kernel), dim3(1),
                            dim3(64), rargs, 0, b));
  CHECK_RT(cudaDeviceSynchronize());
  return 0;
}

// A buffer of 8 pages, a one-entry device table pointing at it, two streams.
struct reach_setup {
  int* p = nullptr;
  int** table = nullptr;
  int* out = nullptr;
  cudaStream_t a = nullptr, b = nullptr;

  int init() {
    CHECK_RT(cudaFree(nullptr));
    CHECK_RT(cudaMalloc(&p, 8 * 4096));
    CHECK_RT(cudaMemset(p, 0, 8 * 4096));
    CHECK_RT(cudaMalloc(&table, sizeof(int*)));
    CHECK_RT(cudaMemcpy(table, &p, sizeof(int*), cudaMemcpyHostToDevice));
    CHECK_RT(cudaMalloc(&out, 64 * sizeof(int)));
    CHECK_RT(cudaStreamCreateWithFlags(&a, cudaStreamNonBlocking));
    CHECK_RT(cudaStreamCreateWithFlags(&b, cudaStreamNonBlocking));
    return 0;
  }
  // Reads ints [lo, lo+64) of p on stream b (declared in the footprint).
  cudaError_t read_on_b(int lo) {
    const int* cp = p;
    int count = 64;
    void* args[] = {&cp, &lo, &count, &out};
    return cudaLaunchKernel(reinterpret_cast<const void*>(&range_read_kernel), dim3(1),
                            dim3(64), args, 0, b);
  }
  cudaError_t reach_write(int n) {
    void* args[] = {&table, &n};
    return cudaLaunchKernel(reinterpret_cast<const void*>(&reach_write_kernel), dim3(1),
                            dim3(n), args, 0, a);
  }
};

// A kernel writes ints [0, 16) of p through the table, declared exactly; another
// stream's kernel reads ints [lo, lo+64) of the same 4 KiB page. lo = 512: no race
// (a page-granular record of the write would report one); lo = 8: a race.
int reach_exact(int lo) {
  reach_setup c;
  if (int r = c.init()) return r;
  simgpu::reach_write(c.p, 16);  // host code: outside any window, nothing happens
  CHECK_RT(c.reach_write(16));
  CHECK_RT(c.read_on_b(lo));
  CHECK_RT(cudaDeviceSynchronize());
  std::vector<int> got(16);
  CHECK_RT(cudaMemcpy(got.data(), c.p, 16 * sizeof(int), cudaMemcpyDeviceToHost));
  for (int i = 0; i < 16; ++i) CHECK(got[i] == i + 1);
  return 0;
}

// A declared write of ints [0, 16), then an undeclared write of int 4*1024+3 (page
// 4); another stream reads ints [4*1024, 4*1024+64): the stray write faults, is
// recorded by the page, and races.
int reach_stray() {
  reach_setup c;
  if (int r = c.init()) return r;
  int n = 16, far = 4 * 1024 + 3;
  void* args[] = {&c.table, &n, &far};
  CHECK_RT(cudaLaunchKernel(reinterpret_cast<const void*>(&reach_stray_kernel), dim3(1),
                            dim3(1), args, 0, c.a));
  CHECK_RT(c.read_on_b(4 * 1024));
  CHECK_RT(cudaDeviceSynchronize());
  int got = 0;
  CHECK_RT(cudaMemcpy(&got, c.p + far, sizeof(int), cudaMemcpyDeviceToHost));
  CHECK(got == -1);
  return 0;
}

// A declared read of ints [0, 16), then a write of int 0: the write still faults
// (the declaration opened the page read-only) and is recorded for the whole page,
// so a read of ints [512, 576) on another stream races.
int reach_read_then_write() {
  reach_setup c;
  if (int r = c.init()) return r;
  int n = 16;
  void* args[] = {&c.table, &n};
  CHECK_RT(cudaLaunchKernel(reinterpret_cast<const void*>(&reach_read_then_write_kernel),
                            dim3(1), dim3(1), args, 0, c.a));
  CHECK_RT(c.read_on_b(512));
  CHECK_RT(cudaDeviceSynchronize());
  return 0;
}

// The table points at a freed buffer: the declaration itself is an illegal access.
int reach_freed() {
  reach_setup c;
  if (int r = c.init()) return r;
  CHECK_RT(cudaFree(c.p));
  CHECK(c.reach_write(16) == cudaErrorIllegalAddress);
  return 0;
}

// With vmm_waits_for_device the unmap waits (in host time) for the long kernel, but
// still orders nothing: the race is reported. Prints the host time before and after.
int unmap_waits_but_races() {
  chase_setup c;
  if (int r = c.init()) return r;
  auto now = simgpu_test::driver<uint64_t (*)()>("simgpuVirtualTimeNs");
  CHECK_RT(c.long_work());
  CHECK_RT(c.chase_read());
  uint64_t before = now();
  CHECK_CU(SIMGPU_DRV(cuMemUnmap)(c.va, kGran));
  std::printf("unmap_host_ns=%llu\n", static_cast<unsigned long long>(now() - before));
  return 0;
}

// Host-located cuMemCreate on a model without host VMM: refused as by the driver.
int host_vmm_refused() {
  CHECK_RT(cudaFree(nullptr));
  CUdevice dev = 0;
  int supported = -1;
  CHECK_CU(SIMGPU_DRV(cuDeviceGetAttribute)(
      &supported, CU_DEVICE_ATTRIBUTE_HOST_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, dev));
  std::printf("host_vmm_supported=%d\n", supported);
  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_HOST;
  CUmemGenericAllocationHandle h = 0;
  CUresult r = SIMGPU_DRV(cuMemCreate)(&h, kGran, &prop, 0);
  std::printf("host_create=%d\n", static_cast<int>(r));
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  CHECK_CU(SIMGPU_DRV(cuMemCreate)(&h, kGran, &prop, 0));
  CHECK_CU(SIMGPU_DRV(cuMemRelease)(h));
  return 0;
}

// Two pages mapped one handle each: one cuMemUnmap over both (its result), then each
// page's own (after a refused span both are still mapped; after an accepted one,
// neither is), and a sub-range of a two-page mapping (always refused).
int unmap_span() {
  CHECK_RT(cudaFree(nullptr));
  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  CUdeviceptr va = 0;
  CHECK_CU(SIMGPU_DRV(cuMemAddressReserve)(&va, 2 * kGran, 0, 0, 0));
  CUmemGenericAllocationHandle h[2] = {};
  for (int i = 0; i < 2; ++i) {
    CHECK_CU(SIMGPU_DRV(cuMemCreate)(&h[i], kGran, &prop, 0));
    CHECK_CU(SIMGPU_DRV(cuMemMap)(va + i * kGran, kGran, 0, h[i], 0));
  }
  std::printf("span=%d\n", static_cast<int>(SIMGPU_DRV(cuMemUnmap)(va, 2 * kGran)));
  for (int i = 0; i < 2; ++i) {
    std::printf("page%d=%d\n", i,
                static_cast<int>(SIMGPU_DRV(cuMemUnmap)(va + i * kGran, kGran)));
    CHECK_CU(SIMGPU_DRV(cuMemRelease)(h[i]));
  }
  CUmemGenericAllocationHandle two = 0;
  CHECK_CU(SIMGPU_DRV(cuMemCreate)(&two, 2 * kGran, &prop, 0));
  CHECK_CU(SIMGPU_DRV(cuMemMap)(va, 2 * kGran, 0, two, 0));
  std::printf("sub_range=%d\n", static_cast<int>(SIMGPU_DRV(cuMemUnmap)(va, kGran)));
  CHECK_CU(SIMGPU_DRV(cuMemUnmap)(va, 2 * kGran));
  CHECK_CU(SIMGPU_DRV(cuMemRelease)(two));
  CHECK_CU(SIMGPU_DRV(cuMemAddressFree)(va, 2 * kGran));
  return 0;
}

// A managed buffer read by a kernel queued behind the long one on stream s, then
// discarded on another stream (Note [Discards] in tests/simgpu/driver/managed.h):
// unordered, a race; after an event of s, none, and the next read finds the poison.
int discard_managed(bool ordered) {
  chase_setup c;
  if (int r = c.init()) return r;
  int* m = nullptr;
  constexpr int n = 256;
  CHECK_RT(cudaMallocManaged(&m, n * sizeof(int)));
  for (int i = 0; i < n; ++i) m[i] = i;
  cudaStream_t other = nullptr;
  CHECK_RT(cudaStreamCreateWithFlags(&other, cudaStreamNonBlocking));
  CHECK_RT(c.long_work());
  int* out = nullptr;
  CHECK_RT(cudaMalloc(&out, n * sizeof(int)));
  int lo = 0, count = n;
  void* args[] = {&m, &lo, &count, &out};
  CHECK_RT(cudaLaunchKernel(reinterpret_cast<const void*>(&range_read_kernel), dim3(1),
                            dim3(n), args, 0, c.s));
  if (ordered) {
    cudaEvent_t e = nullptr;
    CHECK_RT(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
    CHECK_RT(cudaEventRecord(e, c.s));
    CHECK_RT(cudaStreamWaitEvent(other, e, 0));
  }
  CUdeviceptr ptr = reinterpret_cast<CUdeviceptr>(m);
  size_t size = n * sizeof(int);
  CHECK_CU(SIMGPU_DRV(cuMemDiscardBatchAsync)(&ptr, &size, 1, 0, other));
  CHECK_RT(cudaDeviceSynchronize());
  std::printf("after_discard=%d\n", m[5]);
  return 0;
}

int run_scenario(const std::string& name) {
  if (name == "discard") return discard_managed(false);
  if (name == "discard_after_event") return discard_managed(true);
  if (name == "unmap_span") return unmap_span();
  if (name == "unmap") return unmap_unordered();
  if (name == "unmap_after_event") return unmap_after_event();
  if (name == "set_access") return set_access_unordered();
  if (name == "set_access_after_sync") return set_access_after_sync();
  if (name == "graph_unmap") return graph_unmap_unordered(false);
  if (name == "graph_unmap_after_sync") return graph_unmap_unordered(true);
  if (name == "stray_write") return stray_write_unordered();
  if (name == "unmap_waits") return unmap_waits_but_races();
  if (name == "host_vmm_refused") return host_vmm_refused();
  if (name == "reach_exact") return reach_exact(512);
  if (name == "reach_exact_overlap") return reach_exact(8);
  if (name == "reach_stray") return reach_stray();
  if (name == "reach_read_then_write") return reach_read_then_write();
  if (name == "reach_freed") return reach_freed();
  std::fprintf(stderr, "unknown scenario %s\n", name.c_str());
  return 20;
}

std::string g_self;

simgpu_test::process_result scenario(const std::string& name,
                                     const simgpu_test::env_settings& env = {}) {
  return simgpu_test::run_process({g_self, "--scenario", name}, env);
}

bool has(const std::string& text, const std::string& what) {
  return text.find(what) != std::string::npos;
}

// The model file of this run, with `key`'s line replaced by `line` (or dropped when
// line is empty), written to a temporary file whose path is answered.
std::string model_with(const std::string& key, const std::string& line) {
  auto m = simgpu_test::device_model::load("h100-pcie");
  std::ifstream in(m.path());
  std::string path = testing::TempDir() + "simgpu_" + key + ".model";
  std::ofstream out(path);
  std::string l;
  while (std::getline(in, l)) {
    std::string head = l.substr(0, l.find('='));
    head.erase(head.find_last_not_of(" \t") + 1);
    if (head == key) {
      if (!line.empty()) out << line << "\n";
    } else {
      out << l << "\n";
    }
  }
  return path;
}

const char* kUnmapRace = "is unordered with <cuMemUnmap by the host>";

// Each race test also runs the same program with the wait that orders it: the pair
// fails without the recording of reached pages (no race at all) and with a
// detector that reports ordered accesses.
TEST(Reached, ChasedPageUnmappedWithoutWaitingRaces) {
  auto r = scenario("unmap", {{"SIMGPU_RACE", "report"}});
  EXPECT_FALSE(r.signaled) << simgpu_test::describe(r);
  EXPECT_EQ(r.exit_code, 3) << simgpu_test::describe(r);
  EXPECT_TRUE(has(r.err, "simgpu: race on [0x")) << r.err;
  EXPECT_TRUE(has(r.err, "<read by kernel '")) << r.err;
  EXPECT_TRUE(has(r.err, "chase_read_kernel")) << r.err;
  EXPECT_TRUE(has(r.err, kUnmapRace)) << r.err;
  auto ok = scenario("unmap_after_event", {{"SIMGPU_RACE", "abort"}});
  EXPECT_FALSE(ok.signaled) << simgpu_test::describe(ok);
  EXPECT_EQ(ok.exit_code, 0) << "after an event wait: " << simgpu_test::describe(ok);
  EXPECT_FALSE(has(ok.err, "race on")) << ok.err;
}

TEST(Reached, ChasedPageUnmappedWithoutWaitingAbortsInAbortMode) {
  auto r = scenario("unmap", {{"SIMGPU_RACE", "abort"}});
  EXPECT_TRUE(r.signaled) << simgpu_test::describe(r);
  EXPECT_EQ(r.signal, SIGABRT) << simgpu_test::describe(r);
  EXPECT_TRUE(has(r.err, "chase_read_kernel")) << r.err;
  EXPECT_TRUE(has(r.err, kUnmapRace)) << r.err;
}

TEST(Reached, WriteAccessTakenFromAChasedPageWithoutWaitingRaces) {
  auto r = scenario("set_access", {{"SIMGPU_RACE", "abort"}});
  EXPECT_TRUE(r.signaled) << simgpu_test::describe(r);
  EXPECT_TRUE(has(r.err, "<write by kernel '")) << r.err;
  EXPECT_TRUE(has(r.err, "chase_add_kernel")) << r.err;
  EXPECT_TRUE(has(r.err, "is unordered with <cuMemSetAccess by the host>")) << r.err;
  auto ok = scenario("set_access_after_sync", {{"SIMGPU_RACE", "abort"}});
  EXPECT_FALSE(ok.signaled) << simgpu_test::describe(ok);
  EXPECT_EQ(ok.exit_code, 0) << "after a stream synchronize: " << simgpu_test::describe(ok);
}

TEST(Reached, GraphReplayChasingAPageUnmappedWithoutWaitingRaces) {
  auto r = scenario("graph_unmap", {{"SIMGPU_RACE", "abort"}});
  EXPECT_TRUE(r.signaled) << simgpu_test::describe(r);
  EXPECT_TRUE(has(r.err, "chase_read_kernel")) << r.err;
  EXPECT_TRUE(has(r.err, kUnmapRace)) << r.err;
  auto ok = scenario("graph_unmap_after_sync", {{"SIMGPU_RACE", "abort"}});
  EXPECT_EQ(ok.exit_code, 0) << simgpu_test::describe(ok);
}

TEST(Reached, UndeclaredWriteInsideAnAllocationRacesWithADeclaredRead) {
  auto r = scenario("stray_write", {{"SIMGPU_RACE", "report"}});
  EXPECT_EQ(r.exit_code, 3) << simgpu_test::describe(r);
  EXPECT_TRUE(has(r.err, "<write by kernel '")) << r.err;
  EXPECT_TRUE(has(r.err, "stray_write_kernel")) << r.err;
  EXPECT_TRUE(has(r.err, "range_read_kernel")) << r.err;
}

// A discard writes its whole range for the race detector: the read queued before it
// on another stream, unordered, is reported; ordered by an event, nothing is, and the
// bytes read afterwards are no longer the old ones.
TEST(Reached, AManagedBufferDiscardedUnderItsReaderRaces) {
  auto r = scenario("discard", {{"SIMGPU_RACE", "report"}});
  EXPECT_EQ(r.exit_code, 3) << simgpu_test::describe(r);
  EXPECT_TRUE(has(r.err, "<read by kernel '")) << r.err;
  EXPECT_TRUE(has(r.err, "range_read_kernel")) << r.err;
  EXPECT_TRUE(has(r.err, "discard on")) << r.err;
  auto ok = scenario("discard_after_event", {{"SIMGPU_RACE", "abort"}});
  EXPECT_EQ(ok.exit_code, 0) << simgpu_test::describe(ok);
  EXPECT_FALSE(has(ok.err, "race on")) << ok.err;
  EXPECT_FALSE(has(ok.out, "after_discard=5")) << ok.out;
  EXPECT_TRUE(has(ok.out, "after_discard=")) << ok.out;
}

// simgpuReach records the exact range: a read of other bytes of the same page on
// another stream is no race, a read of the same bytes is.
TEST(Reached, DeclaredReachIsRecordedExactly) {
  auto ok = scenario("reach_exact", {{"SIMGPU_RACE", "abort"}});
  EXPECT_FALSE(ok.signaled) << simgpu_test::describe(ok);
  EXPECT_EQ(ok.exit_code, 0) << simgpu_test::describe(ok);
  EXPECT_FALSE(has(ok.err, "race on")) << ok.err;
  auto r = scenario("reach_exact_overlap", {{"SIMGPU_RACE", "report"}});
  EXPECT_EQ(r.exit_code, 3) << simgpu_test::describe(r);
  EXPECT_TRUE(has(r.err, "<write by kernel '")) << r.err;
  EXPECT_TRUE(has(r.err, "reach_write_kernel")) << r.err;
  EXPECT_TRUE(has(r.err, "range_read_kernel")) << r.err;
}

// Declaring a range grants nothing beyond it: an undeclared write to another page,
// or a write to a range declared as read, still faults and is recorded by the page.
TEST(Reached, AccessesBeyondADeclaredReachStillFaultAndRace) {
  auto r = scenario("reach_stray", {{"SIMGPU_RACE", "report"}});
  EXPECT_EQ(r.exit_code, 3) << simgpu_test::describe(r);
  EXPECT_TRUE(has(r.err, "<write by kernel '")) << r.err;
  EXPECT_TRUE(has(r.err, "reach_stray_kernel")) << r.err;
  EXPECT_TRUE(has(r.err, "range_read_kernel")) << r.err;
  auto w = scenario("reach_read_then_write", {{"SIMGPU_RACE", "report"}});
  EXPECT_EQ(w.exit_code, 3) << simgpu_test::describe(w);
  EXPECT_TRUE(has(w.err, "<write by kernel '")) << w.err;
  EXPECT_TRUE(has(w.err, "reach_read_then_write_kernel")) << w.err;
}

// A declaration of memory the device may not use is an illegal access.
TEST(Reached, DeclaredReachOfFreedMemoryIsAnIllegalAccess) {
  auto r = scenario("reach_freed", {{"SIMGPU_RACE", "report"}});
  EXPECT_FALSE(r.signaled) << simgpu_test::describe(r);
  EXPECT_EQ(r.exit_code, 0) << simgpu_test::describe(r);
  EXPECT_TRUE(has(r.err, "reach_write_kernel")) << r.err;
  EXPECT_TRUE(has(r.err, "' accessed 0x")) << r.err;
}

// SIMGPU_VMM_WAIT=1: the unmap costs the wait for the ~20 ms kernel, and the race is
// still reported (a wait in time is no ordering). With 0 it costs only its figure.
TEST(Reached, VmmWaitWaitsForTheDeviceButOrdersNothing) {
  auto waiting = scenario("unmap_waits", {{"SIMGPU_RACE", "report"}, {"SIMGPU_VMM_WAIT", "1"}});
  auto quick = scenario("unmap_waits", {{"SIMGPU_RACE", "report"}, {"SIMGPU_VMM_WAIT", "0"}});
  EXPECT_EQ(waiting.exit_code, 3) << simgpu_test::describe(waiting);
  EXPECT_TRUE(has(waiting.err, kUnmapRace)) << waiting.err;
  EXPECT_EQ(quick.exit_code, 3) << simgpu_test::describe(quick);
  double waited = std::stod(simgpu_test::field(waiting.out, "unmap_host_ns"));
  double fast = std::stod(simgpu_test::field(quick.out, "unmap_host_ns"));
  EXPECT_GT(waited, 10e6) << "the unmap waited for about 20 ms of kernel";
  EXPECT_LT(fast, 1e6);
  auto bad = scenario("unmap_waits", {{"SIMGPU_VMM_WAIT", "sometimes"}});
  EXPECT_EQ(bad.exit_code, 2) << simgpu_test::describe(bad);
  EXPECT_TRUE(has(bad.err, "SIMGPU_VMM_WAIT='sometimes' is not valid")) << bad.err;
}

// See Note [One unmap over several mappings] in tests/simgpu/driver/vmm.cc.
TEST(Reached, UnmapSpansWholeMappingsUnlessTold) {
  const std::string invalid = std::to_string(CUDA_ERROR_INVALID_VALUE);
  auto spans = scenario("unmap_span");
  ASSERT_EQ(spans.exit_code, 0) << simgpu_test::describe(spans);
  EXPECT_EQ(simgpu_test::field(spans.out, "span"), "0") << spans.out;
  EXPECT_EQ(simgpu_test::field(spans.out, "page0"), invalid) << spans.out;  // already unmapped
  EXPECT_EQ(simgpu_test::field(spans.out, "sub_range"), invalid) << spans.out;
  auto strict = scenario("unmap_span", {{"SIMGPU_VMM_UNMAP_SPANS", "0"}});
  ASSERT_EQ(strict.exit_code, 0) << simgpu_test::describe(strict);
  EXPECT_EQ(simgpu_test::field(strict.out, "span"), invalid) << strict.out;
  EXPECT_EQ(simgpu_test::field(strict.out, "page0"), "0") << strict.out;  // nothing unmapped
  EXPECT_EQ(simgpu_test::field(strict.out, "page1"), "0") << strict.out;
  EXPECT_EQ(simgpu_test::field(strict.out, "sub_range"), invalid) << strict.out;
  // The model's key says the same; the variable overrides it.
  std::string path = model_with("vmm_waits_for_device",
                                "vmm_waits_for_device = 0\nvmm_unmap_spans_mappings = 0");
  auto keyed = scenario("unmap_span", {{"SIMGPU_DEVICE", path}});
  EXPECT_EQ(simgpu_test::field(keyed.out, "span"), invalid) << keyed.out;
  auto overridden =
      scenario("unmap_span", {{"SIMGPU_DEVICE", path}, {"SIMGPU_VMM_UNMAP_SPANS", "1"}});
  EXPECT_EQ(simgpu_test::field(overridden.out, "span"), "0") << overridden.out;
  auto bad = scenario("unmap_span", {{"SIMGPU_VMM_UNMAP_SPANS", "maybe"}});
  EXPECT_EQ(bad.exit_code, 2) << simgpu_test::describe(bad);
  EXPECT_TRUE(has(bad.err, "SIMGPU_VMM_UNMAP_SPANS='maybe' is not valid")) << bad.err;
}

TEST(Reached, ModelWithoutHostVmmRefusesHostLocatedCreate) {
  std::string path = model_with("host_vmm_supported", "host_vmm_supported = 0");
  auto r = scenario("host_vmm_refused", {{"SIMGPU_DEVICE", path}});
  EXPECT_EQ(r.exit_code, 0) << simgpu_test::describe(r);
  EXPECT_EQ(simgpu_test::field(r.out, "host_vmm_supported"), "0") << r.out;
  EXPECT_EQ(simgpu_test::field(r.out, "host_create"), std::to_string(CUDA_ERROR_NOT_SUPPORTED))
      << r.out;
  auto shipped = scenario("host_vmm_refused");
  EXPECT_EQ(simgpu_test::field(shipped.out, "host_vmm_supported"), "1") << shipped.out;
  EXPECT_EQ(simgpu_test::field(shipped.out, "host_create"), "0") << shipped.out;
}

// A model lacking a cost key, or giving a malformed one, is refused at load with the
// key's name (exit status 2).
TEST(Reached, ModelWithAMissingOrMalformedCostIsRefused) {
  for (const char* key : {"vmm_unmap_per_2mib_ns", "event_query_ns", "launch_enqueue_ns",
                          "kernel_host_access_bandwidth", "vmm_waits_for_device",
                          "host_vmm_supported"}) {
    auto missing = scenario("host_vmm_refused", {{"SIMGPU_DEVICE", model_with(key, "")}});
    EXPECT_EQ(missing.exit_code, 2) << key << ": " << simgpu_test::describe(missing);
    EXPECT_TRUE(has(missing.err, std::string("missing key '") + key + "'")) << missing.err;
    auto bad = scenario("host_vmm_refused",
                        {{"SIMGPU_DEVICE", model_with(key, std::string(key) + " = fast")}});
    EXPECT_EQ(bad.exit_code, 2) << key << ": " << simgpu_test::describe(bad);
    EXPECT_TRUE(has(bad.err, key)) << bad.err;
  }
}

}  // namespace

int main(int argc, char** argv) {
  // The child is this program again (run_process resolves no relative path).
  char self[4096] = {};
  ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
  g_self = n > 0 ? std::string(self, static_cast<size_t>(n)) : std::string(argv[0]);
  if (argc == 3 && std::string(argv[1]) == "--scenario") return run_scenario(argv[2]);
  testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
