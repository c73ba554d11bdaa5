// device_model: a device model file (tests/simgpu/devices/*.model, the same files
// simgpu runs on) read into the figures the what-if simulator needs: the cost model
// of policy/ and the compute figures behind the duration model (Note [Duration
// model] in policy/profile_model.h).
//
// The file is `key = value` lines with `#` comments. Values are numbers ("51.2e12")
// or sizes with a unit ("80GiB", "64KiB", the grammar of OVERSUB_* sizes).
#ifndef OVERSUB_TOOLS_SIMULATE_DEVICE_MODEL_H
#define OVERSUB_TOOLS_SIMULATE_DEVICE_MODEL_H

#include <cstdint>
#include <string>
#include <vector>

#include "policy/device_model.h"

namespace oversub::tools {

using policy::device_model;


// A device model or why there is none.
struct device_model_result {
  std::string error;  // empty: value is valid
  device_model value;
};

// `spec` is a path (it contains '/' or ends in ".model") or a model name looked up
// as `<dir>/<spec>.model`. An unknown name's error lists the models in dir.
// Every key the simulator needs must be present and positive where a rate. The
// mover's keys (vmm_{map,unmap,set_access}_ns and their _per_2mib_ns, event_sync_ns,
// event_record_ns, copy_enqueue_ns) are optional: 0 when absent; vmm_map_repeat_ns,
// vmm_unmap_repeat_ns and vmm_set_access_repeat_ns too, the full figure when absent.
device_model_result read_device_model(const std::string& spec, const std::string& dir);

// The model names (file stems) in dir, sorted.
std::vector<std::string> device_model_names(const std::string& dir);

}  // namespace oversub::tools

#endif  // OVERSUB_TOOLS_SIMULATE_DEVICE_MODEL_H
