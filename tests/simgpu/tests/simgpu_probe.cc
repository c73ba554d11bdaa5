// simgpu_probe: one small CUDA program per behaviour that ends or marks a process
// (a kernel touching freed or unmapped memory, host code touching device memory,
// the race detector, malformed settings, the exit report). test_process.cc runs it
// as a subprocess with chosen SIMGPU_* variables and checks its exit status, stdout
// and stderr. Usage: simgpu_probe <scenario>; it prints `key=value` facts on stdout
// (addresses as 0x..., CUDA status codes as numbers) and returns 0 when every call
// behaved as the scenario's comment says it must get through; simgpu's own verdicts
// (aborts, exit status 3) are left to the caller to check.
#include <cuda.h>
#include <cuda_runtime.h>
#include <dlfcn.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <string>

#include "simgpu/kernel.h"

namespace {

__global__ void probe_read_freed_kernel(const float* src, float* dst, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) dst[i] = src[i] * 2.0f;
}
SIMGPU_KERNEL(probe_read_freed_kernel);

// Footprints name exactly the bytes touched, so the race detector sees partial
// overlaps as they are.
__global__ void race_writer_kernel(int* p, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) p[i] = i;
}
SIMGPU_KERNEL_FOOTPRINT(race_writer_kernel, [](simgpu::footprint& fp, int* p, int n) {
  fp.write(p, static_cast<std::size_t>(n));
});

__global__ void race_reader_kernel(const int* p, int* out, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = p[i] + 1;
}
SIMGPU_KERNEL_FOOTPRINT(race_reader_kernel,
                        [](simgpu::footprint& fp, const int* p, int* out, int n) {
                          fp.read(p, static_cast<std::size_t>(n));
                          fp.write(out, static_cast<std::size_t>(n));
                        });

__global__ void probe_managed_sum_kernel(const float* x, float* out, int n) {
  if (blockIdx.x == 0 && threadIdx.x == 0) {
    float s = 0;
    for (int i = 0; i < n; ++i) s += x[i];
    out[0] = s;
  }
}
SIMGPU_KERNEL_FOOTPRINT(probe_managed_sum_kernel,
                        [](simgpu::footprint& fp, const float* x, float* out, int n) {
                          fp.read(x, static_cast<std::size_t>(n));
                          fp.write(out, 1);
                        });

// Reads through a pointer stored in device memory: its footprint cannot name the
// buffer it reads, so only the access itself can be checked.
__global__ void probe_pointer_chase_kernel(const float* const* table, float* dst, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) dst[i] = table[0][i];
}
SIMGPU_KERNEL_FOOTPRINT(probe_pointer_chase_kernel,
                        [](simgpu::footprint& fp, const float* const* table, float* dst, int n) {
                          fp.read(table, 1);
                          fp.write(dst, static_cast<std::size_t>(n));
                        });

int g_failures = 0;

void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) {
    std::printf("failed=%s code=%d\n", what, static_cast<int>(e));
    ++g_failures;
  }
}
#define CHECK(expr) check((expr), #expr)

void launch(const void* fn, void** args, int n, cudaStream_t s) {
  CHECK(cudaLaunchKernel(fn, dim3((n + 127) / 128), dim3(128), args, 0, s));
}

void write_ints(int* p, int n, cudaStream_t s) {
  void* args[] = {&p, &n};
  launch(reinterpret_cast<const void*>(&race_writer_kernel), args, n, s);
}

void read_ints(const int* p, int* out, int n, cudaStream_t s) {
  void* args[] = {&p, &out, &n};
  launch(reinterpret_cast<const void*>(&race_reader_kernel), args, n, s);
}

// ---- Scenarios --------------------------------------------------------------------

