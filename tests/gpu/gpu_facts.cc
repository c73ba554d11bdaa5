// gpu_facts: the figures of one GPU that oversub's schedules depend on, as one JSON
// object on stdout (step 1 of scripts/gpu-validate).
//
// - the device (name, memory, SMs, compute capability), driver and runtime versions;
// - pinned host<->device bandwidth: cudaMemcpyAsync of --mib MiB between
//   cudaMallocHost and cudaMalloc memory, timed with events, median of --reps; and
//   both directions at once on two streams (pinned_both_ways);
// - VMM latency: cuMemCreate / cuMemMap / cuMemSetAccess / cuMemUnmap / cuMemRelease
//   of one granule and of 64 MiB, median of --vmm-iters, host wall clock. The driver
//   functions come from cudaGetDriverEntryPointByVersion: this program links only the
//   runtime, never libcuda (the same way oversub reaches the driver);
// - VMM calls (vmm_calls): p50/p99 of each of those calls for one 2 MiB page and for
//   16 pages as 16 calls or as one, and for 16 one-page handles with one set access
//   and one unmap over their span, with the GPU idle and while a spin kernel runs on
//   another stream, and whether each call returned before that kernel ended;
// - managed prefetch bandwidth: cudaMemPrefetchAsync of --mib MiB of managed memory
//   to the device and back to the host, timed with events, median of --reps;
// - event call latency (events), the empty-kernel launch rate (launch_rate),
//   host-located VMM memory (host_vmm) and managed-memory fault throughput
//   (managed_faults).
//
// The same file builds with nvcc (`-x cu`, tests/gpu/nvcc_include first on the
// include path) for a GPU and with the host compiler against simgpu's libcudart for
// `gpu-validate --sim`, where event times are simgpu's virtual time and the kernels
// run on the host with a footprint (simgpu/kernel.h) that gives them their virtual
// duration. A section that fails records "error" and the program goes on; the exit
// status is 1 only when no device could be queried.
#include <cuda.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "simgpu/kernel.h"

#include "spin_kernel.cuh"

// The launch-rate kernel: one block of one thread that does nothing.
__global__ void facts_empty() {}
SIMGPU_KERNEL(facts_empty);

// Writes word i * stride_words for i < count: one word per managed page group, so
// every group faults once. The footprint declares the whole buffer written, which is
// what a GPU migrates for it (the fault granularity is at least the stride).
__global__ void facts_touch(unsigned* p, unsigned long long count, unsigned long long stride_words) {
  const unsigned long long i = static_cast<unsigned long long>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < count) p[i * stride_words] = static_cast<unsigned>(i);
}
SIMGPU_KERNEL_FOOTPRINT(facts_touch, [](simgpu::footprint& fp, unsigned* p, unsigned long long count,
                                        unsigned long long stride_words) {
  fp.write(p, count * stride_words);
});

namespace {

struct options {
  size_t mib = 256;
  int reps = 5;
  int vmm_iters = 20;
  bool only_launch_rate = false;  // --only-launch-rate 1: that section alone (run under each mode)
};

std::string quote(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    if (static_cast<unsigned char>(c) >= 0x20) out += c;
  }
  return out + "\"";
}

std::string cuda_error(cudaError_t rc, const char* what) {
  return std::string(what) + ": " + cudaGetErrorName(rc);
}

