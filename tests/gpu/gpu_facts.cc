// gpu_facts: the figures of one GPU that oversub's schedules depend on, as one JSON
// object on stdout (step 1 of scripts/gpu-validate).
//
// - the device (name, memory, SMs, compute capability), driver and runtime versions;
// - pinned host<->device bandwidth: cudaMemcpyAsync of --mib MiB between
//   cudaMallocHost and cudaMalloc memory, timed with events, median of --reps;
// - VMM latency: cuMemCreate / cuMemMap / cuMemSetAccess / cuMemUnmap / cuMemRelease
//   of one granule and of 64 MiB, median of --vmm-iters, host wall clock. The driver
//   functions come from cudaGetDriverEntryPointByVersion: this program links only the
//   runtime, never libcuda (the same way oversub reaches the driver);
// - managed prefetch bandwidth: cudaMemPrefetchAsync of --mib MiB of managed memory
//   to the device and back to the host, timed with events, median of --reps.
//
// No kernels: the same file builds with nvcc (`nvcc -cudart shared`) for a GPU and
// with the host compiler against simgpu's libcudart for `gpu-validate --sim`, where
// event times are simgpu's virtual time. A section that fails records "error" and
// the program goes on; the exit status is 1 only when no device could be queried.
#include <cuda.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace {

struct options {
  size_t mib = 256;
  int reps = 5;
  int vmm_iters = 20;
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
  for (int r = -1; error.empty() && r < opt.reps; ++r) {  // r == -1: warm-up
    double up = 0, down = 0;
    rc = time_ms(stream, a, b, [&] {
      return cudaMemcpyAsync(dev, host, bytes, cudaMemcpyHostToDevice, stream); }, &up);
    if (rc == cudaSuccess) rc = time_ms(stream, a, b, [&] {
      return cudaMemcpyAsync(host, dev, bytes, cudaMemcpyDeviceToHost, stream); }, &down);
    if (rc != cudaSuccess) error = cuda_error(rc, "cudaMemcpyAsync");
    if (r >= 0) { h2d.push_back(gb_per_s(bytes, up)); d2h.push_back(gb_per_s(bytes, down)); }
  }
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

std::string vmm_latency(const options& opt, int device) {
  vmm_api api;
  std::string error;
  for (const std::string& e :
       {entry_point("cuMemGetAllocationGranularity", &api.granularity),
        entry_point("cuMemAddressReserve", &api.reserve), entry_point("cuMemAddressFree", &api.address_free),
        entry_point("cuMemCreate", &api.create), entry_point("cuMemRelease", &api.release),
        entry_point("cuMemMap", &api.map), entry_point("cuMemSetAccess", &api.set_access),
        entry_point("cuMemUnmap", &api.unmap)}) {
    if (error.empty()) error = e;
  }
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

bool parse(int argc, char** argv, options* opt) {
  for (int i = 1; i + 1 < argc; i += 2) {
    const long v = std::strtol(argv[i + 1], nullptr, 10);
    if (v <= 0) return false;
    if (std::strcmp(argv[i], "--mib") == 0) opt->mib = static_cast<size_t>(v);
    else if (std::strcmp(argv[i], "--reps") == 0) opt->reps = static_cast<int>(v);
    else if (std::strcmp(argv[i], "--vmm-iters") == 0) opt->vmm_iters = static_cast<int>(v);
    else return false;
  }
  return argc % 2 == 1;
}

}  // namespace

int main(int argc, char** argv) {
  options opt;
  if (!parse(argc, argv, &opt)) {
    std::fprintf(stderr, "usage: gpu_facts [--mib N] [--reps N] [--vmm-iters N]\n");
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
  const std::string pinned = pinned_bandwidth(opt, stream, a, b);
  const std::string vmm = vmm_latency(opt, device);
  const std::string managed = managed_prefetch(opt, device, stream, a, b);
  std::printf("{\"device\": {\"name\": %s, \"total_bytes\": %zu, \"sm_count\": %d, "
              "\"compute_capability\": \"%d.%d\", \"pci_bus_id\": %d}, "
              "\"driver_version\": %d, \"runtime_version\": %d,\n"
              " \"pinned_bandwidth\": %s,\n \"vmm_latency\": %s,\n \"managed_prefetch\": %s}\n",
              quote(prop.name).c_str(), prop.totalGlobalMem, prop.multiProcessorCount, prop.major,
              prop.minor, prop.pciBusID, driver, runtime, pinned.c_str(), vmm.c_str(), managed.c_str());
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  cudaStreamDestroy(stream);
  return 0;
}
