// synthetic_iterations: the builders and the device model reader
// (tests/unit/policy/synthetic_iterations.h).
#include "synthetic_iterations.h"

#include <algorithm>
#include <cmath>
#include <random>
#include <stdexcept>

#include "tools/simulate/device_model.h"

#ifndef OVERSUB_DEVICE_MODELS_DIR
#error "OVERSUB_DEVICE_MODELS_DIR must name tests/simgpu/devices"
#endif

namespace oversub::policy::synthetic {

// The what-if simulator's reader (tools/simulate/device_model.h), its error thrown.
device_figures read_device_model(const std::string& name) {
  const tools::device_model_result r = tools::read_device_model(name, OVERSUB_DEVICE_MODELS_DIR);
  if (!r.error.empty()) throw std::runtime_error(r.error);
  return device_figures{r.value.name, r.value.fp32_flops, r.value.memory_bandwidth,
                        r.value.costs};
}

buffer_id iteration_builder::buffer(std::size_t bytes, bool long_lived) {
  model_.buffers.push_back({bytes, long_lived, 0, 0});
  return static_cast<buffer_id>(model_.buffers.size() - 1);
}

void iteration_builder::launch(double flops, const std::vector<buffer_id>& reads,
                               const std::vector<buffer_id>& writes) {
  double bytes = 0;
  for (buffer_id b : reads) bytes += static_cast<double>(model_.buffers[b].bytes);
  for (buffer_id b : writes) bytes += static_cast<double>(model_.buffers[b].bytes);
  const double seconds = std::max(flops / device_.fp32_flops, bytes / device_.memory_bandwidth);
  launch_ns(static_cast<std::uint64_t>(std::ceil(seconds * 1e9)), reads, writes);
}

void iteration_builder::launch_ns(std::uint64_t duration_ns, const std::vector<buffer_id>& reads,
                                  const std::vector<buffer_id>& writes, bool writes_known) {
  model_launch l;
  l.duration_ns = duration_ns;
  l.uses = reads;
  l.uses.insert(l.uses.end(), writes.begin(), writes.end());
  l.writes = writes;
  l.writes_known = writes_known;
  model_.launches.push_back(std::move(l));
}

void iteration_builder::mark_backward_begin() {
  model_.backward_begin = static_cast<std::uint32_t>(model_.launches.size());
}

iteration_model iteration_builder::finish() {
  std::vector<bool> seen(model_.buffers.size(), false);
  for (std::uint32_t i = 0; i < model_.launches.size(); ++i) {
    for (buffer_id b : model_.launches[i].uses) {
      model_buffer& buf = model_.buffers[b];
      if (!seen[b]) buf.alloc_launch = i;
      seen[b] = true;
      buf.free_launch = i;
    }
  }
  return model_;
}

namespace {

constexpr std::size_t fp32 = 4;

struct tensor {
  buffer_id id;
  std::size_t channels, pixels;  // pixels per side
};

}  // namespace

iteration_model vgg_like(const device_figures& device, int batch, int convs_per_stage) {
  iteration_builder g(device);
  const std::size_t n = static_cast<std::size_t>(batch);
  auto act = [&](std::size_t c, std::size_t px) {
    return tensor{g.buffer(n * c * px * px * fp32), c, px};
  };
  struct layer {
    tensor in, out;
    buffer_id w, m;
    double flops;
    bool pool;  // out is a pooled copy of in (no weights)
  };
  std::vector<layer> layers;
  tensor x = act(3, 224);
  g.launch(0, {}, {x.id});  // the batch arrives
  const std::size_t channels[] = {64, 128, 256, 512};
  const std::size_t sides[] = {224, 112, 56, 28};
  for (int s = 0; s < 4; ++s) {
    for (int j = 0; j < convs_per_stage; ++j) {
      const tensor y = act(channels[s], sides[s]);
      const std::size_t wbytes = x.channels * y.channels * 9 * fp32;
      const double flops = 2.0 * n * y.pixels * y.pixels * x.channels * y.channels * 9;
      layer l{x, y, g.buffer(wbytes, true), g.buffer(wbytes, true), flops, false};
      g.launch(flops, {x.id, l.w}, {y.id});
      layers.push_back(l);
      x = y;
    }
    const tensor p = act(x.channels, s < 3 ? x.pixels / 2 : 1);  // last: global pool
    g.launch(static_cast<double>(n * x.channels * x.pixels * x.pixels), {x.id}, {p.id});
    layers.push_back({x, p, 0, 0, 0, true});
    x = p;
  }
  for (std::size_t out : {std::size_t{4096}, std::size_t{1000}}) {
    const tensor y = act(out, 1);
    const std::size_t wbytes = x.channels * out * fp32;
    const double flops = 2.0 * n * x.channels * out;
    layer l{x, y, g.buffer(wbytes, true), g.buffer(wbytes, true), flops, false};
    g.launch(flops, {x.id, l.w}, {y.id});
    layers.push_back(l);
    x = y;
  }
  g.mark_backward_begin();
  buffer_id grad = g.buffer(g.bytes(x.id));
  g.launch(static_cast<double>(n * 1000 * 10), {x.id}, {grad});  // loss and its gradient
  std::vector<buffer_id> dws(layers.size(), 0);
  for (std::size_t k = layers.size(); k-- > 0;) {
    const layer& l = layers[k];
    const bool first = k == 0;
    const buffer_id grad_in =
        first ? 0 : g.buffer(n * l.in.channels * l.in.pixels * l.in.pixels * fp32);
    if (l.pool) {
      g.launch(static_cast<double>(n * l.in.channels * l.in.pixels * l.in.pixels),
               {grad, l.in.id}, {grad_in});
    } else {
      dws[k] = g.buffer(g.bytes(l.w));
      if (!first) g.launch(l.flops, {grad, l.w}, {grad_in});
      g.launch(l.flops, {grad, l.in.id}, {dws[k]});
    }
    grad = grad_in;
  }
  for (std::size_t k = 0; k < layers.size(); ++k) {
    if (layers[k].pool) continue;
    const double params = static_cast<double>(g.bytes(layers[k].w) / fp32);
    g.launch(4 * params, {dws[k]}, {layers[k].w, layers[k].m});
  }
  return g.finish();
}

iteration_model resnet_like(const device_figures& device, int batch) {
  iteration_builder g(device);
  const std::size_t n = static_cast<std::size_t>(batch);
  auto act = [&](std::size_t c, std::size_t px) {
    return tensor{g.buffer(n * c * px * px * fp32), c, px};
  };
  auto bytes_of = [&](const tensor& t) { return n * t.channels * t.pixels * t.pixels * fp32; };
  struct conv {
    tensor in, out;
    buffer_id w, m, dw = 0;
    double flops;
  };
  std::vector<conv> convs;  // every weighted layer, forward order
  // `in` by value: convs grows while it is in use.
  auto fwd_conv = [&](const tensor in, std::size_t c, std::size_t px, std::size_t k) {
    const tensor out = act(c, px);
    const std::size_t wbytes = in.channels * c * k * k * fp32;
    const double flops = 2.0 * n * px * px * in.channels * c * k * k;
    convs.push_back({in, out, g.buffer(wbytes, true), g.buffer(wbytes, true), 0, flops});
    g.launch(flops, {in.id, convs.back().w}, {out.id});
    return convs.size() - 1;
  };
  struct block {
    tensor x, y;
    std::size_t c1, c2, c3, proj;  // indices into convs; proj == SIZE_MAX: identity
  };
  std::vector<block> blocks;
  tensor x = act(3, 224);
  g.launch(0, {}, {x.id});
  const std::size_t stem = fwd_conv(x, 64, 112, 7);
  x = act(64, 56);
  g.launch(static_cast<double>(n * 64 * 112 * 112), {convs[stem].out.id}, {x.id});
  const int depths[] = {3, 8, 36, 3};
  const std::size_t widths[] = {256, 512, 1024, 2048};
  const std::size_t sides[] = {56, 28, 14, 7};
  for (int s = 0; s < 4; ++s) {
    for (int j = 0; j < depths[s]; ++j) {
      const std::size_t c = widths[s], px = sides[s];
      block b{x, {}, 0, 0, 0, SIZE_MAX};
      b.c1 = fwd_conv(x, c / 4, px, 1);
      b.c2 = fwd_conv(convs[b.c1].out, c / 4, px, 3);
      b.c3 = fwd_conv(convs[b.c2].out, c, px, 1);
      buffer_id skip = x.id;
      if (x.channels != c || x.pixels != px) {
        b.proj = fwd_conv(x, c, px, 1);
        skip = convs[b.proj].out.id;
      }
      b.y = act(c, px);
      g.launch(static_cast<double>(n * c * px * px), {convs[b.c3].out.id, skip}, {b.y.id});
      blocks.push_back(b);
      x = b.y;
    }
  }
  const tensor pooled = act(2048, 1);
  g.launch(static_cast<double>(n * 2048 * 49), {x.id}, {pooled.id});
  const tensor logits = act(1000, 1);
  {
    const std::size_t wbytes = 2048 * 1000 * fp32;
    const double flops = 2.0 * n * 2048 * 1000;
    convs.push_back({pooled, logits, g.buffer(wbytes, true), g.buffer(wbytes, true), 0, flops});
    g.launch(flops, {pooled.id, convs.back().w}, {logits.id});
  }
  g.mark_backward_begin();
  const buffer_id glogits = g.buffer(bytes_of(logits));
  g.launch(static_cast<double>(n * 1000 * 10), {logits.id}, {glogits});
  // Backward of one weighted layer: filter gradient, and the data gradient unless
  // `need_data` is false.
  auto bwd_conv = [&](conv& cv, buffer_id gout, bool need_data) {
    cv.dw = g.buffer(g.bytes(cv.w));
    g.launch(cv.flops, {gout, cv.in.id}, {cv.dw});
    if (!need_data) return buffer_id{0};
    const buffer_id gin = g.buffer(bytes_of(cv.in));
    g.launch(cv.flops, {gout, cv.w}, {gin});
    return gin;
  };
  const buffer_id gpooled = bwd_conv(convs.back(), glogits, true);
  buffer_id gy = g.buffer(bytes_of(x));
  g.launch(static_cast<double>(n * 2048 * 49), {gpooled}, {gy});
  for (std::size_t k = blocks.size(); k-- > 0;) {
    block& b = blocks[k];
    const buffer_id g2 = bwd_conv(convs[b.c3], gy, true);
    const buffer_id g1 = bwd_conv(convs[b.c2], g2, true);
    const buffer_id gmain = bwd_conv(convs[b.c1], g1, true);
    const buffer_id gskip = b.proj == SIZE_MAX ? gy : bwd_conv(convs[b.proj], gy, true);
    const buffer_id gx = g.buffer(bytes_of(b.x));
    g.launch(static_cast<double>(n * b.x.channels * b.x.pixels * b.x.pixels), {gmain, gskip},
             {gx});
    gy = gx;
  }
  const buffer_id gstem = g.buffer(bytes_of(convs[stem].out));
  g.launch(static_cast<double>(n * 64 * 112 * 112), {gy, convs[stem].out.id}, {gstem});
  bwd_conv(convs[stem], gstem, false);
  for (const conv& cv : convs) {
    const double params = static_cast<double>(g.bytes(cv.w) / fp32);
    g.launch(4 * params, {cv.dw}, {cv.w, cv.m});
  }
  return g.finish();
}

iteration_model random_layered(std::uint32_t seed, int layers) {
  std::mt19937 rng(seed);
  device_figures unit;  // durations are drawn, not derived
  unit.fp32_flops = unit.memory_bandwidth = 1;
  iteration_builder g(unit);
  auto log_uniform = [&](double lo, double hi) {
    std::uniform_real_distribution<double> u(std::log(lo), std::log(hi));
    return static_cast<std::size_t>(std::exp(u(rng)));
  };
  auto duration = [&] { return static_cast<std::uint64_t>(log_uniform(5e3, 2e6)); };
  auto chance = [&](double p) { return std::uniform_real_distribution<double>(0, 1)(rng) < p; };
  std::vector<buffer_id> acts{g.buffer(log_uniform(64 << 10, 32 << 20))};
  std::vector<std::vector<buffer_id>> inputs(static_cast<std::size_t>(layers) + 1);
  std::vector<buffer_id> w(inputs.size()), m(inputs.size()), dw(inputs.size());
  g.launch_ns(duration(), {}, {acts[0]});
  for (int k = 1; k <= layers; ++k) {
    auto& in = inputs[static_cast<std::size_t>(k)];
    in.push_back(acts.back());
    if (k > 2 && chance(0.35)) {
      std::uniform_int_distribution<std::size_t> earlier(0, acts.size() - 2);
      const buffer_id skip = acts[earlier(rng)];
      if (skip != in[0]) in.push_back(skip);
    }
    const std::size_t wbytes = log_uniform(16 << 10, 8 << 20);
    w[static_cast<std::size_t>(k)] = g.buffer(wbytes, true);
    m[static_cast<std::size_t>(k)] = g.buffer(wbytes, true);
    acts.push_back(g.buffer(log_uniform(64 << 10, 32 << 20)));
    std::vector<buffer_id> reads = in;
    reads.push_back(w[static_cast<std::size_t>(k)]);
    std::vector<buffer_id> writes{acts.back()};
    if (chance(0.3)) writes.push_back(g.buffer(log_uniform(64 << 10, 8 << 20)));  // workspace
    g.launch_ns(duration(), reads, writes, !chance(0.2));
  }
  g.mark_backward_begin();
  std::vector<buffer_id> grads(acts.size(), 0);
  std::vector<bool> has_grad(acts.size(), false);
  auto grad_of = [&](buffer_id act) {
    const std::size_t k = static_cast<std::size_t>(
        std::find(acts.begin(), acts.end(), act) - acts.begin());
    if (!has_grad[k]) grads[k] = g.buffer(g.bytes(act));
    has_grad[k] = true;
    return grads[k];
  };
  g.launch_ns(duration(), {acts.back()}, {grad_of(acts.back())});
  for (int k = layers; k >= 1; --k) {
    const std::size_t kk = static_cast<std::size_t>(k);
    dw[kk] = g.buffer(g.bytes(w[kk]));
    std::vector<buffer_id> reads{grads[kk], w[kk]};
    reads.insert(reads.end(), inputs[kk].begin(), inputs[kk].end());
    std::vector<buffer_id> writes{dw[kk]};
    for (buffer_id in : inputs[kk]) {
      if (in != acts[0]) writes.push_back(grad_of(in));
    }
    g.launch_ns(duration(), reads, writes, !chance(0.2));
  }
  for (int k = 1; k <= layers; ++k) {
    const std::size_t kk = static_cast<std::size_t>(k);
    g.launch_ns(duration() / 4, {dw[kk]}, {w[kk], m[kk]});
  }
  return g.finish();
}

}  // namespace oversub::policy::synthetic