// A kernel reads a buffer freed before the launch. Prints the freed address, the
// launch, synchronize and later-call statuses.
int kernel_after_free() {
  const int n = 1024;
  float *src = nullptr, *dst = nullptr;
  CHECK(cudaMalloc(&src, n * sizeof(float)));
  CHECK(cudaMalloc(&dst, n * sizeof(float)));
  CHECK(cudaMemset(src, 0, n * sizeof(float)));
  CHECK(cudaFree(src));
  std::printf("ptr=%p\n", static_cast<void*>(src));
  std::fflush(stdout);
  int nn = n;
  void* args[] = {&src, &dst, &nn};
  cudaError_t launched = cudaLaunchKernel(reinterpret_cast<const void*>(&probe_read_freed_kernel),
                                          dim3(n / 128), dim3(128), args, 0, nullptr);
  cudaError_t synced = cudaDeviceSynchronize();
  void* later = nullptr;
  cudaError_t malloc_after = cudaMalloc(&later, 256);
  cudaError_t sync_again = cudaDeviceSynchronize();
  std::printf("launch=%d sync=%d malloc_after=%d sync_again=%d\n", launched, synced,
              malloc_after, sync_again);
  return 0;
}

// A kernel reaches a freed buffer through a pointer held in device memory.
int kernel_pointer_chase_freed() {
  const int n = 1024;
  float *src = nullptr, *dst = nullptr;
  const float** table = nullptr;
  CHECK(cudaMalloc(&src, n * sizeof(float)));
  CHECK(cudaMalloc(&dst, n * sizeof(float)));
  CHECK(cudaMalloc(&table, sizeof(float*)));
  CHECK(cudaMemcpy(table, &src, sizeof src, cudaMemcpyHostToDevice));
  CHECK(cudaFree(src));
  std::printf("ptr=%p\n", static_cast<void*>(src));
  std::fflush(stdout);
  int nn = n;
  void* args[] = {&table, &dst, &nn};
  cudaError_t launched = cudaLaunchKernel(
      reinterpret_cast<const void*>(&probe_pointer_chase_kernel), dim3(n / 128), dim3(128), args,
      0, nullptr);
  cudaError_t synced = cudaDeviceSynchronize();
  std::printf("launch=%d sync=%d\n", launched, synced);
  return 0;
}

// A kernel reads device memory that a VMM range had mapped and no longer has.
int kernel_unmapped_vmm() {
  CHECK(cudaFree(nullptr));  // creates the primary context
  auto get = [](const char* name) {
    void* lib = dlopen("libcuda.so.1", RTLD_NOW);
    return lib ? dlsym(lib, name) : nullptr;
  };
  auto reserve = reinterpret_cast<decltype(&cuMemAddressReserve)>(get("cuMemAddressReserve"));
  auto create = reinterpret_cast<decltype(&cuMemCreate)>(get("cuMemCreate"));
  auto map = reinterpret_cast<decltype(&cuMemMap)>(get("cuMemMap"));
  auto unmap = reinterpret_cast<decltype(&cuMemUnmap)>(get("cuMemUnmap"));
  auto access = reinterpret_cast<decltype(&cuMemSetAccess)>(get("cuMemSetAccess"));
  auto release = reinterpret_cast<decltype(&cuMemRelease)>(get("cuMemRelease"));
  if (!reserve || !create || !map || !unmap || !access || !release) {
    std::printf("failed=driver-lookup\n");
    return 1;
  }
  const size_t size = 2u << 20;
  CUdeviceptr va = 0;
  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = 0;
  CUmemGenericAllocationHandle h = 0;
  CUmemAccessDesc desc{};
  desc.location = prop.location;
  desc.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  if (reserve(&va, size, 0, 0, 0) != CUDA_SUCCESS || create(&h, size, &prop, 0) != CUDA_SUCCESS ||
      map(va, size, 0, h, 0) != CUDA_SUCCESS || access(va, size, &desc, 1) != CUDA_SUCCESS ||
      unmap(va, size) != CUDA_SUCCESS || release(h) != CUDA_SUCCESS) {
    std::printf("failed=vmm-setup\n");
    return 1;
  }
  float* src = reinterpret_cast<float*>(va);
  float* dst = nullptr;
  CHECK(cudaMalloc(&dst, 1024 * sizeof(float)));
  std::printf("ptr=%p\n", static_cast<void*>(src));
  std::fflush(stdout);
  int n = 1024;
  void* args[] = {&src, &dst, &n};
  cudaError_t launched = cudaLaunchKernel(reinterpret_cast<const void*>(&probe_read_freed_kernel),
                                          dim3(8), dim3(128), args, 0, nullptr);
  cudaError_t synced = cudaDeviceSynchronize();
  std::printf("launch=%d sync=%d\n", launched, synced);
  return 0;
}

