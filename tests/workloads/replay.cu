// oversub-replay: replays a profile (.oprof, docs/profile-format.md) against the
// CUDA runtime API, checking every buffer's data. Built by nvcc for a real GPU, or
// by g++ (through replay_sim.cc) for simgpu, like simtrain; under LD_PRELOAD of
// liboversub.so it measures any mode and policy on any trace with the real library.
//
// A profile holds one training iteration. The replay:
//   - allocates the long-lived buffers (weights, optimizer state, what the
//     iteration found already allocated) once, before the first iteration;
//   - per iteration, walks the launch positions 0..n: at position k it frees the
//     per-iteration buffers whose free_at is k (those a copy at k still uses after
//     it), cudaMallocs those whose alloc_at is k (by ordinal), replays the copies at
//     k (cudaMemcpyAsync / cudaMemsetAsync), then launches trace launch k as one
//     launch of replay_kernel over its buffers taking the recorded duration
//     (replay_kernels.cuh). Buffers not freed in the iteration are freed at its end;
//   - calls oversub_iteration_begin() (looked up with dlsym, so the binary does
//     not depend on oversub) at the start of each iteration: every replayed launch
//     has the same function, so oversub could not find the iteration from the
//     launched-function sequence;
//   - times each iteration with cudaEvents (virtual time on simgpu) and checks the
//     data (Note [The replay data check] in tests/workloads/replay_kernels.cuh): any
//     mismatch ends the run with status 1 and one line naming the iteration, launch,
//     kernel and buffer.
//
// Note [What the replay approximates]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// - Which buffers a launch reads and which it writes is not in a profile: every
//   replayed launch reads and writes all of its buffers.
// - Copies carry no offset: one is replayed at the start of its buffer, clamped to
//   the buffer's size; an H2D from pinned staging, a D2H to pinned staging, a
//   memset with a byte of the replay's choosing, a device-to-device copy (and a
//   copy of unknown kind) as a copy of the buffer onto itself (the bytes move, the
//   contents stay). Copies with no device buffer are skipped and counted.
// - A per-iteration buffer a launch or copy uses outside [alloc_at, free_at) has its
//   lifetime widened to cover the use; a long-lived buffer is never freed (a
//   profile marks one that the iteration frees, which the previous iteration
//   allocated, as long-lived). Both are counted in the plan line.
// - A launch with more than replay_max_buffers buffers becomes several launches,
//   its duration split evenly.
#include <dlfcn.h>

#include <algorithm>
#include <cerrno>
#include <cinttypes>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <new>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "device_allocator.h"
#include "gpu_compat.h"
#include "profiler/profile_format.h"
#include "replay_kernels.cuh"

