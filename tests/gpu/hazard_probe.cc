// hazard_probe: the access patterns oversub cannot see from a launch's arguments,
// each checked for the right data under OVERSUB_MODE=swap (gpu-validate step 7,
// scripts/gpu/hazards.py). Built by nvcc as CUDA (-x cu, tests/gpu/nvcc_include
// first on the include path) and by meson against simgpu, from this one source.
//
//   hazard_probe <case> [--mib N] [--print-total]
//
// Cases:
//   pointer-chase  target buffers whose addresses sit in a table in device memory; a
//                  kernel given only the table follows the pointers and sums what it
//                  finds, queued on a stream behind a ~20 ms spin kernel while
//                  kernels on another stream write enough other buffers to evict the
//                  targets; then the targets are updated through their own pointers,
//                  evicted again and chased again; every sum and every buffer is
//                  compared with a host mirror.
//   graph-capture  a few kernels over buffers larger together than a third of the
//                  total, with a cudaMallocAsync inside the capture, captured into a
//                  graph and replayed 5 times; the buffers must equal those of the
//                  same work launched directly, and a host mirror of it.
//   cukernel       a kernel launched through its handle (cudaKernel_t from
//                  cudaGetKernel, as CUDA 13's generated stubs do): cudaLaunchKernel
//                  with the handle cast, then cuLaunchKernel with the CUkernel cast to
//                  CUfunction, each on a buffer evicted just before; compared with a
//                  host mirror.
//
// --mib N (or HAZARD_MIB) sizes the case's device allocations at about N MiB in all
// (default 24 on simgpu, 256 on a GPU); --print-total prints `total bytes: <n>`, the
// exact sum of the case's allocations, and exits without touching the device (the
// step sets OVERSUB_DEVICE_LIMIT to a third of it). A run prints
// `checksum <case> 0x<16 hex>` (the same with and without oversub), then
// `ok <case>` and exits 0, or `FAIL <case>: <why>` and exits 1. Every run ends by
// checking that no error is sticky: cudaGetLastError and cudaDeviceSynchronize must
// answer cudaSuccess.
#include <cuda.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "simgpu/kernel.h"

#ifndef __CUDACC__
// Declared by crt/device_functions.h only for nvcc; simgpu's runtime exports it (it
// has no public cudaGetKernel): what CUDA 13's generated launch stub calls.
extern "C" cudaError_t CUDARTAPI __cudaGetKernel(cudaKernel_t*, const void*);
#endif

// ---- Kernels: grid-stride loops, so simgpu runs a few hundred CUDA threads per launch.

__host__ __device__ inline unsigned hz_word(unsigned seed, unsigned long long i) {
  unsigned x = seed * 0x9E3779B1u + static_cast<unsigned>(i) * 0x85EBCA77u +
               static_cast<unsigned>(i >> 32) * 0xC2B2AE3Du + 0x165667B1u;
  x ^= x >> 15;
  x *= 0x2C1B3C6Du;
  x ^= x >> 12;
  x *= 0x297A2D39u;
  x ^= x >> 15;
  return x;
}

__host__ __device__ inline unsigned long long hz_fold(unsigned long long sum,
                                                      unsigned long long v) {
  return (sum ^ v) * 0x100000001b3ULL;
}

constexpr unsigned long long hz_fold_start = 0xcbf29ce484222325ULL;

// p[i] = hz_word(seed, i).
__global__ void hz_fill(unsigned* p, unsigned long long n, unsigned seed) {
  const unsigned long long stride = 1ULL * gridDim.x * blockDim.x;
  for (unsigned long long i = 1ULL * blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
    p[i] = hz_word(seed, i);
  }
}
SIMGPU_KERNEL_FOOTPRINT(hz_fill, [](simgpu::footprint& fp, unsigned* p, unsigned long long n,
                                    unsigned) { fp.write(p, n); });

// p[i] = p[i] * 3 + k + i: reads what it writes, so stale data shows.
__global__ void hz_mix(unsigned* p, unsigned long long n, unsigned k) {
  const unsigned long long stride = 1ULL * gridDim.x * blockDim.x;
  for (unsigned long long i = 1ULL * blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
    p[i] = p[i] * 3u + k + static_cast<unsigned>(i);
  }
}
SIMGPU_KERNEL_FOOTPRINT(hz_mix, [](simgpu::footprint& fp, unsigned* p, unsigned long long n,
                                   unsigned) { fp.readwrite(p, n); });