double median(std::vector<double> v) {
  if (v.empty()) return 0.0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 == 1 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

std::string number_list(const std::vector<double>& v) {
  std::string out = "[";
  char buf[64];
  for (size_t i = 0; i < v.size(); ++i) {
    std::snprintf(buf, sizeof buf, "%s%.4g", i == 0 ? "" : ", ", v[i]);
    out += buf;
  }
  return out + "]";
}

// Milliseconds between two events recorded around `enqueue` on `stream`.
template <typename F>
cudaError_t time_ms(cudaStream_t stream, cudaEvent_t start, cudaEvent_t stop, F enqueue,
                    double* ms) {
  cudaError_t rc = cudaEventRecord(start, stream);
  if (rc == cudaSuccess) rc = enqueue();
  if (rc == cudaSuccess) rc = cudaEventRecord(stop, stream);
  if (rc == cudaSuccess) rc = cudaEventSynchronize(stop);
  float elapsed = 0.0f;
  if (rc == cudaSuccess) rc = cudaEventElapsedTime(&elapsed, start, stop);
  *ms = elapsed;
  return rc;
}

double gb_per_s(size_t bytes, double ms) { return ms > 0.0 ? bytes / (ms * 1e6) : 0.0; }

// `reps` rounds (after one warm-up) of copying `bytes` from host to device and back
// with cudaMemcpyDefault, each timed with events; GB/s appended to `to_device` and
// `to_host`. "" or the error, named `what`.
std::string copy_rates(int reps, cudaStream_t stream, cudaEvent_t a, cudaEvent_t b, void* device,
                       void* host, size_t bytes, const char* what, std::vector<double>& to_device,
                       std::vector<double>& to_host) {
  for (int r = -1; r < reps; ++r) {  // r == -1: warm-up
    double up = 0, down = 0;
    cudaError_t rc = time_ms(stream, a, b, [&] {
      return cudaMemcpyAsync(device, host, bytes, cudaMemcpyDefault, stream); }, &up);
    if (rc == cudaSuccess) rc = time_ms(stream, a, b, [&] {
      return cudaMemcpyAsync(host, device, bytes, cudaMemcpyDefault, stream); }, &down);
    if (rc != cudaSuccess) return cuda_error(rc, what);
    if (r >= 0) { to_device.push_back(gb_per_s(bytes, up)); to_host.push_back(gb_per_s(bytes, down)); }
  }
  return "";
}

// The nearest-rank percentile q (0 < q <= 1) of v.
double percentile(std::vector<double> v, double q) {
  if (v.empty()) return 0.0;
  std::sort(v.begin(), v.end());
  const size_t rank = static_cast<size_t>(std::ceil(q * static_cast<double>(v.size())));
  return v[std::clamp<size_t>(rank, 1, v.size()) - 1];
}

std::string p50_p99(const std::vector<double>& v) {
  char buf[96];
  std::snprintf(buf, sizeof buf, "{\"p50\": %.4g, \"p99\": %.4g}", percentile(v, 0.5),
                percentile(v, 0.99));
  return buf;
}

std::string error_json(const std::string& what) { return "{\"error\": " + quote(what) + "}"; }

std::string cu_error(CUresult rc, const char* what) {
  return std::string(what) + " " + std::to_string(static_cast<int>(rc));
}

std::string pinned_bandwidth(const options& opt, cudaStream_t stream, cudaEvent_t a,
                             cudaEvent_t b) {
  const size_t bytes = opt.mib << 20;
  void* host = nullptr;
  void* dev = nullptr;
  std::string error;
  std::vector<double> h2d, d2h;
  cudaError_t rc = cudaMallocHost(&host, bytes);
  if (rc != cudaSuccess) error = cuda_error(rc, "cudaMallocHost");
  if (error.empty() && (rc = cudaMalloc(&dev, bytes)) != cudaSuccess) error = cuda_error(rc, "cudaMalloc");
  if (error.empty()) std::memset(host, 1, bytes);
  if (error.empty()) error = copy_rates(opt.reps, stream, a, b, dev, host, bytes, "cudaMemcpyAsync", h2d, d2h);
  if (dev != nullptr) cudaFree(dev);
  if (host != nullptr) cudaFreeHost(host);
  if (!error.empty()) return "{\"error\": " + quote(error) + "}";
  char buf[256];
  std::snprintf(buf, sizeof buf, "{\"bytes\": %zu, \"reps\": %d, \"h2d_gbps\": %.4g, \"d2h_gbps\": %.4g, ",
                bytes, opt.reps, median(h2d), median(d2h));
  return buf + ("\"h2d_gbps_all\": " + number_list(h2d) + ", \"d2h_gbps_all\": " + number_list(d2h) + "}");
}

std::string managed_prefetch(const options& opt, int device, cudaStream_t stream,
                             cudaEvent_t a, cudaEvent_t b) {
  int concurrent = 0;
  cudaDeviceGetAttribute(&concurrent, cudaDevAttrConcurrentManagedAccess, device);
  if (concurrent == 0) return "{\"skipped\": \"the device has no concurrent managed access\"}";
  const size_t bytes = opt.mib << 20;
  size_t free_bytes = 0, total_bytes = 0;
  cudaError_t rc = cudaMemGetInfo(&free_bytes, &total_bytes);
  if (rc != cudaSuccess) return "{\"error\": " + quote(cuda_error(rc, "cudaMemGetInfo")) + "}";
  if (bytes * 2 > free_bytes) return "{\"skipped\": \"less than twice the buffer is free on the device\"}";
  void* p = nullptr;
  if ((rc = cudaMallocManaged(&p, bytes, cudaMemAttachGlobal)) != cudaSuccess)
    return "{\"error\": " + quote(cuda_error(rc, "cudaMallocManaged")) + "}";
  std::memset(p, 1, bytes);
  cudaMemLocation to_device{};
  to_device.type = cudaMemLocationTypeDevice;
  to_device.id = device;
  cudaMemLocation to_host{};
  to_host.type = cudaMemLocationTypeHost;
  std::string error;
  std::vector<double> up, down;
  for (int r = -1; error.empty() && r < opt.reps; ++r) {
    double ms_up = 0, ms_down = 0;
    rc = time_ms(stream, a, b, [&] { return cudaMemPrefetchAsync(p, bytes, to_device, 0, stream); },
                 &ms_up);
    if (rc == cudaSuccess)
      rc = time_ms(stream, a, b, [&] { return cudaMemPrefetchAsync(p, bytes, to_host, 0, stream); },
                   &ms_down);
    if (rc != cudaSuccess) error = cuda_error(rc, "cudaMemPrefetchAsync");
    if (r >= 0) { up.push_back(gb_per_s(bytes, ms_up)); down.push_back(gb_per_s(bytes, ms_down)); }
  }
  cudaFree(p);
  if (!error.empty()) return "{\"error\": " + quote(error) + "}";
  char buf[256];
  std::snprintf(buf, sizeof buf,
                "{\"bytes\": %zu, \"reps\": %d, \"to_device_gbps\": %.4g, \"to_host_gbps\": %.4g}",
                bytes, opt.reps, median(up), median(down));
  return buf;
}

// The driver's VMM entry points, typed from <cuda.h>'s declarations (nothing linked).
struct vmm_api {
  decltype(&cuMemGetAllocationGranularity) granularity = nullptr;
  decltype(&cuMemAddressReserve) reserve = nullptr;
  decltype(&cuMemAddressFree) address_free = nullptr;
  decltype(&cuMemCreate) create = nullptr;
  decltype(&cuMemRelease) release = nullptr;
  decltype(&cuMemMap) map = nullptr;
  decltype(&cuMemSetAccess) set_access = nullptr;
  decltype(&cuMemUnmap) unmap = nullptr;
  decltype(&cuDeviceGet) device_get = nullptr;            // host_vmm only
  decltype(&cuDeviceGetAttribute) device_attribute = nullptr;
};

template <typename T>
std::string entry_point(const char* name, T* out) {
  cudaDriverEntryPointQueryResult status = cudaDriverEntryPointSymbolNotFound;
  void* fn = nullptr;
  const cudaError_t rc = cudaGetDriverEntryPointByVersion(name, &fn, 12000, cudaEnableDefault, &status);
  if (rc != cudaSuccess || status != cudaDriverEntryPointSuccess || fn == nullptr)
    return std::string("cudaGetDriverEntryPointByVersion(") + name + "): " + cudaGetErrorName(rc);
  *out = reinterpret_cast<T>(fn);
  return "";
}

using clock_type = std::chrono::steady_clock;

double us_since(clock_type::time_point t0) {
  return std::chrono::duration<double, std::micro>(clock_type::now() - t0).count();
}

// One size: `iters` rounds of create, map, set access, unmap, release at one address.
std::string vmm_round(const vmm_api& api, int device, size_t bytes, int iters) {
  CUdeviceptr base = 0;
  CUresult rc = api.reserve(&base, bytes, 0, 0, 0);
  if (rc != CUDA_SUCCESS) return "{\"error\": \"cuMemAddressReserve " + std::to_string(rc) + "\"}";
  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = device;
  CUmemAccessDesc access{};
  access.location = prop.location;
  access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  std::vector<double> t_create, t_map, t_access, t_unmap, t_release;
  std::string error;
  for (int i = 0; i < iters && error.empty(); ++i) {
    CUmemGenericAllocationHandle handle = 0;
    auto t0 = clock_type::now();
    if ((rc = api.create(&handle, bytes, &prop, 0)) != CUDA_SUCCESS) { error = "cuMemCreate"; break; }
    t_create.push_back(us_since(t0));
    t0 = clock_type::now();
    const bool mapped = (rc = api.map(base, bytes, 0, handle, 0)) == CUDA_SUCCESS;
    t_map.push_back(us_since(t0));
    if (!mapped) error = "cuMemMap";
    if (error.empty()) {
      t0 = clock_type::now();
      if ((rc = api.set_access(base, bytes, &access, 1)) != CUDA_SUCCESS) error = "cuMemSetAccess";
      t_access.push_back(us_since(t0));
    }
    if (mapped) {
      t0 = clock_type::now();
      const CUresult unmapped = api.unmap(base, bytes);
      t_unmap.push_back(us_since(t0));
      if (unmapped != CUDA_SUCCESS && error.empty()) { error = "cuMemUnmap"; rc = unmapped; }
    }
    t0 = clock_type::now();
    api.release(handle);
    t_release.push_back(us_since(t0));
  }
  api.address_free(base, bytes);
  if (!error.empty()) return "{\"error\": \"" + error + " " + std::to_string(rc) + "\"}";
  char buf[320];
  std::snprintf(buf, sizeof buf,
                "{\"bytes\": %zu, \"iters\": %d, \"create_us\": %.4g, \"map_us\": %.4g, "
                "\"set_access_us\": %.4g, \"unmap_us\": %.4g, \"release_us\": %.4g}",
                bytes, iters, median(t_create), median(t_map), median(t_access), median(t_unmap),
                median(t_release));
  return buf;
}

// Fills every VMM entry point of *api but the device queries; "" or the first failure.
std::string load_vmm(vmm_api* api) {
  std::string error;
  for (const std::string& e :
       {entry_point("cuMemGetAllocationGranularity", &api->granularity),
        entry_point("cuMemAddressReserve", &api->reserve), entry_point("cuMemAddressFree", &api->address_free),
        entry_point("cuMemCreate", &api->create), entry_point("cuMemRelease", &api->release),
        entry_point("cuMemMap", &api->map), entry_point("cuMemSetAccess", &api->set_access),
        entry_point("cuMemUnmap", &api->unmap)}) {
    if (error.empty()) error = e;
  }
  return error;
}

std::string vmm_latency(const options& opt, int device) {
  vmm_api api;
  const std::string error = load_vmm(&api);
  if (!error.empty()) return "{\"error\": " + quote(error) + "}";
  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = device;
  size_t granule = 0;
  const CUresult rc = api.granularity(&granule, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM);
  if (rc != CUDA_SUCCESS || granule == 0)
    return "{\"error\": \"cuMemGetAllocationGranularity " + std::to_string(rc) + "\"}";
  const size_t big = std::max(granule, (size_t{64} << 20) / granule * granule);
  return "{\"granularity_bytes\": " + std::to_string(granule) +
         ", \"granule\": " + vmm_round(api, device, granule, opt.vmm_iters) +
         ", \"large\": " + vmm_round(api, device, big, opt.vmm_iters) + "}";
}

// --- Kernels, launched through cudaLaunchKernel as on both worlds.

cudaError_t launch(const void* fn, dim3 grid, dim3 block, void** args, cudaStream_t stream) {
  return cudaLaunchKernel(fn, grid, block, args, 0, stream);
}

// simgpu's compute rate in flops per ns of virtual time, from two spin launches that
// differ only in flops (as replay.cu's calibrate_flops_per_ns); 0 on a GPU, where the
// spin kernel times itself.
double spin_flops_per_ns(cudaStream_t stream, cudaEvent_t a, cudaEvent_t b) {
#ifdef __CUDACC__
  (void)stream;
  (void)a;
  (void)b;
  return 0.0;
#else
  double ms[2] = {0, 0};
  const double flops[2] = {1e12, 3e12};
  for (int i = 0; i < 2; ++i) {
    unsigned long long ns = 0;
    double f = flops[i];
    void* args[] = {&ns, &f};
    const cudaError_t rc = time_ms(stream, a, b, [&] {
      return launch(reinterpret_cast<const void*>(&gpu_spin), dim3(1), dim3(1), args, stream); }, &ms[i]);
    if (rc != cudaSuccess) return 0.0;
  }
  const double ns = (ms[1] - ms[0]) * 1e6;
  return ns > 0 ? (flops[1] - flops[0]) / ns : 0.0;
#endif
}

// The spin kernel the busy VMM measurements run beside.
struct spinner {
  cudaStream_t stream = nullptr;  // non-blocking, not the stream anything else uses
  unsigned long long ns = 50'000'000;
  double flops_per_ns = 0;
  int launches = 0;

  cudaError_t start() {
    double flops = static_cast<double>(ns) * flops_per_ns;
    void* args[] = {&ns, &flops};
    ++launches;
    return launch(reinterpret_cast<const void*>(&gpu_spin), dim3(1), dim3(1), args, stream);
  }
  bool running() const { return cudaStreamQuery(stream) == cudaErrorNotReady; }
};

// --- vmm_calls

constexpr int kVmmCalls = 5;
constexpr const char* kVmmCallNames[kVmmCalls] = {"create", "map", "set_access", "unmap", "release"};
constexpr const char* kVmmCallFunctions[kVmmCalls] = {"cuMemCreate", "cuMemMap", "cuMemSetAccess",
                                                      "cuMemUnmap", "cuMemRelease"};

// `iters` rounds (after one warm-up) of: create `calls` handles of `bytes` each, map
// them side by side, set access, unmap, release; each kind of call timed together
// (the sum of its `calls` calls), host wall clock. With `spin`, a spin kernel is
// started on its stream before each round and again before any kind of call that
// finds it already ended (so a call that waited for the device does not make the
// ones after it look as if they waited too), and each call is followed by a query
// of that stream: a call returned before the kernel ended when it still runs.
// With `one_call_ranges`, set access and unmap are one call each over the whole span
// of the `calls` handles mapped side by side (what batching a run of separately mapped
// pages would do; an error here answers whether the driver allows it).
std::string vmm_sequence(const vmm_api& api, int device, size_t bytes, int calls, int iters,
                         spinner* spin, bool one_call_ranges = false) {
  const size_t span = bytes * static_cast<size_t>(calls);
  CUdeviceptr base = 0;
  CUresult rc = api.reserve(&base, span, 0, 0, 0);
  if (rc != CUDA_SUCCESS) return error_json(cu_error(rc, "cuMemAddressReserve"));
  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = device;
  CUmemAccessDesc access{};
  access.location = prop.location;
  access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  std::vector<double> times[kVmmCalls];
  bool before_end[kVmmCalls] = {true, true, true, true, true};
  std::vector<CUmemGenericAllocationHandle> handles(static_cast<size_t>(calls), 0);
  std::vector<char> created(static_cast<size_t>(calls), 0), mapped(static_cast<size_t>(calls), 0);
  const int launches_before = spin != nullptr ? spin->launches : 0;
  std::string error;
  for (int it = -1; it < iters && error.empty(); ++it) {  // it == -1: warm-up
    double sum[kVmmCalls] = {0, 0, 0, 0, 0};
    if (spin != nullptr && spin->start() != cudaSuccess) { error = "launching the spin kernel"; break; }
    // One kind of call over every piece; false (and `error`) when a call fails.
    auto stage = [&](int kind, auto&& call) {
      if (spin != nullptr && it >= 0 && kind > 0 && !spin->running() && spin->start() != cudaSuccess) {
        error = "launching the spin kernel";
        return false;
      }
      const bool ranged = one_call_ranges && (kind == 2 || kind == 3);
      for (int c = 0; c < (ranged ? 1 : calls); ++c) {
        const auto t0 = clock_type::now();
        const CUresult r = call(static_cast<size_t>(c));
        sum[kind] += us_since(t0);
        if (spin != nullptr && it >= 0 && !spin->running()) before_end[kind] = false;
        if (r != CUDA_SUCCESS) {
          error = cu_error(r, kVmmCallFunctions[kind]);
          return false;
        }
      }
      return true;
    };
    const bool ok =
        stage(0, [&](size_t c) {
          const CUresult r = api.create(&handles[c], bytes, &prop, 0);
          created[c] = r == CUDA_SUCCESS;
          return r;
        }) &&
        stage(1, [&](size_t c) {
          const CUresult r = api.map(base + c * bytes, bytes, 0, handles[c], 0);
          mapped[c] = r == CUDA_SUCCESS;
          return r;
        }) &&
        stage(2, [&](size_t c) {
          return one_call_ranges ? api.set_access(base, span, &access, 1)
                                 : api.set_access(base + c * bytes, bytes, &access, 1);
        }) &&
        stage(3, [&](size_t c) {
          if (one_call_ranges) {
            const CUresult r = api.unmap(base, span);
            if (r == CUDA_SUCCESS) std::fill(mapped.begin(), mapped.end(), 0);
            return r;
          }
          const CUresult r = api.unmap(base + c * bytes, bytes);
          if (r == CUDA_SUCCESS) mapped[c] = 0;
          return r;
        }) &&
        stage(4, [&](size_t c) {
          const CUresult r = api.release(handles[c]);
          if (r == CUDA_SUCCESS) created[c] = 0;
          return r;
        });
    if (ok && it >= 0)
      for (int k = 0; k < kVmmCalls; ++k) times[k].push_back(sum[k]);
    // The next round starts with a fresh kernel.
    if (spin != nullptr) cudaStreamSynchronize(spin->stream);
  }
  for (size_t c = 0; c < handles.size(); ++c) {
    if (mapped[c]) api.unmap(base + c * bytes, bytes);
    if (created[c]) api.release(handles[c]);
  }
  api.address_free(base, span);
  if (!error.empty()) return error_json(error);
  std::string out = "{";
  const char* const fields[kVmmCalls] = {"create_us", "map_us", "set_access_us", "unmap_us", "release_us"};
  for (int k = 0; k < kVmmCalls; ++k)
    out += std::string(k == 0 ? "" : ", ") + "\"" + fields[k] + "\": " + p50_p99(times[k]);
  if (spin != nullptr) {
    out += ", \"returned_before_kernel_end\": {";
    for (int k = 0; k < kVmmCalls; ++k)
      out += std::string(k == 0 ? "" : ", ") + "\"" + kVmmCallNames[k] + "\": " + (before_end[k] ? "true" : "false");
    out += "}, \"kernel_launches\": " + std::to_string(spin->launches - launches_before);
  }
  return out + "}";
}

std::string vmm_calls(const options& opt, int device, spinner* spin, cudaEvent_t a, cudaEvent_t b) {
  vmm_api api;
  const std::string error = load_vmm(&api);
  if (!error.empty()) return error_json(error);
  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = device;
  size_t granule = 0;
  const CUresult rc = api.granularity(&granule, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM);
  if (rc != CUDA_SUCCESS || granule == 0) return error_json(cu_error(rc, "cuMemGetAllocationGranularity"));
  const size_t page = ((size_t{2} << 20) + granule - 1) / granule * granule;  // 2 MiB on GPUs
  // The spin kernel's own duration, timed once with events (also its first launch,
  // which loads the module, outside the measurements).
  double spin_ms = 0;
  const cudaError_t crc = time_ms(spin->stream, a, b, [&] { return spin->start(); }, &spin_ms);
  if (crc != cudaSuccess) return error_json(cuda_error(crc, "spin kernel"));
  char head[256];
  std::snprintf(head, sizeof head,
                "{\"page_bytes\": %zu, \"iters\": %d, \"spin_target_ms\": %.4g, \"spin_kernel_ms\": %.4g",
                page, opt.vmm_iters, static_cast<double>(spin->ns) / 1e6, spin_ms);
  std::string out = head;
  // run16_handles_ranged: 16 one-page handles mapped one by one, then one set access
  // and one unmap over the 32 MiB they span: whether a run of pages swap moved could
  // be unmapped in one call, and what it costs.
  const struct {
    const char* name;
    size_t bytes;
    int calls;
    bool ranged;
  } cases[] = {{"page", page, 1, false},
               {"run16_separate", page, 16, false},
               {"run16_one_call", page * 16, 1, false},
               {"run16_handles_ranged", page, 16, true}};
  for (const auto& c : cases) {
    out += std::string(",\n   \"") + c.name + "\": {\"bytes_per_call\": " + std::to_string(c.bytes) +
           ", \"calls\": " + std::to_string(c.calls) +
           ",\n    \"idle\": " + vmm_sequence(api, device, c.bytes, c.calls, opt.vmm_iters, nullptr, c.ranged) +
           ",\n    \"busy\": " + vmm_sequence(api, device, c.bytes, c.calls, opt.vmm_iters, spin, c.ranged) + "}";
  }
  return out + "}";
}

// --- events: host wall clock of each call, on a stream with nothing else queued.

std::string event_calls(cudaStream_t stream, cudaStream_t other) {
  constexpr int reps = 1000;
  cudaEvent_t ev = nullptr;
  cudaError_t rc = cudaEventCreateWithFlags(&ev, cudaEventDisableTiming);
  if (rc != cudaSuccess) return error_json(cuda_error(rc, "cudaEventCreateWithFlags"));
  std::vector<double> record, query, sync, wait;
  std::string error;
  auto timed = [&](std::vector<double>* out, auto&& call, cudaError_t want, const char* what) {
    for (int i = 0; i < reps && error.empty(); ++i) {
      const auto t0 = clock_type::now();
      const cudaError_t r = call();
      out->push_back(us_since(t0));
      if (r != want) error = cuda_error(r, what);
    }
  };
  cudaStreamSynchronize(stream);
  cudaStreamSynchronize(other);
  timed(&record, [&] { return cudaEventRecord(ev, stream); }, cudaSuccess, "cudaEventRecord");
  if (error.empty() && (rc = cudaEventSynchronize(ev)) != cudaSuccess)
    error = cuda_error(rc, "cudaEventSynchronize");
  // The event is complete from here on.
  if (error.empty()) timed(&query, [&] { return cudaEventQuery(ev); }, cudaSuccess, "cudaEventQuery");
  if (error.empty())
    timed(&sync, [&] { return cudaEventSynchronize(ev); }, cudaSuccess, "cudaEventSynchronize");
  if (error.empty())
    timed(&wait, [&] { return cudaStreamWaitEvent(other, ev, 0); }, cudaSuccess, "cudaStreamWaitEvent");
  cudaStreamSynchronize(other);
  cudaEventDestroy(ev);
  if (!error.empty()) return error_json(error);
  return "{\"reps\": " + std::to_string(reps) + ", \"event_flags\": \"cudaEventDisableTiming\"" +
         ", \"record_us\": " + p50_p99(record) + ", \"query_completed_us\": " + p50_p99(query) +
         ", \"synchronize_completed_us\": " + p50_p99(sync) + ", \"stream_wait_us\": " + p50_p99(wait) + "}";
}

// --- launch_rate: `launches` empty kernels on one stream, then one synchronize.

std::string launch_rate(cudaStream_t stream, cudaEvent_t a, cudaEvent_t b) {
  constexpr int launches = 20000;
  const void* fn = reinterpret_cast<const void*>(&facts_empty);
  cudaError_t rc = launch(fn, dim3(1), dim3(1), nullptr, stream);  // warm-up (module load)
  if (rc == cudaSuccess) rc = cudaStreamSynchronize(stream);
  if (rc != cudaSuccess) return error_json(cuda_error(rc, "empty kernel"));
  const auto t0 = clock_type::now();
  rc = cudaEventRecord(a, stream);
  for (int i = 0; i < launches && rc == cudaSuccess; ++i) rc = launch(fn, dim3(1), dim3(1), nullptr, stream);
  if (rc == cudaSuccess) rc = cudaEventRecord(b, stream);
  if (rc == cudaSuccess) rc = cudaStreamSynchronize(stream);
  const double host_us = us_since(t0);
  float device_ms = 0;
  if (rc == cudaSuccess) rc = cudaEventElapsedTime(&device_ms, a, b);
  if (rc != cudaSuccess) return error_json(cuda_error(rc, "cudaLaunchKernel"));
  char buf[256];
  std::snprintf(buf, sizeof buf,
                "{\"launches\": %d, \"empty_kernel_launches_per_s\": %.4g, \"us_per_launch\": %.4g, "
                "\"device_us_per_launch\": %.4g}",
                launches, launches / (host_us * 1e-6), host_us / launches,
                static_cast<double>(device_ms) * 1e3 / launches);
  return buf;
}

// --- pinned_both_ways: H2D on one stream and D2H on another, started together.

std::string pinned_both_ways(const options& opt, cudaStream_t up_stream, cudaStream_t down_stream) {
  const size_t bytes = opt.mib << 20;
  void* host_up = nullptr;
  void* host_down = nullptr;
  void* dev_up = nullptr;
  void* dev_down = nullptr;
  cudaEvent_t start = nullptr, up_end = nullptr, down_end = nullptr;
  std::string error;
  auto check = [&](cudaError_t r, const char* what) {
    if (error.empty() && r != cudaSuccess) error = cuda_error(r, what);
    return error.empty();
  };
  check(cudaMallocHost(&host_up, bytes), "cudaMallocHost") &&
      check(cudaMallocHost(&host_down, bytes), "cudaMallocHost") &&
      check(cudaMalloc(&dev_up, bytes), "cudaMalloc") && check(cudaMalloc(&dev_down, bytes), "cudaMalloc") &&
      check(cudaEventCreate(&start), "cudaEventCreate") && check(cudaEventCreate(&up_end), "cudaEventCreate") &&
      check(cudaEventCreate(&down_end), "cudaEventCreate");
  if (error.empty()) std::memset(host_up, 1, bytes);
  if (error.empty()) check(cudaMemset(dev_down, 2, bytes), "cudaMemset");
  std::vector<double> total, up, down;
  for (int r = -1; error.empty() && r < opt.reps; ++r) {  // r == -1: warm-up
    check(cudaEventRecord(start, up_stream), "cudaEventRecord") &&
        check(cudaStreamWaitEvent(down_stream, start, 0), "cudaStreamWaitEvent") &&
        check(cudaMemcpyAsync(dev_up, host_up, bytes, cudaMemcpyHostToDevice, up_stream), "cudaMemcpyAsync") &&
        check(cudaMemcpyAsync(host_down, dev_down, bytes, cudaMemcpyDeviceToHost, down_stream),
              "cudaMemcpyAsync") &&
        check(cudaEventRecord(up_end, up_stream), "cudaEventRecord") &&
        check(cudaEventRecord(down_end, down_stream), "cudaEventRecord") &&
        check(cudaEventSynchronize(up_end), "cudaEventSynchronize") &&
        check(cudaEventSynchronize(down_end), "cudaEventSynchronize");
    float ms_up = 0, ms_down = 0;
    if (error.empty()) check(cudaEventElapsedTime(&ms_up, start, up_end), "cudaEventElapsedTime");
    if (error.empty()) check(cudaEventElapsedTime(&ms_down, start, down_end), "cudaEventElapsedTime");
    if (error.empty() && r >= 0) {
      up.push_back(gb_per_s(bytes, ms_up));
      down.push_back(gb_per_s(bytes, ms_down));
      total.push_back(gb_per_s(2 * bytes, std::max(ms_up, ms_down)));
    }
  }
  for (cudaEvent_t e : {start, up_end, down_end})
    if (e != nullptr) cudaEventDestroy(e);
  for (void* d : {dev_up, dev_down})
    if (d != nullptr) cudaFree(d);
  for (void* h : {host_up, host_down})
    if (h != nullptr) cudaFreeHost(h);
  if (!error.empty()) return error_json(error);
  char buf[256];
  std::snprintf(buf, sizeof buf,
                "{\"bytes_each_way\": %zu, \"reps\": %d, \"aggregate_gbps\": %.4g, \"h2d_gbps\": %.4g, "
                "\"d2h_gbps\": %.4g}",
                bytes, opt.reps, median(total), median(up), median(down));
  return buf;
}

// --- host_vmm: physical memory located on the host, mapped into the device's space.

std::string host_vmm(const options& opt, int device, cudaStream_t stream, cudaEvent_t a, cudaEvent_t b) {
  vmm_api api;
  std::string error = load_vmm(&api);
  if (error.empty()) error = entry_point("cuDeviceGet", &api.device_get);
  if (error.empty()) error = entry_point("cuDeviceGetAttribute", &api.device_attribute);
  if (!error.empty()) return error_json(error);
  CUdevice dev = 0;
  int attribute = 0;
  CUresult rc = api.device_get(&dev, device);
  if (rc == CUDA_SUCCESS)
    rc = api.device_attribute(&attribute, CU_DEVICE_ATTRIBUTE_HOST_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, dev);
  if (rc != CUDA_SUCCESS) return error_json(cu_error(rc, "cuDeviceGetAttribute"));
  std::string out = "{\"attribute\": " + std::to_string(attribute);
  if (attribute == 0) return out + ", \"supported\": false}";
  out += ", \"supported\": true";
  // CU_MEM_LOCATION_TYPE_HOST, else the first NUMA node.
  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_HOST;
  prop.location.id = 0;
  size_t granule = 0;
  rc = api.granularity(&granule, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM);
  if (rc != CUDA_SUCCESS || granule == 0) {
    prop.location.type = CU_MEM_LOCATION_TYPE_HOST_NUMA;
    rc = api.granularity(&granule, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM);
  }
  if (rc != CUDA_SUCCESS || granule == 0)
    return out + ", \"error\": " + quote(cu_error(rc, "cuMemGetAllocationGranularity")) + "}";
  out += std::string(", \"location_type\": \"") +
         (prop.location.type == CU_MEM_LOCATION_TYPE_HOST ? "host" : "host_numa") +
         "\", \"granularity_bytes\": " + std::to_string(granule);
  CUmemAccessDesc access{};
  access.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  access.location.id = device;
  access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;

  // One handle at two addresses: both mapped with device access, a byte pattern
  // written through the first and read back through the second.
  {
    CUmemGenericAllocationHandle h = 0;
    CUdeviceptr base = 0;
    bool created = false, reserved = false, first = false, second = false;
    std::string why;
    if ((rc = api.create(&h, granule, &prop, 0)) != CUDA_SUCCESS) why = cu_error(rc, "cuMemCreate");
    else created = true;
    if (why.empty() && (rc = api.reserve(&base, 2 * granule, 0, 0, 0)) != CUDA_SUCCESS)
      why = cu_error(rc, "cuMemAddressReserve");
    else reserved = why.empty();
    if (why.empty() && (rc = api.map(base, granule, 0, h, 0)) != CUDA_SUCCESS) why = cu_error(rc, "cuMemMap");
    else first = why.empty();
    if (why.empty() && (rc = api.map(base + granule, granule, 0, h, 0)) != CUDA_SUCCESS)
      why = cu_error(rc, "cuMemMap (second address)");
    else second = why.empty();
    if (why.empty() && (rc = api.set_access(base, 2 * granule, &access, 1)) != CUDA_SUCCESS)
      why = cu_error(rc, "cuMemSetAccess");
    if (why.empty()) {
      std::vector<unsigned char> seen(4096, 0);
      const size_t n = std::min<size_t>(seen.size(), granule);
      cudaError_t crc = cudaMemset(reinterpret_cast<void*>(base), 0x5a, n);
      if (crc == cudaSuccess)
        crc = cudaMemcpy(seen.data(), reinterpret_cast<void*>(base + granule), n, cudaMemcpyDefault);
      if (crc != cudaSuccess) why = cuda_error(crc, "cudaMemset/cudaMemcpy through the mappings");
      else if (std::count(seen.begin(), seen.begin() + n, 0x5a) != static_cast<long>(n))
        why = "the second address does not show what was written through the first";
    }
    if (second) api.unmap(base + granule, granule);
    if (first) api.unmap(base, granule);
    if (reserved) api.address_free(base, 2 * granule);
    if (created) api.release(h);
    out += std::string(", \"double_map_ok\": ") + (why.empty() ? "true" : "false");
    if (!why.empty()) out += ", \"double_map_error\": " + quote(why);
  }

  // Copy bandwidth between a cudaMalloc buffer and a host-located mapping.
  const size_t bytes = ((size_t{64} << 20) + granule - 1) / granule * granule;
  CUmemGenericAllocationHandle h = 0;
  CUdeviceptr mapping = 0;
  void* dev_buf = nullptr;
  bool created = false, reserved = false, mapped = false;
  std::vector<double> to_host, from_host;
  if ((rc = api.create(&h, bytes, &prop, 0)) != CUDA_SUCCESS) error = cu_error(rc, "cuMemCreate");
  else created = true;
  if (error.empty() && (rc = api.reserve(&mapping, bytes, 0, 0, 0)) != CUDA_SUCCESS)
    error = cu_error(rc, "cuMemAddressReserve");
  else reserved = error.empty();
  if (error.empty() && (rc = api.map(mapping, bytes, 0, h, 0)) != CUDA_SUCCESS) error = cu_error(rc, "cuMemMap");
  else mapped = error.empty();
  if (error.empty() && (rc = api.set_access(mapping, bytes, &access, 1)) != CUDA_SUCCESS)
    error = cu_error(rc, "cuMemSetAccess");
  cudaError_t crc = cudaSuccess;
  if (error.empty() && (crc = cudaMalloc(&dev_buf, bytes)) != cudaSuccess) error = cuda_error(crc, "cudaMalloc");
  if (error.empty() && (crc = cudaMemset(dev_buf, 3, bytes)) != cudaSuccess) error = cuda_error(crc, "cudaMemset");
  void* host_side = reinterpret_cast<void*>(mapping);
  if (error.empty())
    error = copy_rates(opt.reps, stream, a, b, dev_buf, host_side, bytes,
                       "cudaMemcpyAsync with the host-located mapping", from_host, to_host);
  if (dev_buf != nullptr) cudaFree(dev_buf);
  if (mapped) api.unmap(mapping, bytes);
  if (reserved) api.address_free(mapping, bytes);
  if (created) api.release(h);
  if (!error.empty()) return out + ", \"copy_error\": " + quote(error) + "}";
  char buf[256];
  std::snprintf(buf, sizeof buf,
                ", \"copy_bytes\": %zu, \"reps\": %d, \"device_to_host_vmm_gbps\": %.4g, "
                "\"host_vmm_to_device_gbps\": %.4g}",
                bytes, opt.reps, median(to_host), median(from_host));
  return out + buf;
}

// --- managed_faults: a kernel touching managed memory that lives on the host.

std::string managed_faults(const options& opt, int device, cudaStream_t stream, cudaEvent_t a,
                           cudaEvent_t b) {
  constexpr size_t stride = size_t{64} << 10;
  size_t free_bytes = 0, total_bytes = 0;
  cudaError_t rc = cudaMemGetInfo(&free_bytes, &total_bytes);
  if (rc != cudaSuccess) return error_json(cuda_error(rc, "cudaMemGetInfo"));
  // 256 MiB, never more than a quarter of what is free on the device.
  const size_t bytes = std::min(size_t{256} << 20, free_bytes / 4) / stride * stride;
  if (bytes == 0) return "{\"skipped\": \"too little free device memory\"}";
  int concurrent = 0;
  cudaDeviceGetAttribute(&concurrent, cudaDevAttrConcurrentManagedAccess, device);
  void* p = nullptr;
  if ((rc = cudaMallocManaged(&p, bytes, cudaMemAttachGlobal)) != cudaSuccess)
    return error_json(cuda_error(rc, "cudaMallocManaged"));
  std::memset(p, 1, bytes);
  cudaMemLocation to_host{};
  to_host.type = cudaMemLocationTypeHost;
  unsigned* words = static_cast<unsigned*>(p);
  unsigned long long count = bytes / stride;
  unsigned long long stride_words = stride / sizeof(unsigned);
  void* args[] = {&words, &count, &stride_words};
  const unsigned threads = 256;
  const dim3 grid(static_cast<unsigned>((count + threads - 1) / threads));
  std::string error;
  std::vector<double> gbps;
  for (int r = -1; error.empty() && r < opt.reps; ++r) {  // r == -1: warm-up
    // Back to the host: prefetched where the device allows it, else written by the
    // CPU (which faults it back); the first round's pages are host-resident already.
    if (r >= 0) {
      if (concurrent != 0) {
        rc = cudaMemPrefetchAsync(p, bytes, to_host, 0, stream);
        if (rc == cudaSuccess) rc = cudaStreamSynchronize(stream);
        if (rc != cudaSuccess) { error = cuda_error(rc, "cudaMemPrefetchAsync to the host"); break; }
      } else {
        std::memset(p, 1, bytes);
      }
    }
    double ms = 0;
    rc = time_ms(stream, a, b, [&] {
      return launch(reinterpret_cast<const void*>(&facts_touch), grid, dim3(threads), args, stream); }, &ms);
    if (rc != cudaSuccess) error = cuda_error(rc, "touch kernel");
    if (r >= 0) gbps.push_back(gb_per_s(bytes, ms));
  }
  cudaFree(p);
  if (!error.empty()) return error_json(error);
  char buf[256];
  std::snprintf(buf, sizeof buf,
                "{\"bytes\": %zu, \"touch_stride_bytes\": %zu, \"reps\": %d, \"from\": \"%s\", "
                "\"migrated_gbps\": %.4g}",
                bytes, stride, opt.reps, concurrent != 0 ? "prefetched to the host" : "written by the CPU",
                median(gbps));
  return buf;
}

bool parse(int argc, char** argv, options* opt) {
  for (int i = 1; i + 1 < argc; i += 2) {
    const long v = std::strtol(argv[i + 1], nullptr, 10);
    if (v <= 0) return false;
    if (std::strcmp(argv[i], "--mib") == 0) opt->mib = static_cast<size_t>(v);
    else if (std::strcmp(argv[i], "--reps") == 0) opt->reps = static_cast<int>(v);
    else if (std::strcmp(argv[i], "--vmm-iters") == 0) opt->vmm_iters = static_cast<int>(v);
    else if (std::strcmp(argv[i], "--only-launch-rate") == 0) opt->only_launch_rate = true;
    else return false;
  }
  return argc % 2 == 1;
}

}  // namespace

