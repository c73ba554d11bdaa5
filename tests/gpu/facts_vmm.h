// gpu_facts' VMM measurements: the driver's VMM entry points (from
// cudaGetDriverEntryPointByVersion, nothing linked), the calls' latency for one granule
// and 64 MiB (vmm_latency), their p50/p99 idle and beside a spin kernel (vmm_calls),
// and host-located VMM memory (host_vmm).
#ifndef OVERSUB_TESTS_GPU_FACTS_VMM_H
#define OVERSUB_TESTS_GPU_FACTS_VMM_H

#include <cuda.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <latch>
#include <string>
#include <thread>
#include <vector>

#include "facts_common.h"

namespace gpu_facts {

// A pinned allocation on `device`, and read-write access from where `where` is.
inline CUmemAllocationProp device_prop(int device) {
  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = device;
  return prop;
}

inline CUmemAccessDesc read_write(const CUmemLocation& where) {
  CUmemAccessDesc access{};
  access.location = where;
  access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  return access;
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
inline std::string entry_point(const char* name, T* out, unsigned version = 12000) {
  cudaDriverEntryPointQueryResult status = cudaDriverEntryPointSymbolNotFound;
  void* fn = nullptr;
  const cudaError_t rc =
      cudaGetDriverEntryPointByVersion(name, &fn, version, cudaEnableDefault, &status);
  if (rc != cudaSuccess || status != cudaDriverEntryPointSuccess || fn == nullptr)
    return std::string("cudaGetDriverEntryPointByVersion(") + name + "): " + cudaGetErrorName(rc);
  *out = reinterpret_cast<T>(fn);
  return "";
}

// One size: `iters` rounds of create, map, set access, unmap, release at one address.
inline std::string vmm_round(const vmm_api& api, int device, size_t bytes, int iters) {
  CUdeviceptr base = 0;
  CUresult rc = api.reserve(&base, bytes, 0, 0, 0);
  if (rc != CUDA_SUCCESS) return "{\"error\": \"cuMemAddressReserve " + std::to_string(rc) + "\"}";
  const CUmemAllocationProp prop = device_prop(device);
  const CUmemAccessDesc access = read_write(prop.location);
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
inline std::string load_vmm(vmm_api* api) {
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

inline std::string vmm_latency(const options& opt, int device) {
  vmm_api api;
  const std::string error = load_vmm(&api);
  if (!error.empty()) return "{\"error\": " + quote(error) + "}";
  const CUmemAllocationProp prop = device_prop(device);
  size_t granule = 0;
  const CUresult rc = api.granularity(&granule, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM);
  if (rc != CUDA_SUCCESS || granule == 0)
    return "{\"error\": \"cuMemGetAllocationGranularity " + std::to_string(rc) + "\"}";
  const size_t big = std::max(granule, (size_t{64} << 20) / granule * granule);
  return "{\"granularity_bytes\": " + std::to_string(granule) +
         ", \"granule\": " + vmm_round(api, device, granule, opt.vmm_iters) +
         ", \"large\": " + vmm_round(api, device, big, opt.vmm_iters) + "}";
}

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
inline std::string vmm_sequence(const vmm_api& api, int device, size_t bytes, int calls, int iters,
                         spinner* spin, bool one_call_ranges = false) {
  const size_t span = bytes * static_cast<size_t>(calls);
  CUdeviceptr base = 0;
  CUresult rc = api.reserve(&base, span, 0, 0, 0);
  if (rc != CUDA_SUCCESS) return error_json(cu_error(rc, "cuMemAddressReserve"));
  const CUmemAllocationProp prop = device_prop(device);
  const CUmemAccessDesc access = read_write(prop.location);
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

// `rounds` remaps of one page (unmap, map, set access) on each of `threads` threads at
// once, each on its own pages; the wall time from their common start to the last one's
// end, us. Two threads against one doing twice the rounds answers whether the driver
// runs two threads' VMM calls side by side (swap's mover beside the launching thread)
// or one after the other (Note [VMM calls one at a time] in tests/simgpu/driver/vmm.cc).
inline std::string vmm_threads_round(const vmm_api& api, int device, size_t bytes, int threads,
                                     int rounds, double* wall_us) {
  const CUmemAllocationProp prop = device_prop(device);
  const CUmemAccessDesc access = read_write(prop.location);
  std::vector<CUdeviceptr> base(static_cast<size_t>(threads), 0);
  std::vector<CUmemGenericAllocationHandle> handle(static_cast<size_t>(threads), 0);
  std::string error;
  for (size_t t = 0; t < base.size() && error.empty(); ++t) {
    if (api.reserve(&base[t], bytes, 0, 0, 0) != CUDA_SUCCESS) error = "cuMemAddressReserve";
    else if (api.create(&handle[t], bytes, &prop, 0) != CUDA_SUCCESS) error = "cuMemCreate";
    else if (api.map(base[t], bytes, 0, handle[t], 0) != CUDA_SUCCESS) error = "cuMemMap";
    else if (api.set_access(base[t], bytes, &access, 1) != CUDA_SUCCESS) error = "cuMemSetAccess";
  }
  std::latch start(threads + 1);
  std::atomic<bool> failed{false};
  auto work = [&](size_t t) {
    if (cudaSetDevice(device) != cudaSuccess) failed.store(true);  // its context current
    start.arrive_and_wait();
    for (int r = 0; r < rounds && !failed.load(); ++r) {
      if (api.unmap(base[t], bytes) != CUDA_SUCCESS || api.map(base[t], bytes, 0, handle[t], 0) != CUDA_SUCCESS ||
          api.set_access(base[t], bytes, &access, 1) != CUDA_SUCCESS)
        failed.store(true);
    }
  };
  if (error.empty()) {
    std::vector<std::thread> pool;
    for (size_t t = 0; t < base.size(); ++t) pool.emplace_back(work, t);
    const auto t0 = clock_type::now();
    start.arrive_and_wait();
    for (std::thread& th : pool) th.join();
    *wall_us = us_since(t0);
    if (failed.load()) error = "a remap on a thread";
  }
  for (size_t t = 0; t < base.size(); ++t) {
    if (handle[t] != 0) {
      api.unmap(base[t], bytes);
      api.release(handle[t]);
    }
    if (base[t] != 0) api.address_free(base[t], bytes);
  }
  return error;
}

// See vmm_threads_round: p50 over `iters` of one thread's 2 x rounds remaps and of two
// threads' rounds each, and their ratio (1: one at a time; 2: side by side).
inline std::string vmm_two_threads(const vmm_api& api, int device, size_t bytes, int iters,
                                   spinner* spin) {
  constexpr int kRounds = 16;
  std::vector<double> one, two;
  for (int it = -1; it < iters; ++it) {  // it == -1: warm-up
    double wall[2] = {0, 0};
    for (int threads = 1; threads <= 2; ++threads) {
      if (spin != nullptr && !spin->running() && spin->start() != cudaSuccess)
        return error_json("launching the spin kernel");
      const std::string error =
          vmm_threads_round(api, device, bytes, threads, kRounds * 2 / threads, &wall[threads - 1]);
      if (!error.empty()) return error_json(error);
      if (spin != nullptr) cudaStreamSynchronize(spin->stream);
    }
    if (it >= 0) {
      one.push_back(wall[0]);
      two.push_back(wall[1]);
    }
  }
  const double p_one = percentile(one, 0.5), p_two = percentile(two, 0.5);
  char buf[256];
  std::snprintf(buf, sizeof buf,
                "{\"remaps\": %d, \"one_thread_us\": %s, \"two_threads_us\": %s, "
                "\"speedup\": %.4g}",
                kRounds * 2, p50_p99(one).c_str(), p50_p99(two).c_str(),
                p_two > 0 ? p_one / p_two : 0.0);
  return buf;
}

inline std::string vmm_calls(const options& opt, int device, spinner* spin, cudaEvent_t a, cudaEvent_t b) {
  vmm_api api;
  const std::string error = load_vmm(&api);
  if (!error.empty()) return error_json(error);
  const CUmemAllocationProp prop = device_prop(device);
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
  out += ",\n   \"two_threads\": {\"idle\": " + vmm_two_threads(api, device, page, opt.vmm_iters, nullptr) +
         ",\n    \"busy\": " + vmm_two_threads(api, device, page, opt.vmm_iters, spin) + "}";
  return out + "}";
}

// --- host_vmm: physical memory located on the host, mapped into the device's space.

inline std::string host_vmm(const options& opt, int device, cudaStream_t stream, cudaEvent_t a, cudaEvent_t b) {
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
  const CUmemAccessDesc access = read_write(device_prop(device).location);

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

}  // namespace gpu_facts

#endif  // OVERSUB_TESTS_GPU_FACTS_VMM_H
