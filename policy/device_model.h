// device_model: the figures of one device that the what-if simulator and the page
// model need: the cost model (policy/cost_model.h) and the compute figures behind
// the duration model (Note [Duration model] in policy/profile_model.h). Read from a
// device model file by tools/simulate/device_model.h.
#ifndef OVERSUB_POLICY_DEVICE_MODEL_H
#define OVERSUB_POLICY_DEVICE_MODEL_H

#include <cstdint>
#include <string>

#include "policy/cost_model.h"

namespace oversub::policy {

struct device_model {
  std::string name;                 // the file's `name`, else its stem
  std::string path;                 // the file read
  std::uint64_t memory_bytes = 0;   // `memory`
  double fp32_flops = 0;            // FLOP/s
  double memory_bandwidth = 0;      // device memory bytes/s
  cost_model costs;         // pinned link, copy setup, launch latency, managed memory
  // The mover's host costs, where the file has the keys (else 0). Not in `costs`:
  // only a plan over the arena's pages (`--granularity page`) takes them
  // (costs.mover = mover; Note [Virtual time model] in policy/simulate.h).
  mover_costs mover;
};

}  // namespace oversub::policy

#endif  // OVERSUB_POLICY_DEVICE_MODEL_H