int main(int argc, char** argv) {
  options opt;
  if (!parse(argc, argv, &opt)) {
    std::fprintf(stderr, "usage: gpu_facts [--mib N] [--reps N] [--vmm-iters N] [--only-launch-rate 1]\n");
    return 2;
  }
  int device = 0, driver = 0, runtime = 0;
  cudaDriverGetVersion(&driver);
  cudaRuntimeGetVersion(&runtime);
  cudaDeviceProp prop{};
  cudaError_t rc = cudaGetDevice(&device);
  if (rc == cudaSuccess) rc = cudaGetDeviceProperties(&prop, device);
  if (rc != cudaSuccess) {
    std::printf("{\"error\": %s, \"driver_version\": %d, \"runtime_version\": %d}\n",
                quote(cuda_error(rc, "cudaGetDeviceProperties")).c_str(), driver, runtime);
    return 1;
  }
  cudaStream_t stream = nullptr;
  cudaEvent_t a = nullptr, b = nullptr;
  cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking);
  cudaEventCreate(&a);
  cudaEventCreate(&b);
  // A second non-blocking stream: the other direction of pinned_both_ways, the spin
  // kernel beside the busy VMM calls, the waiting stream of cudaStreamWaitEvent.
  cudaStream_t other = nullptr;
  cudaStreamCreateWithFlags(&other, cudaStreamNonBlocking);
  if (opt.only_launch_rate) {
    std::printf("{\"launch_rate\": %s}\n", launch_rate(stream, a, b).c_str());
    return 0;
  }
  const std::string pinned = pinned_bandwidth(opt, stream, a, b);
  const std::string vmm = vmm_latency(opt, device);
  const std::string managed = managed_prefetch(opt, device, stream, a, b);
  const std::string both_ways = pinned_both_ways(opt, stream, other);
  const std::string events = event_calls(stream, other);
  const std::string launches = launch_rate(stream, a, b);
  spinner spin;
  spin.stream = other;
  spin.flops_per_ns = spin_flops_per_ns(other, a, b);
  const std::string calls = vmm_calls(opt, device, &spin, a, b);
  const std::string host = host_vmm(opt, device, stream, a, b);
  const std::string faults = managed_faults(opt, device, stream, a, b);
  std::printf("{\"device\": {\"name\": %s, \"total_bytes\": %zu, \"sm_count\": %d, "
              "\"compute_capability\": \"%d.%d\", \"pci_bus_id\": %d}, "
              "\"driver_version\": %d, \"runtime_version\": %d,\n"
              " \"pinned_bandwidth\": %s,\n \"vmm_latency\": %s,\n \"managed_prefetch\": %s,\n"
              " \"pinned_both_ways\": %s,\n \"events\": %s,\n \"launch_rate\": %s,\n"
              " \"vmm_calls\": %s,\n \"host_vmm\": %s,\n \"managed_faults\": %s}\n",
              quote(prop.name).c_str(), prop.totalGlobalMem, prop.multiProcessorCount, prop.major,
              prop.minor, prop.pciBusID, driver, runtime, pinned.c_str(), vmm.c_str(), managed.c_str(),
              both_ways.c_str(), events.c_str(), launches.c_str(), calls.c_str(), host.c_str(),
              faults.c_str());
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  cudaStreamDestroy(other);
  cudaStreamDestroy(stream);
  return 0;
}
