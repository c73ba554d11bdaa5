// randprog: a randomized layered program on the CUDA runtime API, the workload of
// oversub's randomized swap test (tests/preload/swap_random_test.py). Built by nvcc
// for a real GPU, or by g++ (through randprog_sim.cc) for simgpu, like simtrain.
//
// From --seed it draws a program of --layers layers. Layer l makes a new buffer of a
// random size (--min-kib to --max-kib, log-uniform, any float count) from the
// previous layer's buffer, sometimes also from a skip to an older one, and its own
// long-lived weights; some layers go through a temporary buffer first. Weights and a
// two-float result buffer are allocated once; every other buffer is a cudaMalloc
// when it is produced and a cudaFree right after its last use, so lifetimes vary:
// an activation kept for the backward half lives until then, one not kept dies after
// its last forward reader. The backward half walks the layers in reverse, making a
// gradient per layer from the next one, the layer's weights and (if kept) its input
// activation, accumulating skip gradients (zeroed with cudaMemsetAsync) and updating
// the weights, so every iteration computes something new from the last one.
//
// --streams 2 puts each forward step, backward step and weight update on a random
// one of two streams. Every buffer remembers, with events of its own, the stream
// that last wrote it and the streams that read it since; an operation on another
// stream first waits on those events, so nothing is unordered (simgpu's race
// detector stays silent) and the arithmetic, hence every bit, is the same as with
// one stream. --iters repeats the same program with the same allocation sequence.
//
// Prints the program drawn, then per iteration the checksum (sum of the input's
// gradient plus sum of the forward output) with its bits, then the peak of the
// bytes it held from cudaMalloc and the most bytes one operation touched. Exits 1
// with one line on stderr on any CUDA error (CUDA_CHECK, gpu_compat.h).
#include <algorithm>
#include <cinttypes>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <initializer_list>
#include <string>
#include <string_view>
#include <vector>

#include "gpu_compat.h"
#include "randprog_kernels.cuh"