// dst[i] = dst[i] * mul + (src[i] >> shift) + add; with mul == 0 dst is only written
// (the graph's scratch buffer, which holds nothing at the start of a replay).
__global__ void hz_step(unsigned* dst, const unsigned* src, unsigned long long n, unsigned mul,
                        unsigned shift, unsigned add) {
  const unsigned long long stride = 1ULL * gridDim.x * blockDim.x;
  for (unsigned long long i = 1ULL * blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
    const unsigned old = mul != 0 ? dst[i] * mul : 0u;
    dst[i] = old + (src[i] >> shift) + add;
  }
}
SIMGPU_KERNEL_FOOTPRINT(hz_step, [](simgpu::footprint& fp, unsigned* dst, const unsigned* src,
                                    unsigned long long n, unsigned mul, unsigned, unsigned) {
  if (mul != 0)
    fp.readwrite(dst, n);
  else
    fp.write(dst, n);
  fp.read(src, n);
});

// Follows the table: item t is chunk t % chunks of the buffer table[t / chunks];
// out[t] is the fold of its words. Only the table and out are arguments: the
// buffers are reached through pointers stored in device memory, which no argument
// scan sees. On simgpu each chunk is declared just before it is read (simgpu::
// reach_read, Note [Accesses a kernel really makes] in tests/simgpu/driver/fault.h),
// so the race detector sees exactly those bytes.
__global__ void hz_chase(unsigned* const* table, unsigned chunks, unsigned long long chunk_words,
                         unsigned items, unsigned long long* out) {
  const unsigned stride = gridDim.x * blockDim.x;
  for (unsigned t = blockIdx.x * blockDim.x + threadIdx.x; t < items; t += stride) {
    const unsigned* p = table[t / chunks] + (t % chunks) * chunk_words;
#ifndef __CUDACC__
    simgpu::reach_read(p, chunk_words);
#endif
    unsigned long long sum = hz_fold_start;
    for (unsigned long long j = 0; j < chunk_words; ++j) sum = hz_fold(sum, p[j]);
    out[t] = sum;
  }
}
SIMGPU_KERNEL_FOOTPRINT(hz_chase, [](simgpu::footprint& fp, unsigned* const* table, unsigned chunks,
                                     unsigned long long, unsigned items, unsigned long long* out) {
  fp.read(table, chunks == 0 ? 0 : items / chunks);
  fp.write(out, items);
});

#include "spin_kernel.cuh"