// Host code loads from (or stores to) a live cudaMalloc buffer. simgpu must stop the
// process; reaching the final printf means it did not.
int host_touch(bool write) {
  int* p = nullptr;
  CHECK(cudaMalloc(&p, 4096));
  std::printf("ptr=%p\n", static_cast<void*>(p + 3));
  std::fflush(stdout);
  volatile int* v = p + 3;
  if (write) {
    *v = 42;
  } else {
    int x = *v;
    std::printf("read=%d\n", x);
  }
  std::printf("survived=1\n");
  return 0;
}

struct race_setup {
  int* buf = nullptr;
  int* out = nullptr;
  cudaStream_t a = nullptr, b = nullptr;
  race_setup(unsigned flags = cudaStreamNonBlocking) {
    CHECK(cudaMalloc(&buf, 1024 * sizeof(int)));
    CHECK(cudaMalloc(&out, 1024 * sizeof(int)));
    CHECK(cudaDeviceSynchronize());
    CHECK(cudaStreamCreateWithFlags(&a, flags));
    CHECK(cudaStreamCreateWithFlags(&b, flags));
    std::printf("buf=%p\n", static_cast<void*>(buf));
  }
  int finish() {
    CHECK(cudaDeviceSynchronize());
    CHECK(cudaStreamDestroy(a));
    CHECK(cudaStreamDestroy(b));
    CHECK(cudaFree(buf));
    CHECK(cudaFree(out));
    std::fflush(stdout);
    return g_failures == 0 ? 0 : 1;
  }
};

// Write ints [0,100) on stream a, read ints [50,150) on stream b, nothing between:
// a race on bytes [200,400) of buf.
int race_unordered() {
  race_setup r;
  write_ints(r.buf, 100, r.a);
  read_ints(r.buf + 50, r.out, 100, r.b);
  return r.finish();
}

// The same pair, ordered by an event recorded after the write: no race.
int race_event_ordered() {
  race_setup r;
  cudaEvent_t e;
  CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
  write_ints(r.buf, 100, r.a);
  CHECK(cudaEventRecord(e, r.a));
  CHECK(cudaStreamWaitEvent(r.b, e, 0));
  read_ints(r.buf + 50, r.out, 100, r.b);
  CHECK(cudaEventDestroy(e));
  return r.finish();
}

// An event recorded before the write orders nothing that matters: a race.
int race_event_too_early() {
  race_setup r;
  cudaEvent_t e;
  CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
  CHECK(cudaEventRecord(e, r.a));
  write_ints(r.buf, 100, r.a);
  CHECK(cudaStreamWaitEvent(r.b, e, 0));
  read_ints(r.buf + 50, r.out, 100, r.b);
  CHECK(cudaEventDestroy(e));
  return r.finish();
}

// The host waits for stream a before enqueuing the read: ordered, no race.
int race_host_synchronized() {
  race_setup r;
  write_ints(r.buf, 100, r.a);
  CHECK(cudaStreamSynchronize(r.a));
  read_ints(r.buf + 50, r.out, 100, r.b);
  return r.finish();
}

// Both on one stream: ordered, no race.
int race_same_stream() {
  race_setup r;
  write_ints(r.buf, 100, r.a);
  read_ints(r.buf + 50, r.out, 100, r.a);
  return r.finish();
}

// Adjacent, non-overlapping byte ranges on two streams: no race.
int race_adjacent() {
  race_setup r;
  write_ints(r.buf, 100, r.a);
  read_ints(r.buf + 100, r.out, 100, r.b);
  return r.finish();
}

// Two reads of the same bytes on two streams: no race.
int race_read_read() {
  race_setup r;
  CHECK(cudaMemset(r.buf, 0, 1024 * sizeof(int)));
  CHECK(cudaDeviceSynchronize());
  int* out2 = nullptr;
  CHECK(cudaMalloc(&out2, 1024 * sizeof(int)));
  read_ints(r.buf, r.out, 100, r.a);
  read_ints(r.buf, out2, 100, r.b);
  CHECK(cudaDeviceSynchronize());
  CHECK(cudaFree(out2));
  return r.finish();
}

