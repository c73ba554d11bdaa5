// simtrain: a small deterministic trainer written against the CUDA runtime API, the
// training workload oversub is tested with. Built by nvcc for a real GPU, or by g++
// (through simtrain_sim.cc) for simgpu; gpu_compat.h makes the difference.
//
// The model: `depth` fully connected width x width layers with bias and ReLU, a
// residual add closing every block of 2 layers (out = relu(W2 relu(W1 u)) + u), a
// final width -> 16 layer, mean squared error against a synthetic target computed
// from the input. Full backward pass, Adam with long-lived moment buffers. Every
// iteration draws a fresh batch on the host and uploads it from pinned memory.
//
// Memory behaves like a framework's with its cache off: parameters, gradients and
// Adam state are allocated once at start; every activation and temporary is
// allocated when produced and freed right after its last use (tensors are
// reference counted, as a framework's are; forward activations live until their
// backward use). --caching serves the same requests from caching_allocator.
// --streams 2 uploads the batch and runs each layer's Adam step on a second stream
// as soon as its gradient is ready; events order every cross-stream use, so the
// arithmetic, and thus every loss bit, is the same in all modes.
//
// What PyTorch does on a GPU beyond that (Note [PyTorch-like variants]):
//   --graphs          the step (forward, backward, Adam) is captured once on a
//                     non-default stream, its temporaries allocated from a private
//                     pool during capture, and replayed with cudaGraphLaunch; each
//                     iteration copies its batch into the graph's static inputs and
//                     its Adam bias corrections into a static device buffer first;
//                     with --graph-layers N, a graph every N layers of each pass,
//                     replayed in turn, as torch.compile splits a model;
//   --pointer-arrays  Adam is one launch per step chasing a device array of pointers;
//   --foreach         Adam is one launch per step over a tensor list passed by value
//                     in a parameter block over 4 KiB;
//   --caching expandable  segments the program reserves and maps itself
//                     (expandable_allocator.h);
//   --caching async   a cudaMallocAsync and cudaFreeAsync per tensor, CUDA's pool
//                     caching (device_allocator.h's async_allocator).
// None changes the arithmetic of any element, so every loss bit is the plain run's.
#include <algorithm>
#include <cinttypes>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "device_allocator.h"
#include "expandable_allocator.h"
#include "gpu_compat.h"
#include "kernels.cuh"
#include "options.h"