namespace {

// ---- Host side.

struct failure {
  std::string why;
};

[[noreturn]] void fail(const std::string& why) { throw failure{why}; }

void check(cudaError_t rc, const char* what) {
  if (rc != cudaSuccess) {
    fail(std::string(what) + ": " + cudaGetErrorName(rc) + " (" + cudaGetErrorString(rc) + ")");
  }
}
#define HZ_CHECK(call) check((call), #call)

// Grid of a grid-stride launch: a few hundred CUDA threads on simgpu (each is a host
// call there), enough to fill the GPU otherwise.
dim3 grid_for(unsigned long long n) {
#ifdef __CUDACC__
  const unsigned long long blocks = (n + 255) / 256;
  return dim3(static_cast<unsigned>(blocks < 1024 ? (blocks == 0 ? 1 : blocks) : 1024));
#else
  (void)n;
  return dim3(4);
#endif
}
#ifdef __CUDACC__
const dim3 kBlock(256);
#else
const dim3 kBlock(64);
#endif

template <typename Tuple, std::size_t... I>
void arg_pointers(Tuple& values, void** out, std::index_sequence<I...>) {
  ((out[I] = static_cast<void*>(&std::get<I>(values))), ...);
}

// cudaLaunchKernel by host function, the arguments converted to the kernel's types.
template <typename... P, typename... A>
void launch(void (*kernel)(P...), const char* name, dim3 grid, cudaStream_t stream, A... args) {
  std::tuple<P...> values(args...);
  void* ptrs[sizeof...(P)] = {};
  arg_pointers(values, ptrs, std::index_sequence_for<P...>{});
  check(cudaLaunchKernel(reinterpret_cast<const void*>(kernel), grid, kBlock, ptrs, 0, stream),
        name);
}

// Host mirrors of the device kernels.
void host_fill(std::vector<unsigned>& v, unsigned seed) {
  for (size_t i = 0; i < v.size(); ++i) v[i] = hz_word(seed, i);
}
void host_mix(std::vector<unsigned>& v, unsigned k) {
  for (size_t i = 0; i < v.size(); ++i) v[i] = v[i] * 3u + k + static_cast<unsigned>(i);
}
void host_step(std::vector<unsigned>& dst, const std::vector<unsigned>& src, unsigned mul,
               unsigned shift, unsigned add) {
  for (size_t i = 0; i < dst.size(); ++i)
    dst[i] = (mul != 0 ? dst[i] * mul : 0u) + (src[i] >> shift) + add;
}

unsigned long long digest(const std::vector<unsigned>& v, unsigned long long sum = hz_fold_start) {
  for (unsigned w : v) sum = hz_fold(sum, w);
  return sum;
}

// Copies n words of device buffer p back and compares them with the mirror; answers
// the fold of the words read.
unsigned long long verify(const unsigned* p, const std::vector<unsigned>& mirror,
                          const char* what) {
  std::vector<unsigned> got(mirror.size());
  HZ_CHECK(cudaMemcpy(got.data(), p, got.size() * sizeof(unsigned), cudaMemcpyDeviceToHost));
  for (size_t i = 0; i < got.size(); ++i) {
    if (got[i] != mirror[i]) {
      char buf[200];
      std::snprintf(buf, sizeof buf, "%s: word %zu is 0x%08x, want 0x%08x", what, i, got[i],
                    mirror[i]);
      fail(buf);
    }
  }
  return digest(got);
}

unsigned* device_words(unsigned long long words) {
  void* p = nullptr;
  HZ_CHECK(cudaMalloc(&p, words * sizeof(unsigned)));
  return static_cast<unsigned*>(p);
}

// simgpu's compute rate in flops per ns of virtual time, from two spin launches
// that differ only in flops (as gpu_facts' spin_flops_per_ns); 0 on a GPU, where
// the spin kernel times itself.
double spin_rate(cudaStream_t stream) {
#ifdef __CUDACC__
  (void)stream;
  return 0.0;
#else
  cudaEvent_t a = nullptr, b = nullptr;
  HZ_CHECK(cudaEventCreate(&a));
  HZ_CHECK(cudaEventCreate(&b));
  double ms[2] = {0, 0};
  const double flops[2] = {1e12, 3e12};
  for (int i = 0; i < 2; ++i) {
    HZ_CHECK(cudaEventRecord(a, stream));
    launch(gpu_spin, "gpu_spin (calibration)", dim3(1), stream, 0ULL, flops[i]);
    HZ_CHECK(cudaEventRecord(b, stream));
    HZ_CHECK(cudaEventSynchronize(b));
    float elapsed = 0.0f;
    HZ_CHECK(cudaEventElapsedTime(&elapsed, a, b));
    ms[i] = elapsed;
  }
  HZ_CHECK(cudaEventDestroy(a));
  HZ_CHECK(cudaEventDestroy(b));
  const double ns = (ms[1] - ms[0]) * 1e6;
  return ns > 0 ? (flops[1] - flops[0]) / ns : 0.0;
#endif
}

constexpr unsigned long long kSpinNs = 20'000'000;  // ~20 ms

void spin(cudaStream_t stream, double rate) {
  launch(gpu_spin, "gpu_spin", dim3(1), stream, kSpinNs, static_cast<double>(kSpinNs) * rate);
}

// ---- Sizes: each case's allocations from N MiB, exact, so --print-total and the run agree.
// A "unit" is N/16 MiB of 32-bit words (N * 2^14 words).

struct chase_sizes {
  static constexpr unsigned targets = 4;   // 4 units: a quarter of the total
  static constexpr unsigned pressure = 6;  // 6 buffers of 2 units: three quarters
  unsigned long long target_words, pressure_words, chunk_words;
  unsigned chunks;  // per target
  unsigned items() const { return targets * chunks; }
  unsigned long long total() const {
    return (targets * target_words + pressure * pressure_words) * sizeof(unsigned) +
           targets * sizeof(unsigned*) + items() * sizeof(unsigned long long);
  }
};

chase_sizes chase_size(unsigned long long mib) {
  chase_sizes s{};
  s.target_words = mib << 14;
  s.pressure_words = 2 * s.target_words;
#ifdef __CUDACC__
  s.chunks = static_cast<unsigned>(mib * 4);  // 4096 words a chunk
#else
  s.chunks = 8;
#endif
  s.chunk_words = s.target_words / s.chunks;
  return s;
}

// graph-capture: A, B, C and the scratch buffer allocated in the capture, 4 units each.
unsigned long long graph_words(unsigned long long mib) { return mib << 16; }
unsigned long long graph_total(unsigned long long mib) {
  return 4 * graph_words(mib) * sizeof(unsigned);
}

// cukernel: the target and three pressure buffers, 4 units each.
unsigned long long cukernel_words(unsigned long long mib) { return mib << 16; }
unsigned long long cukernel_total(unsigned long long mib) {
  return 4 * cukernel_words(mib) * sizeof(unsigned);
}

// ---- Cases. Each returns its checksum or throws a failure.

unsigned long long pointer_chase(unsigned long long mib) {
  const chase_sizes sz = chase_size(mib);
  cudaStream_t s = nullptr, other = nullptr;
  HZ_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  HZ_CHECK(cudaStreamCreateWithFlags(&other, cudaStreamNonBlocking));
  const double rate = spin_rate(s);

  std::vector<unsigned*> targets(sz.targets);
  std::vector<std::vector<unsigned>> target_mirror(sz.targets,
                                                   std::vector<unsigned>(sz.target_words));
  for (unsigned b = 0; b < sz.targets; ++b) targets[b] = device_words(sz.target_words);
  void* table_raw = nullptr;
  HZ_CHECK(cudaMalloc(&table_raw, sz.targets * sizeof(unsigned*)));
  auto* table = static_cast<unsigned**>(table_raw);
  void* out_raw = nullptr;
  HZ_CHECK(cudaMalloc(&out_raw, sz.items() * sizeof(unsigned long long)));
  auto* out = static_cast<unsigned long long*>(out_raw);
  std::vector<unsigned*> pressure(sz.pressure);
  std::vector<std::vector<unsigned>> pressure_mirror(sz.pressure,
                                                     std::vector<unsigned>(sz.pressure_words));
  for (unsigned b = 0; b < sz.pressure; ++b) pressure[b] = device_words(sz.pressure_words);

  // The targets written by kernels that name them, the table copied in.
  for (unsigned b = 0; b < sz.targets; ++b) {
    launch(hz_fill, "hz_fill target", grid_for(sz.target_words), s, targets[b], sz.target_words,
           100u + b);
    host_fill(target_mirror[b], 100u + b);
  }
  HZ_CHECK(cudaMemcpyAsync(table, targets.data(), sz.targets * sizeof(unsigned*),
                           cudaMemcpyHostToDevice, s));
  HZ_CHECK(cudaStreamSynchronize(s));

  // What a chase over the mirrors gives, item by item, folded.
  auto expected_chase = [&] {
    unsigned long long sum = hz_fold_start;
    for (unsigned t = 0; t < sz.items(); ++t) {
      const unsigned* p = target_mirror[t / sz.chunks].data() + (t % sz.chunks) * sz.chunk_words;
      unsigned long long item = hz_fold_start;
      for (unsigned long long j = 0; j < sz.chunk_words; ++j) item = hz_fold(item, p[j]);
      sum = hz_fold(sum, item);
    }
    return sum;
  };
  auto read_chase = [&] {
    std::vector<unsigned long long> got(sz.items());
    HZ_CHECK(cudaMemcpy(got.data(), out, got.size() * sizeof(unsigned long long),
                        cudaMemcpyDeviceToHost));
    unsigned long long sum = hz_fold_start;
    for (unsigned long long v : got) sum = hz_fold(sum, v);
    return sum;
  };
  // The pressure: kernels on the other stream writing three quarters of the total,
  // which evicts the targets while the chase waits behind the spin kernel.
  auto press = [&](unsigned seed, bool mix) {
    for (unsigned b = 0; b < sz.pressure; ++b) {
      if (mix) {
        launch(hz_mix, "hz_mix pressure", grid_for(sz.pressure_words), other, pressure[b],
               sz.pressure_words, seed + b);
        host_mix(pressure_mirror[b], seed + b);
      } else {
        launch(hz_fill, "hz_fill pressure", grid_for(sz.pressure_words), other, pressure[b],
               sz.pressure_words, seed + b);
        host_fill(pressure_mirror[b], seed + b);
      }
    }
  };

  unsigned long long checksum = hz_fold_start;
  for (int round = 0; round < 2; ++round) {
    if (round == 1) {
      // The targets updated through their own pointers (fetched back), then chased again.
      for (unsigned b = 0; b < sz.targets; ++b) {
        launch(hz_mix, "hz_mix target", grid_for(sz.target_words), s, targets[b], sz.target_words,
               7u + b);
        host_mix(target_mirror[b], 7u + b);
      }
    }
    spin(s, rate);
    launch(hz_chase, "hz_chase", grid_for(sz.items()), s, static_cast<unsigned* const*>(table),
           sz.chunks, sz.chunk_words, sz.items(), out);
    press(200u + 16u * round, round == 1);
    HZ_CHECK(cudaStreamSynchronize(other));
    HZ_CHECK(cudaStreamSynchronize(s));
    const unsigned long long got = read_chase(), want = expected_chase();
    if (got != want) {
      char buf[160];
      std::snprintf(buf, sizeof buf, "chase %d: sum 0x%016llx, want 0x%016llx (the host's)",
                    round + 1, got, want);
      fail(buf);
    }
    checksum = hz_fold(checksum, got);
  }
  for (unsigned b = 0; b < sz.targets; ++b)
    checksum = hz_fold(checksum, verify(targets[b], target_mirror[b], "target"));
  for (unsigned b = 0; b < sz.pressure; ++b)
    checksum = hz_fold(checksum, verify(pressure[b], pressure_mirror[b], "pressure buffer"));

  for (unsigned* p : targets) HZ_CHECK(cudaFree(p));
  for (unsigned* p : pressure) HZ_CHECK(cudaFree(p));
  HZ_CHECK(cudaFree(table));
  HZ_CHECK(cudaFree(out));
  HZ_CHECK(cudaStreamDestroy(s));
  HZ_CHECK(cudaStreamDestroy(other));
  return checksum;
}

constexpr int kReplays = 5;

unsigned long long graph_capture(unsigned long long mib) {
  const unsigned long long n = graph_words(mib);
  cudaStream_t s = nullptr;
  HZ_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  unsigned* a = device_words(n);
  unsigned* b = device_words(n);
  unsigned* c = device_words(n);
  auto init = [&] {
    launch(hz_fill, "hz_fill A", grid_for(n), s, a, n, 1u);
    launch(hz_fill, "hz_fill B", grid_for(n), s, b, n, 2u);
    launch(hz_fill, "hz_fill C", grid_for(n), s, c, n, 3u);
  };
  // One step: tmp from A, then B from tmp, C from B, A from C: every buffer read
  // and written, tmp (allocated by the caller) written before it is read.
  auto step = [&](unsigned* tmp) {
    launch(hz_step, "hz_step tmp", grid_for(n), s, tmp, static_cast<const unsigned*>(a), n, 0u, 0u,
           11u);
    launch(hz_step, "hz_step B", grid_for(n), s, b, static_cast<const unsigned*>(tmp), n, 5u, 3u,
           1u);
    launch(hz_step, "hz_step C", grid_for(n), s, c, static_cast<const unsigned*>(b), n, 7u, 1u, 2u);
    launch(hz_step, "hz_step A", grid_for(n), s, a, static_cast<const unsigned*>(c), n, 3u, 5u, 3u);
  };

  // The host's mirror of kReplays steps.
  std::vector<unsigned> ha(n), hb(n), hc(n), ht(n);
  host_fill(ha, 1u);
  host_fill(hb, 2u);
  host_fill(hc, 3u);
  for (int r = 0; r < kReplays; ++r) {
    host_step(ht, ha, 0u, 0u, 11u);
    host_step(hb, ht, 5u, 3u, 1u);
    host_step(hc, hb, 7u, 1u, 2u);
    host_step(ha, hc, 3u, 5u, 3u);
  }

  // Without a graph: kReplays steps launched directly, scratch allocated and freed
  // on the stream each time.
  init();
  for (int r = 0; r < kReplays; ++r) {
    void* tmp = nullptr;
    HZ_CHECK(cudaMallocAsync(&tmp, n * sizeof(unsigned), s));
    step(static_cast<unsigned*>(tmp));
    HZ_CHECK(cudaFreeAsync(tmp, s));
  }
  HZ_CHECK(cudaStreamSynchronize(s));
  unsigned long long direct = hz_fold_start;
  direct = hz_fold(direct, verify(a, ha, "A without a graph"));
  direct = hz_fold(direct, verify(b, hb, "B without a graph"));
  direct = hz_fold(direct, verify(c, hc, "C without a graph"));

  // The same from a graph captured once and replayed kReplays times.
  init();
  HZ_CHECK(cudaStreamSynchronize(s));
  HZ_CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
  void* tmp = nullptr;
  HZ_CHECK(cudaMallocAsync(&tmp, n * sizeof(unsigned), s));
  step(static_cast<unsigned*>(tmp));
#ifdef __CUDACC__
  // A graph's allocation must be freed before the graph runs again: freed in the
  // graph, as frameworks do (a memory free node).
  HZ_CHECK(cudaFreeAsync(tmp, s));
#endif
  cudaGraph_t graph = nullptr;
  HZ_CHECK(cudaStreamEndCapture(s, &graph));
  cudaGraphExec_t exec = nullptr;
  HZ_CHECK(cudaGraphInstantiate(&exec, graph, 0));
  for (int r = 0; r < kReplays; ++r) HZ_CHECK(cudaGraphLaunch(exec, s));
  HZ_CHECK(cudaStreamSynchronize(s));
  HZ_CHECK(cudaGraphExecDestroy(exec));
  HZ_CHECK(cudaGraphDestroy(graph));
#ifndef __CUDACC__
  // simgpu has no graph memory nodes: the allocation made during the capture is an
  // ordinary one the replays reuse, freed once the graph is gone.
  HZ_CHECK(cudaFree(tmp));
#endif
  unsigned long long graphed = hz_fold_start;
  graphed = hz_fold(graphed, verify(a, ha, "A from the graph"));
  graphed = hz_fold(graphed, verify(b, hb, "B from the graph"));
  graphed = hz_fold(graphed, verify(c, hc, "C from the graph"));
  if (graphed != direct) fail("the graph's buffers differ from those of the direct launches");

  HZ_CHECK(cudaFree(a));
  HZ_CHECK(cudaFree(b));
  HZ_CHECK(cudaFree(c));
  HZ_CHECK(cudaStreamDestroy(s));
  return graphed;
}

using cu_launch_kernel_fn = CUresult (*)(CUfunction, unsigned, unsigned, unsigned, unsigned,
                                         unsigned, unsigned, unsigned, CUstream, void**, void**);

unsigned long long cukernel(unsigned long long mib) {
  const unsigned long long n = cukernel_words(mib);
  cudaStream_t s = nullptr;
  HZ_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  unsigned* target = device_words(n);
  std::vector<unsigned> mirror(n);
  std::vector<unsigned*> pressure(3);
  std::vector<std::vector<unsigned>> pressure_mirror(3, std::vector<unsigned>(n));
  for (auto& p : pressure) p = device_words(n);
  // Writes every pressure buffer: three quarters of the total, so the target goes out.
  auto press = [&](unsigned seed) {
    for (size_t i = 0; i < pressure.size(); ++i) {
      launch(hz_fill, "hz_fill pressure", grid_for(n), s, pressure[i], n,
             seed + static_cast<unsigned>(i));
      host_fill(pressure_mirror[i], seed + static_cast<unsigned>(i));
    }
  };

  launch(hz_fill, "hz_fill target", grid_for(n), s, target, n, 42u);
  host_fill(mirror, 42u);
  press(300u);
  HZ_CHECK(cudaStreamSynchronize(s));

  // The handle, as CUDA 13's generated stub gets it.
  cudaKernel_t handle = nullptr;
#ifdef __CUDACC__
  HZ_CHECK(cudaGetKernel(&handle, reinterpret_cast<const void*>(&hz_mix)));
#else
  HZ_CHECK(__cudaGetKernel(&handle, reinterpret_cast<const void*>(&hz_mix)));
#endif
  if (handle == nullptr) fail("cudaGetKernel gave a null handle");
  unsigned* p = target;
  unsigned long long count = n;
  unsigned k = 9u;
  void* args[] = {&p, &count, &k};
  // 1: the runtime, given the handle where a host function would go.
  HZ_CHECK(
      cudaLaunchKernel(reinterpret_cast<const void*>(handle), grid_for(n), kBlock, args, 0, s));
  host_mix(mirror, k);
  press(400u);
  HZ_CHECK(cudaStreamSynchronize(s));

  // 2: the driver, given the CUkernel cast to CUfunction (the runtime's cudaKernel_t
  // is the driver's CUkernel).
  void* entry = nullptr;
  cudaDriverEntryPointQueryResult found = cudaDriverEntryPointSymbolNotFound;
  HZ_CHECK(
      cudaGetDriverEntryPointByVersion("cuLaunchKernel", &entry, 12000, cudaEnableDefault, &found));
  if (entry == nullptr || found != cudaDriverEntryPointSuccess)
    fail("no cuLaunchKernel entry point");
  k = 21u;
  const dim3 grid = grid_for(n);
  const CUresult r = reinterpret_cast<cu_launch_kernel_fn>(entry)(
      reinterpret_cast<CUfunction>(handle), grid.x, 1, 1, kBlock.x, 1, 1, 0, s, args, nullptr);
  if (r != CUDA_SUCCESS)
    fail("cuLaunchKernel(CUkernel as CUfunction) answered " + std::to_string(static_cast<int>(r)));
  host_mix(mirror, k);
  HZ_CHECK(cudaStreamSynchronize(s));

  unsigned long long checksum = verify(target, mirror, "target");
  for (size_t i = 0; i < pressure.size(); ++i)
    checksum = hz_fold(checksum, verify(pressure[i], pressure_mirror[i], "pressure buffer"));
  HZ_CHECK(cudaFree(target));
  for (unsigned* q : pressure) HZ_CHECK(cudaFree(q));
  HZ_CHECK(cudaStreamDestroy(s));
  return checksum;
}

unsigned long long total_bytes(const std::string& name, unsigned long long mib) {
  if (name == "pointer-chase") return chase_size(mib).total();
  if (name == "graph-capture") return graph_total(mib);
  if (name == "cukernel") return cukernel_total(mib);
  return 0;
}

int usage() {
  std::fprintf(
      stderr,
      "usage: hazard_probe pointer-chase|graph-capture|cukernel [--mib N] [--print-total]\n");
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) return usage();
  const std::string name = argv[1];
#ifdef __CUDACC__
  unsigned long long mib = 256;
#else
  unsigned long long mib = 24;
#endif
  if (const char* env = std::getenv("HAZARD_MIB"); env != nullptr && *env != '\0')
    mib = std::strtoull(env, nullptr, 10);
  bool print_total = false;
  for (int i = 2; i < argc; ++i) {
    if (std::strcmp(argv[i], "--mib") == 0 && i + 1 < argc) {
      mib = std::strtoull(argv[++i], nullptr, 10);
    } else if (std::strcmp(argv[i], "--print-total") == 0) {
      print_total = true;
    } else {
      return usage();
    }
  }
  if (total_bytes(name, mib) == 0) return usage();
  if (mib < 1 || mib > (1ULL << 20)) {
    std::fprintf(stderr, "hazard_probe: --mib %llu out of range\n", mib);
    return 2;
  }
  if (print_total) {
    std::printf("total bytes: %llu\n", total_bytes(name, mib));
    return 0;
  }
  std::string why;
  unsigned long long checksum = 0;
  try {
    if (name == "pointer-chase")
      checksum = pointer_chase(mib);
    else if (name == "graph-capture")
      checksum = graph_capture(mib);
    else
      checksum = cukernel(mib);
  } catch (const failure& f) {
    why = f.why;
  }
  // No error may be sticky once the work is done.
  const cudaError_t last = cudaGetLastError();
  const cudaError_t sync = cudaDeviceSynchronize();
  if (why.empty() && last != cudaSuccess)
    why = std::string("cudaGetLastError answered ") + cudaGetErrorName(last);
  if (why.empty() && sync != cudaSuccess)
    why = std::string("cudaDeviceSynchronize answered ") + cudaGetErrorName(sync);
  std::printf("checksum %s 0x%016llx\n", name.c_str(), checksum);
  std::printf("total bytes: %llu\n", total_bytes(name, mib));
  if (!why.empty()) {
    std::printf("FAIL %s: %s\n", name.c_str(), why.c_str());
    return 1;
  }
  std::printf("ok %s\n", name.c_str());
  return 0;
}