namespace {

namespace prof = oversub::profiler;

[[noreturn]] void cuda_fail(cudaError_t err, const char* what, int line) {
  std::fflush(stdout);
  std::fprintf(stderr, "oversub-replay: CUDA error %s (%s) at replay.cu:%d in %s\n",
               cudaGetErrorName(err), cudaGetErrorString(err), line, what);
  std::exit(1);
}
#define REPLAY_CHECK(call)                                         \
  do {                                                             \
    const cudaError_t replay_err_ = (call);                        \
    if (replay_err_ != cudaSuccess) cuda_fail(replay_err_, #call, __LINE__); \
  } while (0)

struct options {
  std::string profile;
  int iters = 3;
  bool check = true;
  long long corrupt_after = -1;  // run-wide launches before the corruption; -1: none
  double scale = 1.0;            // every buffer's and copy's bytes times this
  bool footprint_writes = false; // simgpu: declare the buffers written too
  bool quiet = false;
  std::string allocator = "direct";  // --allocator: direct, caching or async
};

[[noreturn]] void usage(const char* prog, const std::string& message, int status = 2) {
  std::FILE* out = status == 0 ? stdout : stderr;
  if (!message.empty()) std::fprintf(out, "%s: %s\n", prog, message.c_str());
  std::fprintf(out,
               "usage: %s PROFILE.oprof [--iters N] [--check|--no-check] "
               "[--corrupt-after N] [--scale X] [--footprint read|readwrite] [--allocator A] "
               "[--quiet]\n"
               "  --iters N           iterations to replay (default 3)\n"
               "  --scale X           buffer and copy sizes times X (rounded up to whole\n"
               "                      4-byte words), durations kept (default 1)\n"
               "  --check, --no-check verify every buffer's data (default on)\n"
               "  --corrupt-after N   debug: after N launches overwrite a word of a buffer\n"
               "                      a later launch uses; the check must then fail\n"
               "  --footprint M       simgpu: buffers declared read (recorded durations)\n"
               "                      or readwrite (the race detector sees the writes;\n"
               "                      bytes count twice toward durations) (default read)\n"
               "  --allocator A       direct: a cudaMalloc and cudaFree per buffer (a framework\n"
               "                      with its cache off); caching: buffers placed in cached\n"
               "                      segments as PyTorch's default allocator places them;\n"
               "                      async: a cudaMallocAsync and cudaFreeAsync per buffer\n"
               "                      on the stream, as PyTorch's backend:cudaMallocAsync\n"
               "                      (tests/workloads/device_allocator.h) (default direct)\n"
               "  --quiet             no per-iteration lines\n",
               prog);
  std::exit(status);
}

long long parse_count(const char* prog, std::string_view name, const char* text,
                      long long lo, long long hi) {
  char* end = nullptr;
  errno = 0;
  const long long v = std::strtoll(text, &end, 10);
  if (*text == '\0' || *end != '\0' || errno != 0 || v < lo || v > hi) {
    usage(prog, std::string(name) + ": want a whole number from " + std::to_string(lo) +
                    " to " + std::to_string(hi) + ", not '" + text + "'");
  }
  return v;
}

options parse_options(int argc, char** argv) {
  options opt;
  const char* prog = argv[0];
  for (int i = 1; i < argc; ++i) {
    std::string_view a = argv[i];
    if (a == "-h" || a == "--help") usage(prog, "", 0);
    if (a == "--check") { opt.check = true; continue; }
    if (a == "--no-check") { opt.check = false; continue; }
    if (a == "--quiet") { opt.quiet = true; continue; }
    if (a == "--iters" || a == "--corrupt-after" || a == "--scale" || a == "--footprint" ||
        a == "--allocator") {
      if (i + 1 >= argc) usage(prog, std::string(a) + " needs a value");
      const char* v = argv[++i];
      if (a == "--allocator") {
        const std::string_view m = v;
        if (m != "direct" && m != "caching" && m != "async") {
          usage(prog, std::string("--allocator: want direct, caching or async, not '") + v +
                          "'");
        }
        opt.allocator = m;
        continue;
      }
      if (a == "--footprint") {
        const std::string_view m = v;
        if (m != "read" && m != "readwrite") {
          usage(prog, std::string("--footprint: want read or readwrite, not '") + v + "'");
        }
        opt.footprint_writes = m == "readwrite";
        continue;
      }
      if (a == "--scale") {
        char* end = nullptr;
        opt.scale = std::strtod(v, &end);
        if (*v == '\0' || *end != '\0' || !(opt.scale > 0) || opt.scale > 1e6) {
          usage(prog, std::string("--scale: want a number above 0, not '") + v + "'");
        }
        continue;
      }
      if (a == "--iters") opt.iters = static_cast<int>(parse_count(prog, a, v, 1, 1000000));
      else opt.corrupt_after = parse_count(prog, a, v, 0, 1LL << 40);
      continue;
    }
    if (!a.empty() && a[0] == '-') usage(prog, "unknown option '" + std::string(a) + "'");
    if (!opt.profile.empty()) usage(prog, "more than one profile given");
    opt.profile = std::string(a);
  }
  if (opt.profile.empty()) usage(prog, "no profile given");
  return opt;
}

constexpr std::uint32_t none = prof::no_index;

// A copy as replayed.
struct copy_step {
  prof::copy_kind kind;
  std::uint32_t buffer;
  std::uint64_t bytes;  // clamped to the buffer
};

// What happens at one launch position, in this order.
struct position {
  std::vector<std::uint32_t> early_frees;  // no copy at this position uses them
  std::vector<std::uint32_t> allocs;       // ordinal order
  std::vector<copy_step> copies;
  std::vector<std::uint32_t> late_frees;   // after the copies
};

struct plan {
  std::vector<std::uint32_t> long_lived;
  std::vector<position> at;  // launches + 1 positions
  std::uint64_t long_lived_bytes = 0;
  std::uint64_t peak_bytes = 0;  // long-lived + the most per-iteration bytes live
  std::size_t widened = 0;       // per-iteration buffers whose lifetime was widened
  std::size_t freed_long_lived = 0;
  std::size_t skipped_copies = 0;
  std::size_t split_launches = 0;  // trace launches with too many buffers
  std::size_t max_buffers = 0;     // most buffers of one trace launch
};

plan make_plan(const prof::profile& p) {
  const auto n = static_cast<std::uint32_t>(p.launches.size());
  plan pl;
  pl.at.resize(static_cast<std::size_t>(n) + 1);
  std::vector<std::uint32_t> first(p.allocations.size()), last(p.allocations.size());
  for (std::size_t b = 0; b < p.allocations.size(); ++b) {
    const prof::allocation_record& a = p.allocations[b];
    if (a.long_lived) {
      pl.long_lived.push_back(static_cast<std::uint32_t>(b));
      pl.long_lived_bytes += a.bytes;
      if (a.free_at != none) ++pl.freed_long_lived;
      continue;
    }
    first[b] = std::min(a.alloc_at, n);
    last[b] = std::max(first[b], a.free_at == none ? n : std::min(a.free_at, n));
  }
  std::vector<bool> widened(p.allocations.size(), false);
  auto widen = [&](std::uint32_t b, std::uint32_t lo, std::uint32_t hi) {
    if (p.allocations[b].long_lived) return;
    if (lo < first[b] || hi > last[b]) widened[b] = true;
    first[b] = std::min(first[b], lo);
    last[b] = std::max(last[b], hi);
  };
  for (std::uint32_t i = 0; i < n; ++i) {
    const auto& bufs = p.launches[i].buffers;
    pl.max_buffers = std::max(pl.max_buffers, bufs.size());
    if (bufs.size() > static_cast<std::size_t>(replay_max_buffers)) ++pl.split_launches;
    for (std::uint32_t b : bufs) widen(b, i, i + 1);
  }
  std::vector<std::vector<std::uint32_t>> copy_users(static_cast<std::size_t>(n) + 1);
  for (const prof::copy_record& c : p.copies) {
    const std::uint32_t k = std::min(c.before_launch, n);
    if (c.buffer == none || c.bytes == 0) {
      ++pl.skipped_copies;
      continue;
    }
    widen(c.buffer, k, k);
    const std::uint64_t bytes = std::min(c.bytes, p.allocations[c.buffer].bytes);
    pl.at[k].copies.push_back(copy_step{c.kind, c.buffer, bytes});
    copy_users[k].push_back(c.buffer);
  }
  pl.widened = static_cast<std::size_t>(std::count(widened.begin(), widened.end(), true));
  for (std::size_t b = 0; b < p.allocations.size(); ++b) {
    if (p.allocations[b].long_lived) continue;
    const auto id = static_cast<std::uint32_t>(b);
    pl.at[first[b]].allocs.push_back(id);  // allocations are stored by ordinal
    const auto& users = copy_users[last[b]];
    const bool copied_late = std::find(users.begin(), users.end(), id) != users.end();
    if (copied_late || first[b] == last[b]) pl.at[last[b]].late_frees.push_back(id);
    else pl.at[last[b]].early_frees.push_back(id);
  }
  std::uint64_t live = 0;
  std::uint64_t most = 0;
  for (const position& at : pl.at) {
    for (std::uint32_t b : at.early_frees) live -= p.allocations[b].bytes;
    for (std::uint32_t b : at.allocs) live += p.allocations[b].bytes;
    most = std::max(most, live);
    for (std::uint32_t b : at.late_frees) live -= p.allocations[b].bytes;
  }
  pl.peak_bytes = pl.long_lived_bytes + most;
  return pl;
}

// What the host knows of one buffer's contents.
struct buffer_state {
  unsigned int* ptr = nullptr;
  std::uint64_t bytes = 0;
  bool base_known = false;  // Note [The replay data check] in tests/workloads/replay_kernels.cuh
  unsigned int base_seed = replay_guard;
  unsigned int layer_count = 0;
  replay_layer layers[replay_layers];  // oldest first
  bool verified = false;   // some launch compared a known word of it

  // A copy wrote the first `n` bytes.
  void add_layer(std::uint64_t n, unsigned int kind, unsigned int value) {
    if (n < 4) return;  // covers no whole word
    unsigned int kept = 0;
    for (unsigned int l = 0; l < layer_count; ++l) {
      if (layers[l].bytes > n) layers[kept++] = layers[l];  // not wholly covered
    }
    layer_count = kept;
    if (layer_count == static_cast<unsigned int>(replay_layers)) {
      // Forget the oldest; what only it covered is unknown now, and so is the base.
      for (unsigned int l = 1; l < layer_count; ++l) layers[l - 1] = layers[l];
      --layer_count;
      base_known = false;
    }
    layers[layer_count++] = replay_layer{n, kind, value};
  }
  bool any_known() const { return base_known || layer_count > 0; }
  void forget() {
    base_known = false;
    layer_count = 0;
  }
  // The state as a launch passes it.
  replay_buffer describe(std::uint32_t id, unsigned int seed, bool check) const {
    replay_buffer r;
    r.words = ptr;
    r.bytes = bytes;
    r.id = id;
    r.state = replay_guard | (check ? (base_known ? 1u : 0u) | (layer_count << 1) : 0u);
    r.base_seed = base_seed;
    r.seed = seed;
    for (unsigned int l = 0; l < layer_count; ++l) r.layers[l] = layers[l];
    return r;
  }
};

void (*find_iteration_begin())() {
  return reinterpret_cast<void (*)()>(dlsym(RTLD_DEFAULT, "oversub_iteration_begin"));
}

void launch_replay_kernel(const replay_args& args, cudaStream_t stream) {
#ifdef __CUDACC__
  replay_kernel<<<1, 1, 0, stream>>>(args);
  REPLAY_CHECK(cudaGetLastError());
#else
  // What nvcc's generated stub does for replay_kernel<<<1, 1, 0, stream>>>(args).
  static cudaKernel_t handle = nullptr;
  if (handle == nullptr) {
    REPLAY_CHECK(__cudaGetKernel(&handle, reinterpret_cast<const void*>(&replay_kernel)));
  }
  replay_args copy = args;
  void* params[] = {&copy};
  REPLAY_CHECK(__cudaLaunchKernel(handle, dim3(1), dim3(1), params, 0, stream));
  REPLAY_CHECK(cudaGetLastError());
#endif
}

// simgpu's compute rate in flops per ns, from the virtual time of two launches of
// replay_calibrate; 0 on a GPU, where the kernel spins instead.
double calibrate_flops_per_ns(cudaStream_t stream) {
#ifdef __CUDACC__
  (void)stream;
  return 0.0;
#else
  cudaEvent_t ev[3];
  for (cudaEvent_t& e : ev) REPLAY_CHECK(cudaEventCreate(&e));
  const double small = 1e12;
  const double large = 3e12;
  void* args_small[] = {const_cast<double*>(&small)};
  void* args_large[] = {const_cast<double*>(&large)};
  const void* fn = reinterpret_cast<const void*>(&replay_calibrate);
  // A first launch, untimed: whatever a preloaded library does at the program's first
  // launch (OVERSUB_MODE=auto's probes) must not fall between the timed events.
  const double none = 0;
  void* args_none[] = {const_cast<double*>(&none)};
  REPLAY_CHECK(cudaLaunchKernel(fn, dim3(1), dim3(1), args_none, 0, stream));
  REPLAY_CHECK(cudaStreamSynchronize(stream));
  REPLAY_CHECK(cudaEventRecord(ev[0], stream));
  REPLAY_CHECK(cudaLaunchKernel(fn, dim3(1), dim3(1), args_small, 0, stream));
  REPLAY_CHECK(cudaEventRecord(ev[1], stream));
  REPLAY_CHECK(cudaLaunchKernel(fn, dim3(1), dim3(1), args_large, 0, stream));
  REPLAY_CHECK(cudaEventRecord(ev[2], stream));
  REPLAY_CHECK(cudaEventSynchronize(ev[2]));
  float ms_small = 0, ms_large = 0;
  REPLAY_CHECK(cudaEventElapsedTime(&ms_small, ev[0], ev[1]));
  REPLAY_CHECK(cudaEventElapsedTime(&ms_large, ev[1], ev[2]));
  for (cudaEvent_t e : ev) REPLAY_CHECK(cudaEventDestroy(e));
  const double ns = (static_cast<double>(ms_large) - ms_small) * 1e6;
  if (!(ns > 0)) {
    std::fprintf(stderr, "oversub-replay: cannot measure the compute rate (%g ms, %g ms)\n",
                 static_cast<double>(ms_small), static_cast<double>(ms_large));
    std::exit(1);
  }
  return (large - small) / ns;
#endif
}

class replayer {
 public:
  replayer(const options& opt, const prof::profile& p, const plan& pl)
      : opt_(opt), p_(p), plan_(pl), state_(p.allocations.size()) {
    if (opt.allocator == "caching") alloc_ = std::make_unique<caching_allocator>();
    else if (opt.allocator == "async") alloc_ = std::make_unique<async_allocator>();
    else alloc_ = std::make_unique<direct_allocator>();
    REPLAY_CHECK(cudaEventCreate(&begin_));
    REPLAY_CHECK(cudaEventCreate(&end_));
    flops_per_ns_ = calibrate_flops_per_ns(stream_);
    void* host = nullptr;
    REPLAY_CHECK(cudaHostAlloc(&host, sizeof(replay_status), cudaHostAllocMapped));
    status_ = new (host) replay_status();
    void* dev = nullptr;
    REPLAY_CHECK(cudaHostGetDevicePointer(&dev, host, 0));
    status_dev_ = static_cast<replay_status*>(dev);
    std::uint64_t h2d = 0, d2h = 0;
    for (const position& at : plan_.at) {
      for (const copy_step& c : at.copies) {
        if (c.kind == prof::copy_kind::h2d) h2d = std::max(h2d, c.bytes);
        if (c.kind == prof::copy_kind::d2h) d2h = std::max(d2h, c.bytes);
      }
    }
    if (h2d > 0) {
      REPLAY_CHECK(cudaMallocHost(&staging_h2d_, h2d));
      auto* w = static_cast<unsigned char*>(staging_h2d_);
      for (std::uint64_t i = 0; i * 4 < h2d; ++i) {
        const unsigned int v = replay_word(replay_staging_seed, static_cast<unsigned int>(i));
        std::memcpy(w + i * 4, &v, std::min<std::uint64_t>(4, h2d - i * 4));
      }
    }
    if (d2h > 0) REPLAY_CHECK(cudaMallocHost(&staging_d2h_, d2h));
    for (std::uint32_t b : plan_.long_lived) allocate(b);
    iteration_begin_ = find_iteration_begin();
  }

  replayer(const replayer&) = delete;
  replayer& operator=(const replayer&) = delete;

  ~replayer() {
    REPLAY_CHECK(cudaDeviceSynchronize());
    for (std::uint32_t b : plan_.long_lived) release(b);
    alloc_->release_all();
    if (staging_h2d_ != nullptr) REPLAY_CHECK(cudaFreeHost(staging_h2d_));
    if (staging_d2h_ != nullptr) REPLAY_CHECK(cudaFreeHost(staging_d2h_));
    REPLAY_CHECK(cudaFreeHost(status_));
    REPLAY_CHECK(cudaEventDestroy(begin_));
    REPLAY_CHECK(cudaEventDestroy(end_));
  }

  // Replays one iteration; returns its time in ms. Exits 1 on a data mismatch.
  double iteration(int iter) {
    if (iteration_begin_ != nullptr) iteration_begin_();
    REPLAY_CHECK(cudaEventRecord(begin_, stream_));
    const auto n = static_cast<std::uint32_t>(p_.launches.size());
    for (std::uint32_t k = 0; k <= n; ++k) {
      const position& at = plan_.at[k];
      for (std::uint32_t b : at.early_frees) release(b);
      for (std::uint32_t b : at.allocs) allocate(b);
      for (const copy_step& c : at.copies) copy(c, k);
      for (std::uint32_t b : at.late_frees) release(b);
      if (k == n) break;
      launch(iter, k);
      ++launches_;
      if (opt_.corrupt_after >= 0 && launches_ == static_cast<std::uint64_t>(opt_.corrupt_after)) {
        corrupt(k);
      }
    }
    REPLAY_CHECK(cudaEventRecord(end_, stream_));
    REPLAY_CHECK(cudaEventSynchronize(end_));
    float ms = 0;
    REPLAY_CHECK(cudaEventElapsedTime(&ms, begin_, end_));
    if (status_->mismatches != 0) report_mismatch();
    return static_cast<double>(ms);
  }

  const replay_status& status() const { return *status_; }
  // The most device memory the replay held from CUDA: live buffers (direct, async;
  // async's pool may keep more, as PyTorch's backend does) or cached segments (caching).
  std::uint64_t peak_bytes() const {
    return opt_.allocator == "caching" ? alloc_->peak_bytes() : peak_bytes_;
  }
  std::uint64_t launches() const { return launches_; }
  std::uint64_t kernel_launches() const { return kernel_launches_; }
  std::size_t buffers_verified() const {
    return static_cast<std::size_t>(std::count_if(
        state_.begin(), state_.end(), [](const buffer_state& s) { return s.verified; }));
  }
  bool marks_iterations() const { return iteration_begin_ != nullptr; }

 private:
  void allocate(std::uint32_t b) {
    buffer_state& s = state_[b];
    s.bytes = p_.allocations[b].bytes;
    s.forget();
    void* ptr = nullptr;
    if (s.bytes > 0) ptr = alloc_->allocate(s.bytes, stream_);
    s.ptr = static_cast<unsigned int*>(ptr);
    live_bytes_ += s.bytes;
    peak_bytes_ = std::max(peak_bytes_, live_bytes_);
  }

  // direct: cudaFree synchronises the device, so no launch using b is still running.
  // caching and async: everything runs on one stream, so whatever reuses b's memory
  // next is ordered after every launch that used b.
  void release(std::uint32_t b) {
    buffer_state& s = state_[b];
    if (s.ptr != nullptr) alloc_->deallocate(s.ptr);
    live_bytes_ -= s.bytes;
    s.ptr = nullptr;
    s.forget();
  }

  void copy(const copy_step& c, std::uint32_t k) {
    buffer_state& s = state_[c.buffer];
    if (s.ptr == nullptr) return;  // a zero-byte buffer
    switch (c.kind) {
      case prof::copy_kind::h2d:
        REPLAY_CHECK(cudaMemcpyAsync(s.ptr, staging_h2d_, c.bytes, cudaMemcpyHostToDevice,
                                     stream_));
        s.add_layer(c.bytes, replay_copy_staging, replay_guard);
        break;
      case prof::copy_kind::d2h:
        REPLAY_CHECK(cudaMemcpyAsync(staging_d2h_, s.ptr, c.bytes, cudaMemcpyDeviceToHost,
                                     stream_));
        break;
      case prof::copy_kind::memset: {
        const unsigned int byte = 0x80u | (k & 0x7fu);
        REPLAY_CHECK(cudaMemsetAsync(s.ptr, static_cast<int>(byte), c.bytes, stream_));
        s.add_layer(c.bytes, replay_copy_memset, byte * 0x01010101u);
        break;
      }
      case prof::copy_kind::d2d:
      case prof::copy_kind::other:
        REPLAY_CHECK(cudaMemcpyAsync(s.ptr, s.ptr, c.bytes, cudaMemcpyDeviceToDevice, stream_));
        break;
    }
  }

  void launch(int iter, std::uint32_t k) {
    const prof::launch_record& l = p_.launches[k];
    const std::size_t total = l.buffers.size();
    const std::size_t parts =
        total == 0 ? 1 : (total + replay_max_buffers - 1) / replay_max_buffers;
    for (std::size_t part = 0; part < parts; ++part) {
      replay_args a;
      a.status = status_dev_;
      a.duration_ns = l.duration_ns / parts + (part == 0 ? l.duration_ns % parts : 0);
      a.flops_per_ns = flops_per_ns_;
      a.launch = k;
      a.iteration = static_cast<unsigned int>(iter);
      a.writes = opt_.footprint_writes ? 1u : 0u;
      const std::size_t lo = part * replay_max_buffers;
      const std::size_t hi = std::min(total, lo + replay_max_buffers);
      for (std::size_t i = lo; i < hi; ++i) {
        const std::uint32_t b = l.buffers[i];
        buffer_state& s = state_[b];
        if (s.ptr == nullptr) continue;  // a zero-byte buffer
        const unsigned int seed = replay_word(static_cast<unsigned int>(kernel_launches_), b);
        a.buffers[a.count++] = s.describe(b, seed, opt_.check);
        if (opt_.check && s.any_known()) s.verified = true;
        s.layer_count = 0;
        s.base_known = true;
        s.base_seed = seed;
      }
      launch_replay_kernel(a, stream_);
      ++kernel_launches_;
    }
  }

  // --corrupt-after: overwrites a known word of a buffer that a later launch of
  // this iteration (or the next one's, for a long-lived buffer) uses before any
  // free or copy touches it, without telling the expectations.
  void corrupt(std::uint32_t k) {
    const auto n = static_cast<std::uint32_t>(p_.launches.size());
    std::vector<bool> touched(p_.allocations.size(), false);
    // Positions after launch k: the rest of this iteration, then the next one's.
    for (std::uint32_t q = k + 1; q <= k + n + 1; ++q) {
      const std::uint32_t pos = q <= n ? q : q - (n + 1);
      const position& at = plan_.at[pos];
      for (const auto* list : {&at.early_frees, &at.allocs, &at.late_frees}) {
        for (std::uint32_t b : *list) touched[b] = true;
      }
      for (const copy_step& c : at.copies) touched[c.buffer] = true;
      if (pos == n) continue;
      for (std::uint32_t b : p_.launches[pos].buffers) {
        const buffer_state& s = state_[b];
        if (touched[b] || s.ptr == nullptr) continue;
        // The middle sample: the check must look past the first and last words.
        const unsigned long long words = s.bytes / 4;
        const unsigned long long j = replay_sample_count(words) / 2;
        const unsigned long long w = replay_sample_word(words, j);
        unsigned int want = 0;
        if (!replay_expected(s.describe(b, 0, true), w, j, &want)) continue;
        REPLAY_CHECK(cudaMemsetAsync(s.ptr + w, 0x11, 4, stream_));
        std::printf("corrupt: after launch %" PRIu64 " overwrote word %llu of buffer %u "
                    "(%" PRIu64 " bytes), next used by trace launch %u%s\n",
                    launches_, w, b, s.bytes, pos, q > n ? " of the next iteration" : "");
        std::fflush(stdout);
        return;
      }
    }
    std::printf("corrupt: after launch %" PRIu64 " no buffer of a later launch to overwrite\n",
                launches_);
    std::fflush(stdout);
  }

  [[noreturn]] void report_mismatch() const {
    const replay_status& st = *status_;
    const prof::allocation_record& a = p_.allocations[st.buffer];
    const prof::launch_record& l = p_.launches[st.launch];
    const char* name = l.name != none ? p_.strings[l.name].c_str() : "?";
    char what[96];
    if (a.long_lived) std::snprintf(what, sizeof what, "long-lived");
    else std::snprintf(what, sizeof what, "ordinal %u", a.ordinal);
    std::fflush(stdout);
    std::fprintf(stderr,
                 "oversub-replay: data check failed: iteration %u, trace launch %u (%s): "
                 "buffer %u (%s, %" PRIu64 " bytes) word %llu holds 0x%08x, expected "
                 "0x%08x; %llu mismatched words in all\n",
                 st.iteration, st.launch, name, st.buffer, what, a.bytes, st.word, st.found,
                 st.expected, st.mismatches);
    std::exit(1);
  }

  const options& opt_;
  const prof::profile& p_;
  const plan& plan_;
  std::vector<buffer_state> state_;
  cudaStream_t stream_ = nullptr;  // the legacy stream: everything in order
  std::unique_ptr<device_allocator> alloc_;
  cudaEvent_t begin_ = nullptr, end_ = nullptr;
  double flops_per_ns_ = 0;
  replay_status* status_ = nullptr;      // host view
  replay_status* status_dev_ = nullptr;  // device view
  void* staging_h2d_ = nullptr;          // pinned, replay_word(replay_staging_seed, i)
  void* staging_d2h_ = nullptr;          // pinned
  void (*iteration_begin_)() = nullptr;
  std::uint64_t live_bytes_ = 0;
  std::uint64_t peak_bytes_ = 0;
  std::uint64_t launches_ = 0;         // trace launches replayed
  std::uint64_t kernel_launches_ = 0;  // replay_kernel launches (splits count)
};

}  // namespace

int main(int argc, char** argv) {
  const options opt = parse_options(argc, argv);
  auto read = prof::read_file(opt.profile);
  if (auto* e = std::get_if<prof::format_error>(&read)) {
    std::fprintf(stderr, "oversub-replay: %s: %s\n", opt.profile.c_str(), e->message.c_str());
    return 1;
  }
  prof::profile& p = std::get<prof::profile>(read);
  if (opt.scale != 1.0) {
    auto scaled = [&](std::uint64_t bytes) -> std::uint64_t {
      if (bytes == 0) return 0;
      const double b = std::ceil(static_cast<double>(bytes) * opt.scale / 4.0) * 4.0;
      return std::max<std::uint64_t>(4, static_cast<std::uint64_t>(b));
    };
    for (auto& a : p.allocations) a.bytes = scaled(a.bytes);
    for (auto& c : p.copies) c.bytes = scaled(c.bytes);
  }
  if (p.launches.empty()) {
    std::fprintf(stderr, "oversub-replay: %s: the profile has no launches\n",
                 opt.profile.c_str());
    return 1;
  }
  const plan pl = make_plan(p);
  std::size_t fresh = 0;
  std::uint64_t copy_bytes = 0;
  for (const auto& a : p.allocations) fresh += a.long_lived ? 0 : 1;
  for (const auto& c : p.copies) copy_bytes += c.bytes;
  if (opt.scale != 1.0) std::printf("scale: buffer and copy bytes x %g\n", opt.scale);
  std::printf("trace: %s: %zu launches, %zu allocations (%zu per-iteration, %zu long-lived), "
              "%zu copies (%" PRIu64 " bytes), kernel time %" PRIu64 " ns, program %s\n",
              opt.profile.c_str(), p.launches.size(), p.allocations.size(), fresh,
              p.allocations.size() - fresh, p.copies.size(), copy_bytes,
              p.device.iteration_kernel_ns, p.program.empty() ? "?" : p.program.c_str());
  std::printf("plan: peak %" PRIu64 " bytes (long-lived %" PRIu64 "), at most %zu buffers "
              "per launch, %zu launches split, %zu lifetimes widened, %zu long-lived freed "
              "by the trace kept, %zu copies skipped\n",
              pl.peak_bytes, pl.long_lived_bytes, pl.max_buffers, pl.split_launches,
              pl.widened, pl.freed_long_lived, pl.skipped_copies);
  std::fflush(stdout);

  double total_ms = 0;
  std::uint64_t peak = 0, launches = 0, kernels = 0;
  std::size_t verified = 0;
  replay_status st;
  bool marked = false;
  {
    replayer run(opt, p, pl);
    marked = run.marks_iterations();
    for (int iter = 0; iter < opt.iters; ++iter) {
      const double ms = run.iteration(iter);
      total_ms += ms;
      if (!opt.quiet) {
        std::printf("iter %d time %.6f ms checksum 0x%016llx words checked %llu\n", iter, ms,
                    run.status().checksum, run.status().words_checked);
        std::fflush(stdout);
      }
    }
    st = run.status();
    peak = run.peak_bytes();
    launches = run.launches();
    kernels = run.kernel_launches();
    verified = run.buffers_verified();
  }
  if (opt.corrupt_after >= 0 && launches < static_cast<std::uint64_t>(opt.corrupt_after)) {
    std::printf("corrupt: launch %lld never reached (%" PRIu64 " replayed)\n",
                opt.corrupt_after, launches);
  }
  std::printf("iterations marked for oversub: %s\n", marked ? "yes" : "no");
  std::printf("peak device bytes: %" PRIu64 "\n", peak);
  std::printf("iteration time: %.6f ms mean over %d (recorded kernel time %.6f ms)\n",
              total_ms / opt.iters, opt.iters,
              static_cast<double>(p.device.iteration_kernel_ns) / 1e6);
  std::printf("launches: %" PRIu64 " replayed as %" PRIu64 " kernels\n", launches, kernels);
  if (opt.check) {
    std::printf("data verified: %zu buffers x %" PRIu64 " launches (%llu words checked, "
                "%llu mismatches)\n",
                verified, launches, st.words_checked, st.mismatches);
  } else {
    std::printf("data not checked (--no-check)\n");
  }
  std::printf("checksum: 0x%016llx\n", st.checksum);
  return 0;
}
