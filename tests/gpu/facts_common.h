// gpu_facts' shared pieces: options, JSON text, timing with events and with the host's
// clock, percentiles, and the spin kernel's launcher (tests/gpu/gpu_facts.cc; one
// translation unit, built by nvcc for a GPU and against simgpu by meson).
#ifndef OVERSUB_TESTS_GPU_FACTS_COMMON_H
#define OVERSUB_TESTS_GPU_FACTS_COMMON_H

#include <cuda.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "spin_kernel.cuh"

namespace gpu_facts {

struct options {
  size_t mib = 256;
  int reps = 5;
  int vmm_iters = 20;
  bool only_launch_rate = false;  // --only-launch-rate 1: that section alone (run under each mode)
};

inline std::string quote(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    if (static_cast<unsigned char>(c) >= 0x20) out += c;
  }
  return out + "\"";
}

inline std::string cuda_error(cudaError_t rc, const char* what) {
  return std::string(what) + ": " + cudaGetErrorName(rc);
}

inline double median(std::vector<double> v) {
  if (v.empty()) return 0.0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 == 1 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

inline std::string number_list(const std::vector<double>& v) {
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
inline cudaError_t time_ms(cudaStream_t stream, cudaEvent_t start, cudaEvent_t stop, F enqueue,
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

inline double gb_per_s(size_t bytes, double ms) { return ms > 0.0 ? bytes / (ms * 1e6) : 0.0; }

// `reps` rounds (after one warm-up) of copying `bytes` from host to device and back
// with cudaMemcpyDefault, each timed with events; GB/s appended to `to_device` and
// `to_host`. "" or the error, named `what`.
inline std::string copy_rates(int reps, cudaStream_t stream, cudaEvent_t a, cudaEvent_t b, void* device,
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
inline double percentile(std::vector<double> v, double q) {
  if (v.empty()) return 0.0;
  std::sort(v.begin(), v.end());
  const size_t rank = static_cast<size_t>(std::ceil(q * static_cast<double>(v.size())));
  return v[std::clamp<size_t>(rank, 1, v.size()) - 1];
}

inline std::string p50_p99(const std::vector<double>& v) {
  char buf[96];
  std::snprintf(buf, sizeof buf, "{\"p50\": %.4g, \"p99\": %.4g}", percentile(v, 0.5),
                percentile(v, 0.99));
  return buf;
}

inline std::string error_json(const std::string& what) { return "{\"error\": " + quote(what) + "}"; }

inline std::string cu_error(CUresult rc, const char* what) {
  return std::string(what) + " " + std::to_string(static_cast<int>(rc));
}

using clock_type = std::chrono::steady_clock;

inline double us_since(clock_type::time_point t0) {
  return std::chrono::duration<double, std::micro>(clock_type::now() - t0).count();
}

// --- Kernels, launched through cudaLaunchKernel as on both worlds.

inline cudaError_t launch(const void* fn, dim3 grid, dim3 block, void** args, cudaStream_t stream) {
  return cudaLaunchKernel(fn, grid, block, args, 0, stream);
}

// simgpu's compute rate in flops per ns of virtual time, from two spin launches that
// differ only in flops (as replay.cu's calibrate_flops_per_ns); 0 on a GPU, where the
// spin kernel times itself.
inline double spin_flops_per_ns(cudaStream_t stream, cudaEvent_t a, cudaEvent_t b) {
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

}  // namespace gpu_facts

#endif  // OVERSUB_TESTS_GPU_FACTS_COMMON_H