namespace {

constexpr int kOutFeatures = 16;      // outputs of the final layer (at most width)
constexpr int kThreadsPerBlock = 128;
constexpr float kBeta1 = 0.9f;
constexpr float kBeta2 = 0.999f;
constexpr float kEpsilon = 1e-8f;

dim3 grid_for(std::size_t threads) {
  return dim3(static_cast<unsigned>((threads + kThreadsPerBlock - 1) / kThreadsPerBlock));
}

// splitmix64: the host's deterministic random numbers.
std::uint64_t next_random(std::uint64_t& state) {
  std::uint64_t z = (state += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

// Uniform in [-1, 1), exactly representable (24 random bits).
float uniform_pm1(std::uint64_t& state) {
  return static_cast<float>(next_random(state) >> 40) * (2.0f / 16777216.0f) - 1.0f;
}

std::uint32_t float_bits(float f) {
  std::uint32_t u = 0;
  std::memcpy(&u, &f, sizeof u);
  return u;
}

// A reference-counted device buffer of floats; returned to its allocator when the
// last reference goes.
class tensor {
 public:
  tensor() = default;
  tensor(device_allocator& alloc, std::size_t count, cudaStream_t stream)
      : storage_(std::make_shared<storage>(alloc, count, stream)) {}
  float* data() const { return storage_->ptr; }
  std::size_t bytes() const { return storage_->count * sizeof(float); }
  explicit operator bool() const { return storage_ != nullptr; }
  void record_stream(cudaStream_t stream) const {
    storage_->alloc->record_stream(storage_->ptr, stream);
  }
  void reset() { storage_.reset(); }

 private:
  struct storage {
    device_allocator* alloc;
    float* ptr;
    std::size_t count;
    storage(device_allocator& a, std::size_t n, cudaStream_t stream)
        : alloc(&a), ptr(static_cast<float*>(a.allocate(n * sizeof(float), stream))),
          count(n) {}
    storage(const storage&) = delete;
    storage& operator=(const storage&) = delete;
    ~storage() { alloc->deallocate(ptr); }
  };
  std::shared_ptr<storage> storage_;
};

// One fully connected layer's long-lived state. Each buffer holds the weights
// [out x in] followed by the bias [out].
struct layer {
  int in = 0;
  int out = 0;
  tensor param, grad, adam_m, adam_v;
  int count() const { return out * in + out; }
  float* weight() const { return param.data(); }
  float* bias() const { return param.data() + static_cast<std::size_t>(out) * in; }
  float* weight_grad() const { return grad.data(); }
  float* bias_grad() const { return grad.data() + static_cast<std::size_t>(out) * in; }
};

std::size_t parameter_count(const options& opt) {
  std::size_t w = static_cast<std::size_t>(opt.width);
  std::size_t o = static_cast<std::size_t>(std::min(kOutFeatures, opt.width));
  return static_cast<std::size_t>(opt.depth) * (w * w + w) + o * w + o;
}

// The peak of the direct (uncached) mode in bytes, from the order in which
// trainer::step allocates and frees: parameters, gradients and the two Adam moments,
// plus the larger of the live set at the end of the forward pass and the one early
// in the backward pass.
std::size_t footprint_estimate_bytes(const options& opt) {
  std::size_t bw = static_cast<std::size_t>(opt.batch) * opt.width;
  std::size_t bo = static_cast<std::size_t>(opt.batch) * std::min(kOutFeatures, opt.width);
  std::size_t d = static_cast<std::size_t>(opt.depth);
  std::size_t stored = 1 + d + d / 2;  // input, activations, residual outputs
  std::size_t forward = bw * stored + 3 * bo + 1;
  std::size_t backward = bw * (stored + 1) + bo + 1;
  if (d % 2 == 1) backward = std::max(backward, bw * (stored + 2) + 1);
  return (4 * parameter_count(opt) + std::max(forward, backward)) * sizeof(float);
}

// Note [PyTorch-like variants]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// --graphs follows torch.cuda.graph / torch.compile(mode="reduce-overhead"): the
// capture runs on a non-default stream in cudaStreamCaptureModeGlobal, and every
// tensor the step makes comes from the graph's private pool (a caching_allocator of
// its own; Note [Allocating during capture] in device_allocator.h), whose segments
// are cudaMalloc'd during the capture in relaxed mode. Nothing runs at capture: the
// first replay computes iteration 0. The batch and target live in static input
// tensors allocated before the capture, the loss in a static output the capture
// keeps; Adam's bias corrections, which change every iteration, are read from a
// device buffer (adam_step_dev) written before each replay, as PyTorch's capturable
// Adam keeps its step on the device. With --streams 2 the Adam steps fork onto the
// side stream inside the capture and join the capture stream at its end; the
// upload stays outside, on the side stream, ordered before the replay by an event.
//
// --pointer-arrays and --foreach do the Adam step of every layer at once when the
// last gradient is ready (on the side stream with --streams 2), reading the bias
// corrections from the same device buffer; a per-layer step would have done the
// same arithmetic to the same elements, only earlier, and nothing reads a layer's
// parameters between its gradient and the end of the backward pass.
class trainer {
 public:
  // graph_pool: the private pool of --graphs (not owned), else null.
  trainer(const options& opt, device_allocator& alloc, caching_allocator* graph_pool)
      : opt_(opt), alloc_(alloc), batch_(opt.batch), width_(opt.width),
        out_(std::min(kOutFeatures, opt.width)), two_streams_(opt.streams == 2),
        graphs_(opt.graphs), batched_adam_(opt.pointer_arrays || opt.foreach),
        device_scalars_(graphs_ || batched_adam_), graph_pool_(graph_pool),
        step_alloc_(&alloc) {
    if (two_streams_ || graphs_) {
      CUDA_CHECK(cudaStreamCreateWithFlags(&main_, cudaStreamNonBlocking));
    }
    if (two_streams_) {
      CUDA_CHECK(cudaStreamCreateWithFlags(&side_, cudaStreamNonBlocking));
      CUDA_CHECK(cudaEventCreateWithFlags(&side_joined_, cudaEventDisableTiming));
    }
    CUDA_CHECK(cudaEventCreateWithFlags(&upload_done_, cudaEventDisableTiming));
    CUDA_CHECK(cudaMallocHost(&host_x_, sizeof(float) * batch_ * width_));
    CUDA_CHECK(cudaMallocHost(&host_t_, sizeof(float) * batch_ * out_));
    CUDA_CHECK(cudaMallocHost(&host_loss_, sizeof(float)));
    CUDA_CHECK(cudaMallocHost(&host_scalars_, 2 * sizeof(float)));
    for (int l = 0; l <= opt.depth; ++l) add_layer(l);
    if (device_scalars_) step_scalars_ = make(2);
    if (opt.log_every > 0) log_sums_ = make(static_cast<std::size_t>(opt.depth) + 2);
    if (opt.pointer_arrays) make_pointer_table();
    if (graphs_) {
      cudaStream_t up = two_streams_ ? side_ : main_;
      static_x_ = tensor(alloc_, static_cast<std::size_t>(batch_) * width_, up);
      static_t_ = tensor(alloc_, static_cast<std::size_t>(batch_) * out_, up);
    }
    CUDA_CHECK(cudaStreamSynchronize(main_));
  }

  trainer(const trainer&) = delete;
  trainer& operator=(const trainer&) = delete;

  ~trainer() {
    CUDA_CHECK(cudaDeviceSynchronize());
    for (cudaGraphExec_t e : graph_execs_) CUDA_CHECK(cudaGraphExecDestroy(e));
    for (cudaGraph_t g : graphs_captured_) CUDA_CHECK(cudaGraphDestroy(g));
    layers_.clear();
    for (tensor* t : {&static_x_, &static_t_, &static_loss_, &step_scalars_, &pointer_table_,
                      &tensor_counts_, &log_sums_}) {
      t->reset();
    }
    if (side_joined_ != nullptr) CUDA_CHECK(cudaEventDestroy(side_joined_));
    for (cudaEvent_t ev : grad_ready_) CUDA_CHECK(cudaEventDestroy(ev));
    for (cudaEvent_t ev : update_done_) CUDA_CHECK(cudaEventDestroy(ev));
    CUDA_CHECK(cudaEventDestroy(upload_done_));
    CUDA_CHECK(cudaFreeHost(host_x_));
    CUDA_CHECK(cudaFreeHost(host_t_));
    CUDA_CHECK(cudaFreeHost(host_loss_));
    CUDA_CHECK(cudaFreeHost(host_scalars_));
    if (main_ != nullptr) CUDA_CHECK(cudaStreamDestroy(main_));
    if (side_ != nullptr) CUDA_CHECK(cudaStreamDestroy(side_));
  }

  // --log-every: the sum of every layer's parameters (weights and bias), each layer's
  // summed on the device, then those sums; read back and returned. It only reads the
  // parameters, so the losses stay those of a run without it.
  float weights_sum() {
    const int layers = static_cast<int>(layers_.size());
    if (two_streams_) {  // the updates run on the side stream
      CUDA_CHECK(cudaEventRecord(side_joined_, side_));
      CUDA_CHECK(cudaStreamWaitEvent(main_, side_joined_, 0));
    }
    for (int l = 0; l < layers; ++l) {
      LAUNCH(sum_scaled, dim3(1), 1, main_, layers_[l].param.data(), log_sums_.data() + l,
             layers_[l].count(), 1.0f);
    }
    LAUNCH(sum_scaled, dim3(1), 1, main_, log_sums_.data(), log_sums_.data() + layers, layers,
           1.0f);
    CUDA_CHECK(gpu::memcpy_async(host_loss_, log_sums_.data() + layers, sizeof(float),
                                 cudaMemcpyDeviceToHost, main_));
    CUDA_CHECK(cudaStreamSynchronize(main_));
    return *host_loss_;
  }

  // One training iteration; returns its loss (before the update).
  float step(int iter) {
    if (graphs_) {
      upload_batch(iter, static_x_, static_t_);
      if (graph_execs_.empty()) capture(iter);
      for (cudaGraphExec_t e : graph_execs_) CUDA_CHECK(cudaGraphLaunch(e, main_));
      return read_loss(static_loss_);
    }
    tensor x, target;
    upload_batch(iter, x, target);
    tensor loss = forward_backward(std::move(x), std::move(target), iter);
    return read_loss(loss);
  }

 private:
  // Captures forward_backward into graph_execs_ on main_ (one graph, or one every
  // --graph-layers layers: split_capture), its tensors from the private pool (Note
  // [PyTorch-like variants]). The graphs share the pool and are replayed in the
  // order captured, so a block one frees and the next reuses is reused in the same
  // order at every replay.
  void capture(int iter) {
    graph_pool_->begin_capture();
    step_alloc_ = graph_pool_;
    capturing_ = true;
    CUDA_CHECK(cudaStreamBeginCapture(main_, cudaStreamCaptureModeGlobal));
    static_loss_ = forward_backward(static_x_, static_t_, iter);
    if (two_streams_) {
      CUDA_CHECK(cudaEventRecord(side_joined_, side_));
      CUDA_CHECK(cudaStreamWaitEvent(main_, side_joined_, 0));
    }
    end_graph();
    capturing_ = false;
    step_alloc_ = &alloc_;
    graph_pool_->end_capture();
    for (cudaGraph_t g : graphs_captured_) {
      cudaGraphExec_t e = nullptr;
      CUDA_CHECK(cudaGraphInstantiate(&e, g, 0));
      graph_execs_.push_back(e);
    }
  }

  void end_graph() {
    cudaGraph_t g = nullptr;
    CUDA_CHECK(cudaStreamEndCapture(main_, &g));
    graphs_captured_.push_back(g);
  }

  // --graph-layers: at the start of layer l of a pass (counted from the pass's first
  // layer), ends the graph being captured and begins the next.
  void split_capture(int l) {
    if (!capturing_ || opt_.graph_layers == 0 || l == 0 || l % opt_.graph_layers != 0) return;
    end_graph();
    CUDA_CHECK(cudaStreamBeginCapture(main_, cudaStreamCaptureModeGlobal));
  }

  float read_loss(const tensor& loss) {
    CUDA_CHECK(gpu::memcpy_async(host_loss_, loss.data(), sizeof(float),
                                 cudaMemcpyDeviceToHost, main_));
    CUDA_CHECK(cudaStreamSynchronize(main_));
    return *host_loss_;
  }

  // The step's work on the batch x and its target; returns the loss tensor (its
  // value before the update). Enqueues only: nothing here synchronises.
  tensor forward_backward(tensor x, tensor target, int iter) {
    const int depth = opt_.depth;
    const int bw = batch_ * width_;

    struct saved_tensors {
      tensor input, act;
    };
    std::vector<saved_tensors> saved(static_cast<std::size_t>(depth));
    tensor h = std::move(x);
    tensor block_in;
    for (int l = 0; l < depth; ++l) {
      const layer& ly = layers_[static_cast<std::size_t>(l)];
      split_capture(l);
      wait_for_update(l);
      if (l % 2 == 0) block_in = h;
      tensor a = make(bw);
      LAUNCH(matmul_nt, grid_for(bw), kThreadsPerBlock, main_, h.data(), ly.weight(),
             a.data(), batch_, width_, width_);
      LAUNCH(bias_act, grid_for(bw), kThreadsPerBlock, main_, a.data(), ly.bias(), batch_,
             width_, 1);
      saved[static_cast<std::size_t>(l)] = {h, a};
      if (l % 2 == 1) {
        tensor sum = make(bw);
        LAUNCH(residual_add, grid_for(bw), kThreadsPerBlock, main_, a.data(),
               block_in.data(), sum.data(), bw);
        h = std::move(sum);
        block_in.reset();
      } else {
        h = std::move(a);
      }
    }
    block_in.reset();

    const layer& last = layers_.back();
    const int bo = batch_ * out_;
    wait_for_update(depth);
    tensor y = make(bo);
    LAUNCH(matmul_nt, grid_for(bo), kThreadsPerBlock, main_, h.data(), last.weight(),
           y.data(), batch_, out_, width_);
    LAUNCH(bias_act, grid_for(bo), kThreadsPerBlock, main_, y.data(), last.bias(), batch_,
           out_, 0);
    tensor final_in = std::move(h);

    tensor row_loss = make(static_cast<std::size_t>(batch_));
    LAUNCH(squared_error_rows, grid_for(batch_), kThreadsPerBlock, main_, y.data(),
           target.data(), row_loss.data(), batch_, out_);
    tensor loss = make(1);
    LAUNCH(sum_scaled, dim3(1), 1, main_, row_loss.data(), loss.data(), batch_,
           1.0f / static_cast<float>(bo));
    row_loss.reset();
    tensor dy = make(bo);
    LAUNCH(squared_error_grad, grid_for(bo), kThreadsPerBlock, main_, y.data(),
           target.data(), dy.data(), bo, 2.0f / static_cast<float>(bo));
    y.reset();
    target.reset();

    LAUNCH(matmul_tn, grid_for(static_cast<std::size_t>(out_) * width_), kThreadsPerBlock,
           main_, dy.data(), final_in.data(), last.weight_grad(), out_, width_, batch_);
    LAUNCH(column_sum, grid_for(out_), kThreadsPerBlock, main_, dy.data(), last.bias_grad(),
           batch_, out_);
    tensor g = make(bw);
    LAUNCH(matmul_nn, grid_for(bw), kThreadsPerBlock, main_, dy.data(), last.weight(),
           g.data(), batch_, width_, out_);
    dy.reset();
    final_in.reset();
    gradient_ready(depth, iter);

    tensor skip;
    for (int l = depth - 1; l >= 0; --l) {
      const layer& ly = layers_[static_cast<std::size_t>(l)];
      saved_tensors& s = saved[static_cast<std::size_t>(l)];
      split_capture(depth - l);
      if (l % 2 == 1) skip = g;
      tensor dz = make(bw);
      LAUNCH(relu_backward, grid_for(bw), kThreadsPerBlock, main_, g.data(), s.act.data(),
             dz.data(), bw);
      g.reset();
      s.act.reset();
      LAUNCH(matmul_tn, grid_for(static_cast<std::size_t>(width_) * width_),
             kThreadsPerBlock, main_, dz.data(), s.input.data(), ly.weight_grad(), width_,
             width_, batch_);
      LAUNCH(column_sum, grid_for(width_), kThreadsPerBlock, main_, dz.data(),
             ly.bias_grad(), batch_, width_);
      s.input.reset();
      if (l > 0) {
        g = make(bw);
        LAUNCH(matmul_nn, grid_for(bw), kThreadsPerBlock, main_, dz.data(), ly.weight(),
               g.data(), batch_, width_, width_);
      }
      dz.reset();
      if (l % 2 == 0 && skip) {
        if (l > 0) {
          LAUNCH(accumulate, grid_for(bw), kThreadsPerBlock, main_, g.data(), skip.data(),
                 bw);
        }
        skip.reset();
      }
      gradient_ready(l, iter);
    }
    return loss;
  }

  tensor make(std::size_t count) { return tensor(*step_alloc_, count, main_); }

  // --pointer-arrays: the device table of every layer's four buffers and counts.
  void make_pointer_table() {
    const std::size_t n = layers_.size();
    std::vector<float*> pointers;
    std::vector<int> counts;
    for (const layer& ly : layers_) {
      for (const tensor* t : {&ly.param, &ly.grad, &ly.adam_m, &ly.adam_v}) {
        pointers.push_back(t->data());
      }
      counts.push_back(ly.count());
    }
    pointer_table_ = make(4 * n * sizeof(float*) / sizeof(float));
    tensor_counts_ = make(n);
    CUDA_CHECK(gpu::memcpy_async(pointer_table_.data(), pointers.data(),
                                 pointers.size() * sizeof(float*), cudaMemcpyHostToDevice,
                                 main_));
    CUDA_CHECK(gpu::memcpy_async(tensor_counts_.data(), counts.data(), n * sizeof(int),
                                 cudaMemcpyHostToDevice, main_));
    CUDA_CHECK(cudaStreamSynchronize(main_));
  }

  void add_layer(int index) {
    const bool final_layer = index == opt_.depth;
    layer ly;
    ly.in = width_;
    ly.out = final_layer ? out_ : width_;
    std::size_t n = static_cast<std::size_t>(ly.count());
    ly.param = make(n);
    ly.grad = make(n);
    ly.adam_m = make(n);
    ly.adam_v = make(n);

    // He-uniform for the ReLU layers; the layer closing a residual block is scaled
    // by 1/sqrt(depth) so the sum of the blocks stays bounded.
    float range = std::sqrt(6.0f / static_cast<float>(ly.in));
    if (final_layer) range = std::sqrt(6.0f / static_cast<float>(ly.in + ly.out));
    if (!final_layer && index % 2 == 1) range /= std::sqrt(static_cast<float>(opt_.depth));
    std::uint64_t state = opt_.seed * 0x100000001b3ULL + static_cast<std::uint64_t>(index);
    std::vector<float> host(n, 0.0f);
    for (std::size_t i = 0; i < static_cast<std::size_t>(ly.out) * ly.in; ++i) {
      host[i] = range * uniform_pm1(state);
    }
    CUDA_CHECK(gpu::memcpy_async(ly.param.data(), host.data(), n * sizeof(float),
                               cudaMemcpyHostToDevice, main_));
    CUDA_CHECK(cudaStreamSynchronize(main_));
    CUDA_CHECK(gpu::memset_async(ly.adam_m.data(), 0, n * sizeof(float), main_));
    CUDA_CHECK(gpu::memset_async(ly.adam_v.data(), 0, n * sizeof(float), main_));
    layers_.push_back(std::move(ly));

    cudaEvent_t ready = nullptr;
    cudaEvent_t done = nullptr;
    if (two_streams_) {
      CUDA_CHECK(cudaEventCreateWithFlags(&ready, cudaEventDisableTiming));
      CUDA_CHECK(cudaEventCreateWithFlags(&done, cudaEventDisableTiming));
      grad_ready_.push_back(ready);
      update_done_.push_back(done);
    }
    update_recorded_.push_back(false);
  }

  // Draws iteration iter's batch into pinned memory and uploads it, on the side
  // stream with --streams 2, into x and target (allocated here when empty: a static
  // input is reused), with Adam's bias corrections when they live on the device.
  void upload_batch(int iter, tensor& x, tensor& target) {
    cudaStream_t up = two_streams_ ? side_ : main_;
    if (upload_recorded_) CUDA_CHECK(cudaEventSynchronize(upload_done_));
    std::uint64_t state = (opt_.seed ^ 0x5bd1e995ULL) * 0x9e3779b97f4a7c15ULL +
                          static_cast<std::uint64_t>(iter);
    for (int i = 0; i < batch_ * width_; ++i) host_x_[i] = uniform_pm1(state);
    for (int b = 0; b < batch_; ++b) {
      const float* xr = host_x_ + static_cast<std::size_t>(b) * width_;
      for (int o = 0; o < out_; ++o) {
        float v = 0.5f * xr[o % width_] - 0.25f * xr[(o + 3) % width_] +
                  xr[(2 * o + 1) % width_] * xr[(5 * o + 2) % width_];
        host_t_[static_cast<std::size_t>(b) * out_ + o] = v;
      }
    }
    if (!x) x = tensor(alloc_, static_cast<std::size_t>(batch_) * width_, up);
    if (!target) target = tensor(alloc_, static_cast<std::size_t>(batch_) * out_, up);
    CUDA_CHECK(gpu::memcpy_async(x.data(), host_x_, x.bytes(), cudaMemcpyHostToDevice, up));
    CUDA_CHECK(gpu::memcpy_async(target.data(), host_t_, target.bytes(),
                               cudaMemcpyHostToDevice, up));
    if (device_scalars_) {
      bias_corrections(iter, host_scalars_[0], host_scalars_[1]);
      CUDA_CHECK(gpu::memcpy_async(step_scalars_.data(), host_scalars_, 2 * sizeof(float),
                                   cudaMemcpyHostToDevice, up));
    }
    CUDA_CHECK(cudaEventRecord(upload_done_, up));
    upload_recorded_ = true;
    if (two_streams_) {
      CUDA_CHECK(cudaStreamWaitEvent(main_, upload_done_, 0));
      x.record_stream(main_);
      target.record_stream(main_);
    }
  }

  // Before the forward pass reads layer index's parameters: the previous
  // iteration's update of them (on the side stream) must be done.
  void wait_for_update(int index) {
    std::size_t i = static_cast<std::size_t>(index);
    if (two_streams_ && update_recorded_[i]) {
      CUDA_CHECK(cudaStreamWaitEvent(main_, update_done_[i], 0));
    }
  }

  // Adam's bias corrections at iteration iter: 1 / (1 - beta^t), t = iter + 1.
  static void bias_corrections(int iter, float& inv_bias1, float& inv_bias2) {
    const double t = static_cast<double>(iter) + 1.0;
    inv_bias1 = static_cast<float>(1.0 / (1.0 - std::pow(double{kBeta1}, t)));
    inv_bias2 = static_cast<float>(1.0 / (1.0 - std::pow(double{kBeta2}, t)));
  }

  // Layer index's gradients are complete on the main stream and its weights have
  // been read for the last time this iteration: run its Adam step (every layer's,
  // at the last one, with --pointer-arrays and --foreach).
  void gradient_ready(int index, int iter) {
    if (batched_adam_ && index != 0) return;
    std::size_t i = static_cast<std::size_t>(index);
    const layer& ly = layers_[i];
    cudaStream_t s = main_;
    if (two_streams_) {
      CUDA_CHECK(cudaEventRecord(grad_ready_[i], main_));
      CUDA_CHECK(cudaStreamWaitEvent(side_, grad_ready_[i], 0));
      s = side_;
    }
    const int n = ly.count();
    if (batched_adam_) {
      adam_all_layers(s);
    } else if (device_scalars_) {
      LAUNCH(adam_step_dev, grid_for(n), kThreadsPerBlock, s, ly.param.data(), ly.grad.data(),
             ly.adam_m.data(), ly.adam_v.data(), n, opt_.lr, kBeta1, kBeta2, kEpsilon,
             step_scalars_.data());
    } else {
      float inv_bias1 = 0.0f;
      float inv_bias2 = 0.0f;
      bias_corrections(iter, inv_bias1, inv_bias2);
      LAUNCH(adam_step, grid_for(n), kThreadsPerBlock, s, ly.param.data(), ly.grad.data(),
             ly.adam_m.data(), ly.adam_v.data(), n, opt_.lr, kBeta1, kBeta2, kEpsilon,
             inv_bias1, inv_bias2);
    }
    if (two_streams_) {
      for (std::size_t j = batched_adam_ ? 0 : i; j <= (batched_adam_ ? layers_.size() - 1 : i);
           ++j) {
        CUDA_CHECK(cudaEventRecord(update_done_[j], side_));
        update_recorded_[j] = true;
      }
    }
  }

  // The Adam step of every layer on stream s: one adam_pointer_array launch, or
  // adam_foreach launches of at most kForeachTensorsPerLaunch tensors.
  void adam_all_layers(cudaStream_t s) {
    const int n = static_cast<int>(layers_.size());
    if (opt_.pointer_arrays) {
      int largest = 0;
      long long total = 0;
      for (const layer& ly : layers_) {
        largest = std::max(largest, ly.count());
        total += ly.count();
      }
      dim3 grid = grid_for(static_cast<std::size_t>(largest));
      grid.y = static_cast<unsigned>(n);
      LAUNCH(adam_pointer_array, grid, kThreadsPerBlock, s,
             reinterpret_cast<float* const*>(pointer_table_.data()),
             reinterpret_cast<const int*>(tensor_counts_.data()), n, opt_.lr, kBeta1, kBeta2,
             kEpsilon, step_scalars_.data(), total);
      return;
    }
    for (int first = 0; first < n; first += kForeachTensorsPerLaunch) {
      auto list = std::make_unique<adam_tensor_list>();
      list->tensors = std::min(kForeachTensorsPerLaunch, n - first);
      int largest = 0;
      for (int t = 0; t < list->tensors; ++t) {
        const layer& ly = layers_[static_cast<std::size_t>(first + t)];
        list->w[t] = ly.param.data();
        list->g[t] = ly.grad.data();
        list->m[t] = ly.adam_m.data();
        list->v[t] = ly.adam_v.data();
        list->count[t] = ly.count();
        largest = std::max(largest, ly.count());
      }
      dim3 grid = grid_for(static_cast<std::size_t>(largest));
      grid.y = static_cast<unsigned>(list->tensors);
      LAUNCH(adam_foreach, grid, kThreadsPerBlock, s, *list, opt_.lr, kBeta1, kBeta2, kEpsilon,
             step_scalars_.data());
    }
  }

  const options opt_;
  device_allocator& alloc_;
  const int batch_;
  const int width_;
  const int out_;
  const bool two_streams_;
  const bool graphs_;
  const bool batched_adam_;    // --pointer-arrays or --foreach
  const bool device_scalars_;  // Adam's bias corrections in step_scalars_
  caching_allocator* const graph_pool_;
  device_allocator* step_alloc_;  // the graph's pool while capturing, else alloc_
  cudaStream_t main_ = nullptr;  // the legacy default stream with --streams 1 (no --graphs)
  cudaStream_t side_ = nullptr;
  std::vector<layer> layers_;  // depth hidden layers, then the final one
  std::vector<cudaEvent_t> grad_ready_;
  std::vector<cudaEvent_t> update_done_;
  std::vector<bool> update_recorded_;
  cudaEvent_t upload_done_ = nullptr;
  cudaEvent_t side_joined_ = nullptr;  // the side stream's join at the capture's end
  bool upload_recorded_ = false;
  tensor step_scalars_;  // inv_bias1, inv_bias2 of the current iteration
  tensor log_sums_;      // --log-every: each layer's sum, then the total
  tensor pointer_table_;  // --pointer-arrays: float* [4 * layers]
  tensor tensor_counts_;  // --pointer-arrays: int [layers]
  tensor static_x_, static_t_, static_loss_;  // --graphs
  std::vector<cudaGraph_t> graphs_captured_;
  std::vector<cudaGraphExec_t> graph_execs_;
  bool capturing_ = false;
  float* host_scalars_ = nullptr;  // pinned
  float* host_x_ = nullptr;  // pinned
  float* host_t_ = nullptr;  // pinned
  float* host_loss_ = nullptr;  // pinned
};

}  // namespace

int main(int argc, char** argv) {
  const options opt = parse_options(argc, argv);
  gpu::set_launch_path(opt.launch);
  const std::size_t params = parameter_count(opt);
  std::printf("config: depth %d width %d batch %d out %d iters %d seed %" PRIu64
              " lr %.6e caching %s streams %d launch %s%s%s%s%s%s\n",
              opt.depth, opt.width, opt.batch, std::min(kOutFeatures, opt.width),
              opt.iters, opt.seed, static_cast<double>(opt.lr),
              opt.expandable   ? "expandable"
              : opt.async_pool ? "async"
              : opt.caching    ? "on"
                               : "off",
              opt.streams,
              gpu::launch_path_name(opt.launch),
              opt.api == gpu::api_path::runtime ? "" : " api ",
              opt.api == gpu::api_path::runtime ? "" : gpu::api_path_name(opt.api),
              opt.graphs ? " graphs" : "", opt.pointer_arrays ? " pointer-arrays" : "",
              opt.foreach ? " foreach" : "");
  std::printf("footprint estimate: %zu bytes (%zu parameters, %zu bytes with gradients "
              "and Adam state)\n",
              footprint_estimate_bytes(opt), params, 4 * params * sizeof(float));
  std::fflush(stdout);

  if (opt.api != gpu::api_path::runtime) {
    // The driver calls need a current context: have the runtime make its own.
    CUDA_CHECK(cudaFree(nullptr));
    gpu::use_api(opt.api);
  }
  if (opt.expandable && opt.api == gpu::api_path::runtime) CUDA_CHECK(cudaFree(nullptr));
  std::unique_ptr<device_allocator> alloc;
  std::unique_ptr<caching_allocator> graph_pool;
  if (opt.graphs) graph_pool = std::make_unique<caching_allocator>();
  if (opt.expandable) {
    alloc = std::make_unique<expandable_allocator>();
  } else if (opt.async_pool) {
    alloc = std::make_unique<async_allocator>();
  } else if (opt.caching) {
    alloc = std::make_unique<caching_allocator>();
  } else {
    alloc = std::make_unique<direct_allocator>();
  }
  std::unique_ptr<alloc_trace> trace;
  if (!opt.trace_allocs.empty()) {
    std::string command = "simtrain";
    for (int i = 1; i < argc; ++i) {
      if (std::strncmp(argv[i], "--trace-allocs", 14) == 0) {
        if (std::strchr(argv[i], '=') == nullptr) ++i;  // and its value
        continue;
      }
      command += std::string(" ") + argv[i];
    }
    trace = std::make_unique<alloc_trace>(opt.trace_allocs, command);
    alloc->set_trace(trace.get());
    if (graph_pool) graph_pool->set_trace(trace.get());
  }
  float loss = 0.0f;
  {
    trainer model(opt, *alloc, graph_pool.get());
    for (int iter = 0; iter < opt.iters; ++iter) {
      if (trace) trace->iteration(iter);
      loss = model.step(iter);
      std::printf("iter %d loss %.9e (bits 0x%08" PRIx32 ")\n", iter,
                  static_cast<double>(loss), float_bits(loss));
      if (opt.log_every > 0 && (iter + 1) % opt.log_every == 0) {
        const float sum = model.weights_sum();
        std::printf("log after iter %d: weights sum %.9e\n", iter, static_cast<double>(sum));
      }
      std::fflush(stdout);
      // Expandable segments: unmap what the iteration left free every second
      // iteration, as torch.cuda.empty_cache() (Note [Expandable segments in simtrain] in
      // tests/workloads/expandable_allocator.h).
      if (opt.expandable && iter % 2 == 1) alloc->empty_cache();
    }
  }
  // The graph's pool holds its segments from the capture to the graph's end, beside
  // everything allocated before the capture: the peak is the sum.
  std::size_t peak = alloc->peak_bytes();
  if (graph_pool) {
    graph_pool->release_all();
    peak += graph_pool->peak_bytes();
  }
  alloc->release_all();
  std::printf("peak device bytes: %zu\n", peak);
  std::printf("final loss: %.9e (bits 0x%08" PRIx32 ")\n", static_cast<double>(loss),
              float_bits(loss));
  std::fflush(stdout);
  return 0;
}
