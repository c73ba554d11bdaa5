// device_model: reading simgpu's device model files (tools/simulate/device_model.h).
#include "tools/simulate/device_model.h"

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>

#include "common/options.h"

namespace oversub::tools {

namespace {

std::string trim(const std::string& s) {
  const auto a = s.find_first_not_of(" \t\r");
  if (a == std::string::npos) return {};
  const auto b = s.find_last_not_of(" \t\r");
  return s.substr(a, b - a + 1);
}

// A plain number ("51.2e12", "5000") or a size with a unit ("80GiB").
std::optional<double> parse_value(const std::string& text) {
  if (text.empty()) return std::nullopt;
  errno = 0;
  char* end = nullptr;
  const double v = std::strtod(text.c_str(), &end);
  if (errno == 0 && end == text.c_str() + text.size()) return v;
  if (std::optional<std::uint64_t> bytes = parse_size(text)) return static_cast<double>(*bytes);
  return std::nullopt;
}

}  // namespace

std::vector<std::string> device_model_names(const std::string& dir) {
  std::vector<std::string> names;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(dir, ec)) {
    if (entry.path().extension() == ".model") names.push_back(entry.path().stem().string());
  }
  std::sort(names.begin(), names.end());
  return names;
}

device_model_result read_device_model(const std::string& spec, const std::string& dir) {
  device_model_result r;
  const bool is_path = spec.find('/') != std::string::npos ||
                       (spec.size() > 6 && spec.substr(spec.size() - 6) == ".model");
  const std::string path = is_path ? spec : dir + "/" + spec + ".model";
  std::ifstream in(path);
  if (!in) {
    if (is_path) {
      r.error = "cannot open device model " + path;
    } else {
      r.error = "unknown device '" + spec + "' (no " + path + "); known:";
      for (const std::string& n : device_model_names(dir)) r.error += " " + n;
    }
    return r;
  }
  std::map<std::string, std::string> kv;
  std::string line;
  while (std::getline(in, line)) {
    line = line.substr(0, line.find('#'));
    const auto eq = line.find('=');
    if (eq == std::string::npos) continue;
    kv[trim(line.substr(0, eq))] = trim(line.substr(eq + 1));
  }
  device_model& d = r.value;
  d.path = path;
  d.name = kv.count("name") ? kv["name"] : std::filesystem::path(path).stem().string();
  // Each needed key, as a number; the first problem is the error.
  auto number = [&](const char* key, bool rate) -> double {
    if (!r.error.empty()) return 0;
    const auto it = kv.find(key);
    if (it == kv.end()) {
      r.error = path + ": no '" + key + "'";
      return 0;
    }
    const std::optional<double> v = parse_value(it->second);
    if (!v || *v < 0 || (rate && *v <= 0)) {
      r.error = path + ": " + key + " = '" + it->second + "' is not a " +
                (rate ? "positive number" : "number >= 0");
      return 0;
    }
    return *v;
  };
  d.memory_bytes = static_cast<std::uint64_t>(number("memory", true));
  d.fp32_flops = number("fp32_flops", true);
  d.memory_bandwidth = number("memory_bandwidth", true);
  d.costs.h2d_bytes_per_s = number("h2d_pinned_bandwidth", true);
  d.costs.d2h_bytes_per_s = number("d2h_pinned_bandwidth", true);
  d.costs.copy_setup_ns = static_cast<std::uint64_t>(number("copy_latency_ns", false));
  d.costs.launch_latency_ns = static_cast<std::uint64_t>(number("launch_latency_ns", false));
  d.costs.managed_fault_ns = static_cast<std::uint64_t>(number("managed_fault_ns", false));
  d.costs.managed_page_bytes = static_cast<std::size_t>(number("managed_page_size", true));
  d.costs.demand_paging = number("concurrent_managed_access", false) != 0;
  // Optional: see Note [Managed migration rates] in tests/simgpu/driver/device_model.cc.
  if (kv.find("managed_h2d_bandwidth") != kv.end()) {
    d.costs.managed_h2d_bytes_per_s = number("managed_h2d_bandwidth", true);
  }
  if (kv.find("managed_d2h_bandwidth") != kv.end()) {
    d.costs.managed_d2h_bytes_per_s = number("managed_d2h_bandwidth", true);
  }
  // Optional: a kernel's access to host memory (Note [Launches over the room] in
  // policy/iteration_model.h); absent: the pinned copy rate to the device, which it
  // does not exceed (the time it gives is then the least).
  d.costs.host_access_bytes_per_s = kv.find("kernel_host_access_bandwidth") != kv.end()
                                        ? number("kernel_host_access_bandwidth", true)
                                        : d.costs.h2d_bytes_per_s;
  // The mover's host costs (Note [Virtual time model] in policy/simulate.h): optional,
  // 0 when absent (no mover is modelled).
  auto optional = [&](const char* key) -> std::uint64_t {
    if (!r.error.empty() || kv.find(key) == kv.end()) return 0;
    return static_cast<std::uint64_t>(number(key, false));
  };
  policy::mover_costs& c = d.mover;
  c.vmm_map_ns = optional("vmm_map_ns");
  c.vmm_map_per_page_ns = optional("vmm_map_per_2mib_ns");
  // A repeated call's figure (Note [Repeated VMM calls] in
  // tests/simgpu/driver/device_model.cc); absent: the full one (-1).
  for (auto [key, field] : {std::pair{"vmm_map_repeat_ns", &c.vmm_map_repeat_ns},
                            std::pair{"vmm_unmap_repeat_ns", &c.vmm_unmap_repeat_ns},
                            std::pair{"vmm_set_access_repeat_ns", &c.vmm_set_access_repeat_ns}}) {
    if (kv.find(key) != kv.end()) *field = static_cast<std::int64_t>(optional(key));
  }
  c.vmm_unmap_ns = optional("vmm_unmap_ns");
  c.vmm_unmap_per_page_ns = optional("vmm_unmap_per_2mib_ns");
  c.vmm_set_access_ns = optional("vmm_set_access_ns");
  c.vmm_set_access_per_page_ns = optional("vmm_set_access_per_2mib_ns");
  c.event_sync_ns = optional("event_sync_ns");
  c.event_record_ns = optional("event_record_ns");
  c.copy_enqueue_ns = optional("copy_enqueue_ns");
  c.calls_wait = optional("vmm_waits_for_device") != 0;
  return r;
}

}  // namespace oversub::tools
