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
//   host-located VMM memory (host_vmm), managed-memory fault throughput
//   (managed_faults), and the device memory a small managed allocation takes once
//   prefetched (managed_footprint: whether the driver gives each its own page), and
//   what a discard of managed memory costs and gives back (managed_discard);
// - whether a copy ready on one stream runs while a copy issued before it in the same
//   direction waits on its stream for a kernel (copy_beside_blocked).
//
// The same file builds with nvcc (`-x cu`, tests/gpu/nvcc_include first on the
// include path) for a GPU and with the host compiler against simgpu's libcudart for
// `gpu-validate --sim`, where event times are simgpu's virtual time and the kernels
// run on the host with a footprint (simgpu/kernel.h) that gives them their virtual
// duration. A section that fails records "error" and the program goes on; the exit
// status is 1 only when no device could be queried. Shared helpers live in
// facts_common.h, the VMM and host-VMM sections in facts_vmm.h (one translation unit).
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

#include "facts_common.h"
#include "facts_vmm.h"
#include "simgpu/kernel.h"

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

namespace gpu_facts {

inline std::string pinned_bandwidth(const options& opt, cudaStream_t stream, cudaEvent_t a,
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

inline std::string managed_prefetch(const options& opt, int device, cudaStream_t stream,
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

// --- events: host wall clock of each call, on a stream with nothing else queued.

inline std::string event_calls(cudaStream_t stream, cudaStream_t other) {
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

inline std::string launch_rate(cudaStream_t stream, cudaEvent_t a, cudaEvent_t b) {
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

inline std::string pinned_both_ways(const options& opt, cudaStream_t up_stream, cudaStream_t down_stream) {
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

// --- managed_faults: a kernel touching managed memory that lives on the host.

inline std::string managed_faults(const options& opt, int device, cudaStream_t stream, cudaEvent_t a,
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

// --- managed_footprint: the device memory that 256 managed allocations of one size
// take once prefetched, by cudaMemGetInfo, per allocation. um mode counts a buffer's
// bytes against its room; where the driver gives each allocation whole pages, a model
// full of small buffers (biases, norms) holds far more device memory than that count
// (Note [A kernel touches its footprint] in tests/simgpu/driver/managed.h shows what
// the difference cost on simgpu's 64 KiB pages).
inline std::string managed_footprint(int device, cudaStream_t stream) {
  int concurrent = 0;
  cudaDeviceGetAttribute(&concurrent, cudaDevAttrConcurrentManagedAccess, device);
  if (concurrent == 0) return "{\"skipped\": \"the device has no concurrent managed access\"}";
  constexpr int count = 256;
  cudaMemLocation to_device{};
  to_device.type = cudaMemLocationTypeDevice;
  to_device.id = device;
  std::string out = "{\"count\": " + std::to_string(count);
  for (const size_t bytes : {size_t{512}, size_t{96} << 10}) {
    std::vector<void*> p(count, nullptr);
    size_t free_before = 0, free_after = 0, total = 0;
    cudaError_t rc = cudaSuccess;
    for (int i = 0; rc == cudaSuccess && i < count; ++i) {
      rc = cudaMallocManaged(&p[i], bytes, cudaMemAttachGlobal);
      if (rc == cudaSuccess) std::memset(p[i], 1, bytes);
    }
    if (rc == cudaSuccess) rc = cudaDeviceSynchronize();
    if (rc == cudaSuccess) rc = cudaMemGetInfo(&free_before, &total);
    for (int i = 0; rc == cudaSuccess && i < count; ++i)
      rc = cudaMemPrefetchAsync(p[i], bytes, to_device, 0, stream);
    if (rc == cudaSuccess) rc = cudaStreamSynchronize(stream);
    if (rc == cudaSuccess) rc = cudaMemGetInfo(&free_after, &total);
    for (void* q : p) {
      if (q != nullptr) cudaFree(q);
    }
    if (rc != cudaSuccess) return error_json(cuda_error(rc, "managed allocations prefetched"));
    const size_t taken = free_before > free_after ? free_before - free_after : 0;
    out += ", \"" + std::string(bytes == 512 ? "small" : "medium") + "\": {\"bytes\": " +
           std::to_string(bytes) + ", \"device_bytes_each\": " + std::to_string(taken / count) +
           "}";
  }
  return out + "}";
}

// --- managed_discard: cuMemDiscardBatchAsync (CUDA 13.0) of managed memory resident on
// the device, timed with events, and the device memory it gives back (cudaMemGetInfo);
// then the prefetch that brings the discarded range back, whose rate says whether the
// driver migrates bytes it may drop (simgpu's hostile reading says it does: Note
// [Discards] in tests/simgpu/driver/managed.h). um mode discards the freed buffers it
// needs room from (Note [Discarding freed buffers] in residency/um_engine.h).
inline std::string managed_discard(const options& opt, int device, cudaStream_t stream,
                                   cudaEvent_t a, cudaEvent_t b) {
  int concurrent = 0;
  cudaDeviceGetAttribute(&concurrent, cudaDevAttrConcurrentManagedAccess, device);
  if (concurrent == 0) return "{\"skipped\": \"the device has no concurrent managed access\"}";
  decltype(&cuMemDiscardBatchAsync) discard = nullptr;
  if (entry_point("cuMemDiscardBatchAsync", &discard, 13000) != "") {
    return "{\"skipped\": \"the driver has no cuMemDiscardBatchAsync\"}";
  }
  size_t free_bytes = 0, total = 0;
  cudaError_t rc = cudaMemGetInfo(&free_bytes, &total);
  if (rc != cudaSuccess) return error_json(cuda_error(rc, "cudaMemGetInfo"));
  const size_t bytes = std::min(opt.mib << 20, free_bytes / 4) & ~((size_t{2} << 20) - 1);
  if (bytes == 0) return "{\"skipped\": \"too little free device memory\"}";
  void* p = nullptr;
  if ((rc = cudaMallocManaged(&p, bytes, cudaMemAttachGlobal)) != cudaSuccess)
    return error_json(cuda_error(rc, "cudaMallocManaged"));
  cudaMemLocation to_device{};
  to_device.type = cudaMemLocationTypeDevice;
  to_device.id = device;
  std::vector<double> discard_us, back_gbps, freed;
  std::string error;
  for (int r = 0; error.empty() && r < opt.reps; ++r) {
    std::memset(p, 1, bytes);
    rc = cudaMemPrefetchAsync(p, bytes, to_device, 0, stream);
    if (rc == cudaSuccess) rc = cudaStreamSynchronize(stream);
    size_t before = 0, after = 0;
    if (rc == cudaSuccess) rc = cudaMemGetInfo(&before, &total);
    if (rc != cudaSuccess) { error = cuda_error(rc, "prefetch to the device"); break; }
    CUdeviceptr ptr = reinterpret_cast<CUdeviceptr>(p);
    size_t size = bytes;
    double ms = 0;
    CUresult dr = CUDA_SUCCESS;
    rc = time_ms(stream, a, b, [&] {
      dr = discard(&ptr, &size, 1, 0, reinterpret_cast<CUstream>(stream));
      return dr == CUDA_SUCCESS ? cudaSuccess : cudaErrorUnknown; }, &ms);
    if (dr != CUDA_SUCCESS) {
      error = "cuMemDiscardBatchAsync: CUresult " + std::to_string(dr);
      break;
    }
    if (rc == cudaSuccess) rc = cudaMemGetInfo(&after, &total);
    if (rc != cudaSuccess) { error = cuda_error(rc, "cuMemDiscardBatchAsync"); break; }
    discard_us.push_back(ms * 1e3);
    freed.push_back(after > before ? static_cast<double>(after - before) : 0.0);
    rc = time_ms(stream, a, b, [&] {
      return cudaMemPrefetchAsync(p, bytes, to_device, 0, stream); }, &ms);
    if (rc != cudaSuccess) { error = cuda_error(rc, "prefetch of the discarded range"); break; }
    back_gbps.push_back(gb_per_s(bytes, ms));
  }
  cudaFree(p);
  if (!error.empty()) return error_json(error);
  char buf[320];
  std::snprintf(buf, sizeof buf,
                "{\"bytes\": %zu, \"reps\": %d, \"discard_us\": %.4g, "
                "\"device_bytes_freed\": %.0f, \"prefetch_back_gbps\": %.4g}",
                bytes, opt.reps, median(discard_us), median(freed), median(back_gbps));
  return buf;
}

// --- copy_beside_blocked: a host-to-device copy whose stream waits for a spin kernel
// (about 50 ms) on another stream, then one issued after it on a third, idle stream. On
// simgpu the second runs at once, in the engine's idle time before the first (Note
// [Copy engines serve ready copies] in tests/simgpu/driver/clock.h); a copy engine
// serving copies in issue order would hold it until the kernel and the first copy end.
inline std::string copy_beside_blocked(const options& opt, spinner* spin, cudaStream_t waiting) {
  const size_t bytes = opt.mib << 20;
  void* host = nullptr;
  void *d1 = nullptr, *d2 = nullptr;
  cudaStream_t ready = nullptr;
  cudaEvent_t spin_end = nullptr, t0 = nullptr, ready_end = nullptr;
  std::string error;
  auto check = [&](cudaError_t r, const char* what) {
    if (error.empty() && r != cudaSuccess) error = cuda_error(r, what);
    return error.empty();
  };
  check(cudaMallocHost(&host, 2 * bytes), "cudaMallocHost") &&
      check(cudaMalloc(&d1, bytes), "cudaMalloc") && check(cudaMalloc(&d2, bytes), "cudaMalloc") &&
      check(cudaStreamCreateWithFlags(&ready, cudaStreamNonBlocking), "cudaStreamCreate") &&
      check(cudaEventCreate(&spin_end), "cudaEventCreate") &&
      check(cudaEventCreate(&t0), "cudaEventCreate") &&
      check(cudaEventCreate(&ready_end), "cudaEventCreate");
  if (error.empty()) std::memset(host, 1, 2 * bytes);
  std::vector<double> ready_ms, ahead_ms;
  for (int r = -1; error.empty() && r < opt.reps; ++r) {  // r == -1: warm-up
    char* second = static_cast<char*>(host) + bytes;
    check(cudaDeviceSynchronize(), "cudaDeviceSynchronize") &&
        check(spin->start(), "spin kernel") &&
        check(cudaEventRecord(spin_end, spin->stream), "cudaEventRecord") &&
        check(cudaStreamWaitEvent(waiting, spin_end, 0), "cudaStreamWaitEvent") &&
        check(cudaMemcpyAsync(d1, host, bytes, cudaMemcpyHostToDevice, waiting),
              "cudaMemcpyAsync") &&
        check(cudaEventRecord(t0, ready), "cudaEventRecord") &&
        check(cudaMemcpyAsync(d2, second, bytes, cudaMemcpyHostToDevice, ready),
              "cudaMemcpyAsync") &&
        check(cudaEventRecord(ready_end, ready), "cudaEventRecord") &&
        check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
    float ms = 0, ahead = 0;
    if (error.empty()) check(cudaEventElapsedTime(&ms, t0, ready_end), "cudaEventElapsedTime");
    if (error.empty())
      check(cudaEventElapsedTime(&ahead, ready_end, spin_end), "cudaEventElapsedTime");
    if (error.empty() && r >= 0) {
      ready_ms.push_back(ms);
      ahead_ms.push_back(ahead);
    }
  }
  for (cudaEvent_t e : {spin_end, t0, ready_end})
    if (e != nullptr) cudaEventDestroy(e);
  if (ready != nullptr) cudaStreamDestroy(ready);
  for (void* d : {d1, d2})
    if (d != nullptr) cudaFree(d);
  if (host != nullptr) cudaFreeHost(host);
  if (!error.empty()) return error_json(error);
  char buf[320];
  std::snprintf(buf, sizeof buf,
                "{\"bytes\": %zu, \"reps\": %d, \"spin_ms\": %.4g, \"ready_copy_ms\": %.4g, "
                "\"ended_before_spin_ms\": %.4g, \"ready_copy_ran_first\": %s}",
                bytes, opt.reps, static_cast<double>(spin->ns) / 1e6, median(ready_ms),
                median(ahead_ms), median(ahead_ms) > 0 ? "true" : "false");
  return buf;
}

inline bool parse(int argc, char** argv, options* opt) {
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

}  // namespace gpu_facts

int main(int argc, char** argv) {
  using namespace gpu_facts;
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
  const std::string footprint = managed_footprint(device, stream);
  const std::string discards = managed_discard(opt, device, stream, a, b);
  const std::string beside = copy_beside_blocked(opt, &spin, stream);
  std::printf("{\"device\": {\"name\": %s, \"total_bytes\": %zu, \"sm_count\": %d, "
              "\"compute_capability\": \"%d.%d\", \"pci_bus_id\": %d}, "
              "\"driver_version\": %d, \"runtime_version\": %d,\n"
              " \"pinned_bandwidth\": %s,\n \"vmm_latency\": %s,\n \"managed_prefetch\": %s,\n"
              " \"pinned_both_ways\": %s,\n \"events\": %s,\n \"launch_rate\": %s,\n"
              " \"vmm_calls\": %s,\n \"host_vmm\": %s,\n \"managed_faults\": %s,\n"
              " \"managed_footprint\": %s,\n \"managed_discard\": %s,\n"
              " \"copy_beside_blocked\": %s}\n",
              quote(prop.name).c_str(), prop.totalGlobalMem, prop.multiProcessorCount, prop.major,
              prop.minor, prop.pciBusID, driver, runtime, pinned.c_str(), vmm.c_str(), managed.c_str(),
              both_ways.c_str(), events.c_str(), launches.c_str(), calls.c_str(), host.c_str(),
              faults.c_str(), footprint.c_str(), discards.c_str(), beside.c_str());
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  cudaStreamDestroy(other);
  cudaStreamDestroy(stream);
  return 0;
}