// An async host-to-device copy on stream a, a kernel reading it on stream b: a race.
int race_copy_kernel() {
  race_setup r;
  int* host = nullptr;
  CHECK(cudaMallocHost(&host, 1024 * sizeof(int)));
  for (int i = 0; i < 1024; ++i) host[i] = i;
  CHECK(cudaMemcpyAsync(r.buf, host, 100 * sizeof(int), cudaMemcpyHostToDevice, r.a));
  read_ints(r.buf + 50, r.out, 100, r.b);
  int rc = r.finish();
  CHECK(cudaFreeHost(host));
  return rc;
}

// Blocking streams are ordered with the legacy default stream (CUDA semantics): a
// write on blocking stream a then a read on stream 0 is not a race.
int race_legacy_default_blocking() {
  race_setup r(cudaStreamDefault);
  write_ints(r.buf, 100, r.a);
  read_ints(r.buf + 50, r.out, 100, nullptr);
  return r.finish();
}

// A non-blocking stream is not ordered with the legacy default stream: a race.
int race_legacy_default_nonblocking() {
  race_setup r(cudaStreamNonBlocking);
  write_ints(r.buf, 100, r.a);
  read_ints(r.buf + 50, r.out, 100, nullptr);
  return r.finish();
}

// Managed memory, 1 MiB: written by the host, read whole by a kernel (all pages to
// the device), 4 pages 256 KiB apart touched by the host (back to the host), then
// the whole range prefetched to the device (those 4 pages again). Checked through
// SIMGPU_REPORT's migration counters; prints the sum the kernel computed.
int managed_migrations() {
  const int n = (1 << 20) / sizeof(float);
  float* x = nullptr;
  float* out = nullptr;
  CHECK(cudaMallocManaged(&x, n * sizeof(float)));
  CHECK(cudaMalloc(&out, sizeof(float)));
  for (int i = 0; i < n; ++i) x[i] = 1.0f;
  int nn = n;
  void* args[] = {&x, &out, &nn};
  CHECK(cudaLaunchKernel(reinterpret_cast<const void*>(&probe_managed_sum_kernel), dim3(1),
                         dim3(1), args, 0, nullptr));
  CHECK(cudaDeviceSynchronize());
  for (int k = 0; k < 4; ++k) x[k * (n / 4)] = 2.0f;
  cudaMemLocation loc{};
  loc.type = cudaMemLocationTypeDevice;
  loc.id = 0;
  CHECK(cudaMemPrefetchAsync(x, n * sizeof(float), loc, 0, nullptr));
  CHECK(cudaDeviceSynchronize());
  float sum = 0;
  CHECK(cudaMemcpy(&sum, out, sizeof sum, cudaMemcpyDeviceToHost));
  std::printf("sum=%.0f\n", sum);
  CHECK(cudaFree(out));
  CHECK(cudaFree(x));
  return g_failures == 0 ? 0 : 1;
}

// The host waits on an event recorded after the write before enqueuing the read:
// ordered, no race.
int race_event_host_synchronized() {
  race_setup r;
  cudaEvent_t e;
  CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
  write_ints(r.buf, 100, r.a);
  CHECK(cudaEventRecord(e, r.a));
  CHECK(cudaEventSynchronize(e));
  read_ints(r.buf + 50, r.out, 100, r.b);
  CHECK(cudaEventDestroy(e));
  return r.finish();
}

// A kernel on a non-blocking stream writes; a synchronous cudaMemcpy (legacy
// stream, which does not wait for non-blocking streams) reads the same bytes: a race.
int race_kernel_sync_memcpy() {
  race_setup r;
  write_ints(r.buf, 100, r.a);
  int host[100] = {};
  CHECK(cudaMemcpy(host, r.buf + 50, sizeof host, cudaMemcpyDeviceToHost));
  return r.finish();
}