namespace {

constexpr int kThreadsPerBlock = 128;

struct options {
  std::uint64_t seed = 1;
  int layers = 16;
  int iters = 3;
  int streams = 1;
  int min_kib = 64;
  int max_kib = 1024;
  int pointer_arrays = 0;  // 1: updates find their weights in a device pointer table
};

[[noreturn]] void usage(const char* prog, const std::string& message) {
  std::fprintf(stderr, "%s: %s\nusage: %s [--seed N] [--layers N] [--iters N] "
               "[--streams 1|2] [--min-kib N] [--max-kib N] [--pointer-arrays 0|1]\n", prog, message.c_str(), prog);
  std::exit(2);
}

options parse_options(int argc, char** argv) {
  options opt;
  const char* prog = argv[0];
  for (int i = 1; i < argc; ++i) {
    std::string_view name = argv[i];
    if (name == "-h" || name == "--help") usage(prog, "a random layered program");
    if (i + 1 >= argc) usage(prog, "'" + std::string(name) + "' needs a value");
    const char* text = argv[++i];
    char* end = nullptr;
    unsigned long long v = std::strtoull(text, &end, 10);
    if (*text == '\0' || *text == '-' || *end != '\0') {
      usage(prog, std::string(name) + ": invalid value '" + text + "'");
    }
    auto bounded = [&](unsigned long long lo, unsigned long long hi) {
      if (v < lo || v > hi) {
        usage(prog, std::string(name) + ": want " + std::to_string(lo) + " to " +
                        std::to_string(hi));
      }
      return static_cast<int>(v);
    };
    if (name == "--seed") opt.seed = v;
    else if (name == "--layers") opt.layers = bounded(1, 4096);
    else if (name == "--iters") opt.iters = bounded(1, 100000);
    else if (name == "--streams") opt.streams = bounded(1, 2);
    else if (name == "--min-kib") opt.min_kib = bounded(1, 1 << 20);
    else if (name == "--max-kib") opt.max_kib = bounded(1, 1 << 20);
    else if (name == "--pointer-arrays") opt.pointer_arrays = bounded(0, 1);
    else usage(prog, "unknown option '" + std::string(name) + "'");
  }
  if (opt.min_kib > opt.max_kib) usage(prog, "--min-kib is above --max-kib");
  return opt;
}

// splitmix64: the host's deterministic random numbers.
std::uint64_t next_random(std::uint64_t& state) {
  std::uint64_t z = (state += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

// Uniform in [0, 1) with 53 bits; below(n) uniform in [0, n).
double uniform01(std::uint64_t& state) {
  return static_cast<double>(next_random(state) >> 11) * 0x1.0p-53;
}
int below(std::uint64_t& state, int n) {
  return static_cast<int>(next_random(state) % static_cast<std::uint64_t>(n));
}

// A float count whose byte size is log-uniform in [lo_kib, hi_kib] KiB.
int random_count(std::uint64_t& state, int lo_kib, int hi_kib) {
  double lo = std::log(256.0 * lo_kib);
  double hi = std::log(256.0 * hi_kib);
  return std::max(1, static_cast<int>(std::exp(lo + (hi - lo) * uniform01(state))));
}

std::uint32_t float_bits(float f) {
  std::uint32_t u = 0;
  std::memcpy(&u, &f, sizeof u);
  return u;
}

dim3 grid_for(std::size_t threads) {
  return dim3(static_cast<unsigned>((threads + kThreadsPerBlock - 1) / kThreadsPerBlock));
}

// The program drawn from the seed. Layer l (1..layers) reads act[l-1] and act[skip]
// and writes act[l]; its backward step reads gradient l and act[l-1] if keep.
struct layer_plan {
  int n = 0;        // floats of act[l] (for l = 0: the input)
  int skip = -1;    // an older activation read as well, or -1
  int temp = 0;     // floats of a temporary made first, or 0
  int wn = 0;       // floats of the layer's weights
  bool keep = true; // act[l] is kept for backward step l+1
  int fwd = 0, bwd = 0, upd = 0;  // streams of the forward, backward and update
  int last_forward_use = 0;       // the last layer whose forward step reads act[l]
};

std::vector<layer_plan> draw_program(const options& opt) {
  std::uint64_t state = opt.seed * 0x100000001b3ULL + 0x2545f4914f6cdd1dULL;
  std::vector<layer_plan> plan(static_cast<std::size_t>(opt.layers) + 1);
  for (int l = 0; l <= opt.layers; ++l) {
    layer_plan& p = plan[static_cast<std::size_t>(l)];
    p.n = random_count(state, opt.min_kib, opt.max_kib);
    p.last_forward_use = l + 1;
    if (l == 0) continue;
    if (l >= 2 && below(state, 2) == 0) p.skip = below(state, l - 1);
    if (below(state, 4) == 0) p.temp = random_count(state, opt.min_kib, opt.max_kib);
    p.wn = random_count(state, std::max(1, opt.min_kib / 4), std::max(1, opt.max_kib / 4));
    p.keep = below(state, 4) != 0;
    // Drawn with one stream too, so --streams 1 and 2 draw the same program.
    p.fwd = below(state, 2);
    p.bwd = below(state, 2);
    p.upd = below(state, 2);
    if (opt.streams == 1) p.fwd = p.bwd = p.upd = 0;
  }
  for (int l = 1; l <= opt.layers; ++l) {
    const layer_plan& p = plan[static_cast<std::size_t>(l)];
    if (p.skip >= 0) plan[static_cast<std::size_t>(p.skip)].last_forward_use = l;
  }
  return plan;
}

// A device buffer of floats with the events that order its uses across streams.
struct buffer {
  float* ptr = nullptr;
  int count = 0;
  int writer = -1;                  // stream of the last write, -1 for none
  cudaEvent_t written = nullptr;    // recorded after that write
  bool read_on[2] = {false, false}; // read on that stream since the last write
  cudaEvent_t read[2] = {nullptr, nullptr};  // recorded after the last such read
};

class runner {
 public:
  runner(const options& opt, std::vector<layer_plan> plan)
      : opt_(opt), plan_(std::move(plan)), layers_(opt.layers) {
    if (opt.streams == 2) {
      for (cudaStream_t& s : streams_) {
        CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
      }
    }
    weights_.resize(plan_.size());
    for (int l = 1; l <= layers_; ++l) {
      const layer_plan& p = at(l);
      buffer& w = weights_[static_cast<std::size_t>(l)];
      allocate(w, p.wn);
      std::uint64_t state = opt.seed * 0x9e3779b97f4a7c15ULL + static_cast<std::uint64_t>(l);
      std::vector<float> host(static_cast<std::size_t>(p.wn));
      for (float& v : host) v = static_cast<float>(4.0 * uniform01(state) - 2.0);
      CUDA_CHECK(cudaMemcpy(w.ptr, host.data(), host.size() * sizeof(float),
                            cudaMemcpyHostToDevice));
    }
    allocate(sums_, 2);
    if (opt.pointer_arrays != 0) {
      // The table of weight pointers, as many floats as the pointers take.
      std::vector<float*> table(weights_.size(), nullptr);
      for (std::size_t l = 0; l < weights_.size(); ++l) table[l] = weights_[l].ptr;
      allocate(weight_table_, static_cast<int>(table.size() * sizeof(float*) / sizeof(float)));
      CUDA_CHECK(cudaMemcpy(weight_table_.ptr, table.data(), table.size() * sizeof(float*),
                            cudaMemcpyHostToDevice));
    }
    CUDA_CHECK(cudaMallocHost(&host_input_, sizeof(float) * at(0).n));
    CUDA_CHECK(cudaMallocHost(&host_sums_, sizeof(float) * 2));
  }

  runner(const runner&) = delete;
  runner& operator=(const runner&) = delete;

  ~runner() {
    CUDA_CHECK(cudaDeviceSynchronize());
    for (buffer& w : weights_) {
      if (w.ptr != nullptr) release(w);
    }
    release(sums_);
    if (weight_table_.ptr != nullptr) release(weight_table_);
    for (cudaEvent_t ev : spare_events_) CUDA_CHECK(cudaEventDestroy(ev));
    CUDA_CHECK(cudaFreeHost(host_input_));
    CUDA_CHECK(cudaFreeHost(host_sums_));
    if (opt_.streams == 2) {
      for (cudaStream_t s : streams_) CUDA_CHECK(cudaStreamDestroy(s));
    }
  }

  // Runs the program once; returns the two sums (output, input gradient).
  void iteration(int iter, float sums[2]) {
    std::vector<buffer> act(plan_.size());
    std::vector<buffer> skip_grad(plan_.size());

    // The input, drawn on the host and uploaded on stream 0.
    std::uint64_t state = (opt_.seed ^ 0x5bd1e995ULL) * 0x9e3779b97f4a7c15ULL +
                          static_cast<std::uint64_t>(iter);
    for (int i = 0; i < at(0).n; ++i) {
      host_input_[i] = static_cast<float>(2.0 * uniform01(state) - 1.0);
    }
    allocate(act[0], at(0).n);
    before(0, {}, {&act[0]});
    CUDA_CHECK(cudaMemcpyAsync(act[0].ptr, host_input_, sizeof(float) * at(0).n,
                               cudaMemcpyHostToDevice, streams_[0]));
    after(0, {}, {&act[0]});

    for (int l = 1; l <= layers_; ++l) {
      const layer_plan& p = at(l);
      buffer& w = weights_[static_cast<std::size_t>(l)];
      buffer* prev = &act[static_cast<std::size_t>(l - 1)];
      buffer* skip = p.skip >= 0 ? &act[static_cast<std::size_t>(p.skip)] : nullptr;
      buffer temp;
      if (p.temp > 0) {
        allocate(temp, p.temp);
        forward(p.fwd, *prev, skip, w, temp);
        prev = &temp;
        skip = nullptr;
      }
      allocate(act[static_cast<std::size_t>(l)], p.n);
      forward(p.fwd, *prev, skip, w, act[static_cast<std::size_t>(l)]);
      if (temp.ptr != nullptr) release(temp);
      for (int j = 0; j < l; ++j) {
        buffer& a = act[static_cast<std::size_t>(j)];
        if (a.ptr != nullptr && !at(j).keep && at(j).last_forward_use == l) release(a);
      }
    }

    // The backward half: gradient of the output, then each layer in reverse.
    buffer g;
    buffer& out = act[static_cast<std::size_t>(layers_)];
    allocate(g, out.count);
    backward(at(layers_).bwd, out, weights_[static_cast<std::size_t>(layers_)], nullptr, g);
    sum(at(layers_).bwd, out, 0);
    release(out);
    for (int l = layers_; l >= 1; --l) {
      const layer_plan& p = at(l);
      buffer& w = weights_[static_cast<std::size_t>(l)];
      buffer& in = act[static_cast<std::size_t>(l - 1)];
      buffer gp;
      allocate(gp, at(l - 1).n);
      backward(p.bwd, g, w, in.ptr != nullptr ? &in : nullptr, gp);
      if (p.skip >= 0) {
        buffer& sg = skip_grad[static_cast<std::size_t>(p.skip)];
        if (sg.ptr == nullptr) {
          allocate(sg, at(p.skip).n);
          before(p.bwd, {}, {&sg});
          CUDA_CHECK(cudaMemsetAsync(sg.ptr, 0, sizeof(float) * sg.count, streams_[p.bwd]));
          after(p.bwd, {}, {&sg});
        }
        accumulate(p.bwd, sg, g);
      }
      before(p.upd, {&g}, {&w});
      if (opt_.pointer_arrays != 0) {
        LAUNCH(rp_update_indirect, grid_for(w.count), kThreadsPerBlock, streams_[p.upd],
               reinterpret_cast<float* const*>(weight_table_.ptr), l, w.count, g.ptr, g.count);
      } else {
        LAUNCH(rp_update, grid_for(w.count), kThreadsPerBlock, streams_[p.upd], w.ptr,
               w.count, g.ptr, g.count);
      }
      after(p.upd, {&g}, {&w});
      release(g);
      if (in.ptr != nullptr) release(in);
      g = gp;
      buffer& sg = skip_grad[static_cast<std::size_t>(l - 1)];
      if (sg.ptr != nullptr) {
        accumulate(p.bwd, g, sg);
        release(sg);
      }
    }
    sum(at(1).bwd, g, 1);
    release(g);

    before(at(1).bwd, {&sums_}, {});
    CUDA_CHECK(cudaMemcpyAsync(host_sums_, sums_.ptr, 2 * sizeof(float),
                               cudaMemcpyDeviceToHost, streams_[at(1).bwd]));
    after(at(1).bwd, {&sums_}, {});
    CUDA_CHECK(cudaDeviceSynchronize());
    sums[0] = host_sums_[0];
    sums[1] = host_sums_[1];
  }

  std::size_t peak_bytes() const { return peak_bytes_; }
  std::size_t largest_operation_bytes() const { return largest_op_bytes_; }

 private:
  const layer_plan& at(int l) const { return plan_[static_cast<std::size_t>(l)]; }

  cudaEvent_t new_event() {
    if (!spare_events_.empty()) {
      cudaEvent_t ev = spare_events_.back();
      spare_events_.pop_back();
      return ev;
    }
    cudaEvent_t ev = nullptr;
    CUDA_CHECK(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming));
    return ev;
  }

  void allocate(buffer& b, int count) {
    b = buffer{};
    b.count = count;
    CUDA_CHECK(cudaMalloc(&b.ptr, sizeof(float) * static_cast<std::size_t>(count)));
    live_bytes_ += sizeof(float) * static_cast<std::size_t>(count);
    peak_bytes_ = std::max(peak_bytes_, live_bytes_);
    if (opt_.streams == 2) {
      b.written = new_event();
      b.read[0] = new_event();
      b.read[1] = new_event();
    }
  }

  // cudaFree synchronises the device, so no use of b can still be running.
  void release(buffer& b) {
    CUDA_CHECK(cudaFree(b.ptr));
    live_bytes_ -= sizeof(float) * static_cast<std::size_t>(b.count);
    for (cudaEvent_t ev : {b.written, b.read[0], b.read[1]}) {
      if (ev != nullptr) spare_events_.push_back(ev);
    }
    b = buffer{};
  }

  // Orders an operation on stream s that reads `reads` and writes `writes` after
  // every earlier use on the other stream it conflicts with.
  void before(int s, std::initializer_list<buffer*> reads,
              std::initializer_list<buffer*> writes) {
    std::size_t bytes = 0;
    for (const auto* list : {&reads, &writes}) {
      for (buffer* b : *list) bytes += sizeof(float) * static_cast<std::size_t>(b->count);
    }
    largest_op_bytes_ = std::max(largest_op_bytes_, bytes);
    if (opt_.streams != 2) return;
    for (const auto* list : {&reads, &writes}) {
      for (buffer* b : *list) {
        if (b->writer >= 0 && b->writer != s) {
          CUDA_CHECK(cudaStreamWaitEvent(streams_[s], b->written, 0));
        }
      }
    }
    for (buffer* b : writes) {
      if (b->read_on[1 - s]) CUDA_CHECK(cudaStreamWaitEvent(streams_[s], b->read[1 - s], 0));
    }
  }

  void after(int s, std::initializer_list<buffer*> reads,
             std::initializer_list<buffer*> writes) {
    if (opt_.streams != 2) return;
    for (buffer* b : reads) {
      CUDA_CHECK(cudaEventRecord(b->read[s], streams_[s]));
      b->read_on[s] = true;
    }
    for (buffer* b : writes) {
      CUDA_CHECK(cudaEventRecord(b->written, streams_[s]));
      b->writer = s;
      b->read_on[0] = b->read_on[1] = false;
    }
  }

  void forward(int s, buffer& prev, buffer* skip, buffer& w, buffer& out) {
    if (skip != nullptr) before(s, {&prev, skip, &w}, {&out});
    else before(s, {&prev, &w}, {&out});
    LAUNCH(rp_forward, grid_for(out.count), kThreadsPerBlock, streams_[s], prev.ptr,
           prev.count, skip != nullptr ? skip->ptr : nullptr,
           skip != nullptr ? skip->count : 0, w.ptr, w.count, out.ptr, out.count);
    if (skip != nullptr) after(s, {&prev, skip, &w}, {&out});
    else after(s, {&prev, &w}, {&out});
  }

  void backward(int s, buffer& g, buffer& w, buffer* act, buffer& out) {
    if (act != nullptr) before(s, {&g, &w, act}, {&out});
    else before(s, {&g, &w}, {&out});
    LAUNCH(rp_backward, grid_for(out.count), kThreadsPerBlock, streams_[s], g.ptr, g.count,
           w.ptr, w.count, act != nullptr ? act->ptr : nullptr,
           act != nullptr ? act->count : 0, out.ptr, out.count);
    if (act != nullptr) after(s, {&g, &w, act}, {&out});
    else after(s, {&g, &w}, {&out});
  }

  void accumulate(int s, buffer& dst, buffer& src) {
    before(s, {&src}, {&dst});
    LAUNCH(rp_accumulate, grid_for(dst.count), kThreadsPerBlock, streams_[s], dst.ptr,
           dst.count, src.ptr, src.count);
    after(s, {&src}, {&dst});
  }

  void sum(int s, buffer& v, int slot) {
    before(s, {&v}, {&sums_});
    LAUNCH(rp_sum, dim3(1), 1, streams_[s], v.ptr, v.count, sums_.ptr, slot);
    after(s, {&v}, {&sums_});
  }

  const options opt_;
  const std::vector<layer_plan> plan_;
  const int layers_;
  cudaStream_t streams_[2] = {nullptr, nullptr};  // the legacy stream with --streams 1
  std::vector<buffer> weights_;  // index l: layer l's (index 0 unused)
  buffer sums_;
  buffer weight_table_;  // --pointer-arrays 1: float* [layers + 1], the weights
  std::vector<cudaEvent_t> spare_events_;
  float* host_input_ = nullptr;  // pinned
  float* host_sums_ = nullptr;   // pinned
  std::size_t live_bytes_ = 0;
  std::size_t peak_bytes_ = 0;
  std::size_t largest_op_bytes_ = 0;
};

}  // namespace

int main(int argc, char** argv) {
  const options opt = parse_options(argc, argv);
  std::vector<layer_plan> plan = draw_program(opt);
  std::printf("config: seed %" PRIu64 " layers %d iters %d streams %d sizes %d-%d KiB%s\n",
              opt.seed, opt.layers, opt.iters, opt.streams, opt.min_kib, opt.max_kib,
              opt.pointer_arrays != 0 ? " pointer-arrays" : "");
  std::printf("input: %d floats\n", plan[0].n);
  for (int l = 1; l <= opt.layers; ++l) {
    const layer_plan& p = plan[static_cast<std::size_t>(l)];
    std::printf("layer %d: %d floats, weights %d, skip %d, temp %d, %s, streams %d/%d/%d\n",
                l, p.n, p.wn, p.skip, p.temp, p.keep ? "kept" : "not kept", p.fwd, p.bwd,
                p.upd);
  }
  std::fflush(stdout);
  std::size_t peak = 0;
  std::size_t largest = 0;
  {
    runner run(opt, std::move(plan));
    for (int iter = 0; iter < opt.iters; ++iter) {
      float sums[2] = {0.0f, 0.0f};
      run.iteration(iter, sums);
      const float checksum = sums[0] + sums[1];
      std::printf("iter %d checksum %.9e (bits 0x%08" PRIx32 ") output 0x%08" PRIx32
                  " gradient 0x%08" PRIx32 "\n",
                  iter, static_cast<double>(checksum), float_bits(checksum),
                  float_bits(sums[0]), float_bits(sums[1]));
      std::fflush(stdout);
    }
    peak = run.peak_bytes();
    largest = run.largest_operation_bytes();
  }
  std::printf("peak device bytes: %zu\n", peak);
  std::printf("largest operation bytes: %zu\n", largest);
  std::fflush(stdout);
  return 0;
}
