// synthetic_iterations: training iterations built from layer shapes, for the policy
// tests and the schedule benchmark; and a reader of simgpu's device model files
// (tests/simgpu/devices/*.model) into the figures the policy and the builders use.
//
// Kernel durations follow simgpu's kernel model: max(flops / fp32_flops,
// bytes / memory_bandwidth) of the device. Buffers are fp32. Per-iteration
// buffers live from their first to their last use.
#ifndef OVERSUB_TESTS_UNIT_POLICY_SYNTHETIC_ITERATIONS_H
#define OVERSUB_TESTS_UNIT_POLICY_SYNTHETIC_ITERATIONS_H

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "policy/cost_model.h"
#include "policy/iteration_model.h"

namespace oversub::policy::synthetic {

// The parts of a device model the policy work needs.
struct device_figures {
  std::string name;
  double fp32_flops = 0;        // FLOP/s
  double memory_bandwidth = 0;  // bytes/s
  cost_model costs;
};

// Reads `<OVERSUB_DEVICE_MODELS_DIR>/<name>.model` (name: h100-pcie, a100,
// titanx-maxwell, k40). Throws std::runtime_error naming the file and the key when
// the file is missing or a needed key is absent or malformed.
device_figures read_device_model(const std::string& name);

// Builds an iteration_model launch by launch.
class iteration_builder {
 public:
  explicit iteration_builder(const device_figures& device) : device_(device) {}
  buffer_id buffer(std::size_t bytes, bool long_lived = false);
  // A kernel of `flops` over its buffers (duration from the device figures);
  // writes: the buffers it writes (the rest are read).
  void launch(double flops, const std::vector<buffer_id>& reads,
              const std::vector<buffer_id>& writes);
  void launch_ns(std::uint64_t duration_ns, const std::vector<buffer_id>& reads,
                 const std::vector<buffer_id>& writes, bool writes_known = true);
  void mark_backward_begin();
  // Sets per-iteration lifetimes to [first use, last use] and returns the model.
  iteration_model finish();
  std::size_t launch_count() const { return model_.launches.size(); }
  std::size_t bytes(buffer_id b) const { return model_.buffers[b].bytes; }

 private:
  device_figures device_;
  iteration_model model_;
};

// A VGG-like plain chain: 4 stages of `convs_per_stage` 3x3 convolutions at 224,
// 112, 56, 28 pixels with 64, 128, 256, 512 channels (activations halve per stage:
// large early), then two fully connected layers, a loss, the backward pass (data
// and filter gradients per layer) and an SGD-with-momentum step.
iteration_model vgg_like(const device_figures& device, int batch, int convs_per_stage = 16);

// A ResNet-like network of bottleneck blocks with skip connections, ResNet-152's
// stage depths (3, 8, 36, 3) at 56, 28, 14, 7 pixels, backward and SGD step.
iteration_model resnet_like(const device_figures& device, int batch);

// A random layered program: `layers` layers of random sizes (64 KiB to 32 MiB,
// log-uniform), each reading the previous activation and, at random, skips from
// earlier ones; random durations; backward with gradient accumulation into shared
// inputs; random workspaces; some launches with unknown writes; optimizer step.
iteration_model random_layered(std::uint32_t seed, int layers);

// 1 byte per ns each way, no setup cost, no launch latency: times are byte counts
// (for hand-computed expectations).
inline cost_model byte_per_ns() {
  cost_model c;
  c.h2d_bytes_per_s = c.d2h_bytes_per_s = 1e9;
  return c;
}

}  // namespace oversub::policy::synthetic

#endif  // OVERSUB_TESTS_UNIT_POLICY_SYNTHETIC_ITERATIONS_H