// A kernel reads a VMM range that is mapped but was never given device access.
int kernel_vmm_no_access() {
  CHECK(cudaFree(nullptr));
  void* lib = dlopen("libcuda.so.1", RTLD_NOW);
  auto reserve =
      reinterpret_cast<decltype(&cuMemAddressReserve)>(dlsym(lib, "cuMemAddressReserve"));
  auto create = reinterpret_cast<decltype(&cuMemCreate)>(dlsym(lib, "cuMemCreate"));
  auto map = reinterpret_cast<decltype(&cuMemMap)>(dlsym(lib, "cuMemMap"));
  if (!reserve || !create || !map) {
    std::printf("failed=driver-lookup\n");
    return 1;
  }
  const size_t size = 2u << 20;
  CUdeviceptr va = 0;
  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  CUmemGenericAllocationHandle h = 0;
  if (reserve(&va, size, 0, 0, 0) != CUDA_SUCCESS || create(&h, size, &prop, 0) != CUDA_SUCCESS ||
      map(va, size, 0, h, 0) != CUDA_SUCCESS) {
    std::printf("failed=vmm-setup\n");
    return 1;
  }
  float* src = reinterpret_cast<float*>(va);
  float* dst = nullptr;
  CHECK(cudaMalloc(&dst, 1024 * sizeof(float)));
  std::printf("ptr=%p\n", static_cast<void*>(src));
  std::fflush(stdout);
  int n = 1024;
  void* args[] = {&src, &dst, &n};
  cudaError_t launched = cudaLaunchKernel(reinterpret_cast<const void*>(&probe_read_freed_kernel),
                                          dim3(8), dim3(128), args, 0, nullptr);
  cudaError_t synced = cudaDeviceSynchronize();
  std::printf("launch=%d sync=%d\n", launched, synced);
  return 0;
}

// Device name and memory as the runtime reports them.
int props() {
  cudaDeviceProp p{};
  CHECK(cudaGetDeviceProperties(&p, 0));
  size_t free_b = 0, total_b = 0;
  CHECK(cudaMemGetInfo(&free_b, &total_b));
  std::printf("name=%s\ntotalGlobalMem=%zu\nmeminfo_total=%zu\n", p.name, p.totalGlobalMem,
              total_b);
  std::printf("sm_count=%d\ncompute_capability=%d.%d\nconcurrentManagedAccess=%d\n",
              p.multiProcessorCount, p.major, p.minor, p.concurrentManagedAccess);
  // Spaces in the name would cut the key=value field; print it on its own line too.
  std::printf("NAME:%s\n", p.name);
  return g_failures == 0 ? 0 : 1;
}

// Peak device memory of 3 MiB + 5 MiB live together, then a kernel; for
// SIMGPU_REPORT=1.
int report() {
  void *a = nullptr, *b = nullptr;
  CHECK(cudaMalloc(&a, 3u << 20));
  CHECK(cudaMalloc(&b, 5u << 20));
  CHECK(cudaFree(a));
  CHECK(cudaFree(b));
  void* c = nullptr;
  CHECK(cudaMalloc(&c, 1u << 20));
  CHECK(cudaFree(c));
  std::fflush(stdout);
  return g_failures == 0 ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  static const std::map<std::string, std::function<int()>> scenarios = {
      {"kernel-after-free", kernel_after_free},
      {"kernel-unmapped-vmm", kernel_unmapped_vmm},
      {"kernel-pointer-chase-freed", kernel_pointer_chase_freed},
      {"host-read", [] { return host_touch(false); }},
      {"host-write", [] { return host_touch(true); }},
      {"race-unordered", race_unordered},
      {"race-event-ordered", race_event_ordered},
      {"race-event-too-early", race_event_too_early},
      {"race-host-synchronized", race_host_synchronized},
      {"race-same-stream", race_same_stream},
      {"race-adjacent", race_adjacent},
      {"race-read-read", race_read_read},
      {"race-copy-kernel", race_copy_kernel},
      {"race-legacy-default-blocking", race_legacy_default_blocking},
      {"race-legacy-default-nonblocking", race_legacy_default_nonblocking},
      {"race-event-host-synchronized", race_event_host_synchronized},
      {"race-kernel-sync-memcpy", race_kernel_sync_memcpy},
      {"kernel-vmm-no-access", kernel_vmm_no_access},
      {"props", props},
      {"report", report},
      {"managed-migrations", managed_migrations},
  };
  if (argc != 2 || scenarios.count(argv[1]) == 0) {
    std::fprintf(stderr, "usage: simgpu_probe <scenario>; scenarios:");
    for (const auto& [name, fn] : scenarios) std::fprintf(stderr, " %s", name.c_str());
    std::fprintf(stderr, "\n");
    return 64;
  }
  int rc = scenarios.at(argv[1])();
  std::fflush(stdout);
  return rc;
}
