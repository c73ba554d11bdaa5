// Parsing of the SIMGPU_* variables (see config.h and docs/simgpu.md).
#include "config.h"

#include <cuda.h>

#include <cctype>
#include <cmath>
#include <cstdlib>
#include <cstring>

#include "common.h"
#include "errors.h"

namespace simgpu {

bool parse_bytes(const char* text, uint64_t* out) {
  if (text == nullptr || *text == '\0') return false;
  char* end = nullptr;
  double v = std::strtod(text, &end);
  if (end == text || !(v >= 0) || !std::isfinite(v)) return false;
  std::string unit(end);
  for (auto& c : unit) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  struct suffix { const char* s; double mult; };
  static const suffix table[] = {
      {"", 1},           {"b", 1},
      {"k", 1024.0},     {"kb", 1e3},     {"kib", 1024.0},
      {"m", 1048576.0},  {"mb", 1e6},     {"mib", 1048576.0},
      {"g", 1073741824.0}, {"gb", 1e9},   {"gib", 1073741824.0},
      {"t", 1099511627776.0}, {"tb", 1e12}, {"tib", 1099511627776.0},
  };
  for (const auto& s : table) {
    if (unit == s.s) {
      double bytes = v * s.mult;
      if (bytes > 1.8e19) return false;
      *out = static_cast<uint64_t>(std::llround(bytes));
      return true;
    }
  }
  return false;
}

bool parse_curesult(const char* text, int* out) {
  if (text == nullptr || *text == '\0') return false;
  char* end = nullptr;
  long v = std::strtol(text, &end, 10);
  if (*end == '\0') {
    if (v < 0 || v > 100000) return false;
    *out = static_cast<int>(v);
    return true;
  }
  std::string want(text);
  if (want.rfind("CUDA_", 0) != 0) want = "CUDA_ERROR_" + want;
  for (int code = 0; code <= 1000; ++code) {
    const char* name = error_name(static_cast<CUresult>(code));
    if (name != nullptr && want == name) {
      *out = code;
      return true;
    }
  }
  return false;
}

namespace {

const char* env(const char* name) {
  const char* v = std::getenv(name);
  return (v != nullptr && *v != '\0') ? v : nullptr;
}

bool parse_bool(const char* v, bool* out) {
  std::string s(v);
  for (auto& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (s == "1" || s == "on" || s == "yes" || s == "true") { *out = true; return true; }
  if (s == "0" || s == "off" || s == "no" || s == "false") { *out = false; return true; }
  return false;
}

bool parse_fail(const char* text, std::vector<fail_rule>* rules) {
  std::string all(text);
  size_t pos = 0;
  while (pos <= all.size()) {
    size_t comma = all.find(',', pos);
    std::string item = all.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos);
    pos = comma == std::string::npos ? all.size() + 1 : comma + 1;
    size_t c1 = item.find(':');
    if (c1 == std::string::npos) return false;
    std::string kind = item.substr(0, c1);
    std::string rest = item.substr(c1 + 1);
    size_t c2 = rest.find(':');
    std::string nth = rest.substr(0, c2);
    std::string code = c2 == std::string::npos ? "" : rest.substr(c2 + 1);
    fail_rule r{};
    if (kind == "alloc") { r.kind = fail_kind::alloc; r.code = CUDA_ERROR_OUT_OF_MEMORY; }
    else if (kind == "host_alloc") { r.kind = fail_kind::host_alloc; r.code = CUDA_ERROR_OUT_OF_MEMORY; }
    else if (kind == "copy") { r.kind = fail_kind::copy; r.code = CUDA_ERROR_INVALID_VALUE; }
    else if (kind == "map") { r.kind = fail_kind::map; r.code = CUDA_ERROR_OUT_OF_MEMORY; }
    else if (kind == "launch") { r.kind = fail_kind::launch; r.code = CUDA_ERROR_LAUNCH_FAILED; }
    else if (kind == "reserve") { r.kind = fail_kind::reserve; r.code = CUDA_ERROR_OUT_OF_MEMORY; }
    else if (kind == "library_load") { r.kind = fail_kind::library_load; r.code = CUDA_ERROR_OUT_OF_MEMORY; }
    else if (kind == "kernel_query") { r.kind = fail_kind::kernel_query; r.code = CUDA_ERROR_NOT_FOUND; }
    else if (kind == "param_info") { r.kind = fail_kind::param_info; r.code = CUDA_ERROR_NOT_SUPPORTED; }
    else if (kind == "access") { r.kind = fail_kind::access; r.code = CUDA_ERROR_INVALID_VALUE; }
    else if (kind == "event") { r.kind = fail_kind::event; r.code = CUDA_ERROR_INVALID_VALUE; }
    else if (kind == "prefetch") {
      r.kind = fail_kind::prefetch;
      r.code = CUDA_ERROR_INVALID_VALUE;
    }
    else if (kind == "discard") {
      r.kind = fail_kind::discard;
      r.code = CUDA_ERROR_INVALID_VALUE;
    }
    else if (kind == "graph_instantiate") {
      r.kind = fail_kind::graph_instantiate;
      r.code = CUDA_ERROR_OUT_OF_MEMORY;
    } else if (kind == "graph_launch") {
      r.kind = fail_kind::graph_launch;
      r.code = CUDA_ERROR_OUT_OF_MEMORY;  // not LAUNCH_FAILED: that one is sticky
    }
    else return false;
    if (!nth.empty() && nth.back() == '+') { r.and_later = true; nth.pop_back(); }
    if (nth.empty()) return false;
    for (char ch : nth) if (!std::isdigit(static_cast<unsigned char>(ch))) return false;
    r.nth = std::strtoull(nth.c_str(), nullptr, 10);
    if (r.nth == 0) return false;
    if (!code.empty() && !parse_curesult(code.c_str(), &r.code)) return false;
    rules->push_back(r);
  }
  return !rules->empty();
}

config load() {
  config c;
  if (const char* v = env("SIMGPU_MEMORY")) {
    if (!parse_bytes(v, &c.memory_bytes) || c.memory_bytes == 0)
      config_error("SIMGPU_MEMORY='%s' is not valid: expected a size such as 256MiB, 4GiB, "
                   "1.5GB or a number of bytes", v);
  }
  if (const char* v = env("SIMGPU_DEVICE")) c.device = v;
  if (const char* v = env("SIMGPU_DEVICE_DIR")) c.device_dir = v;
  if (const char* v = env("SIMGPU_FAIL")) {
    if (!parse_fail(v, &c.fail))
      config_error("SIMGPU_FAIL='%s' is not valid: expected kind:n[:code][,kind:n[:code]...] "
                   "with kind one of alloc, host_alloc, copy, map, launch, reserve, graph_instantiate, "
                   "graph_launch, library_load, kernel_query, param_info, access, event, prefetch, "
                   "discard, "
                   "n a 1-based count (n+ for that call and all later ones) and code a CUresult "
                   "number or name", v);
  }
  if (const char* v = env("SIMGPU_REPORT")) {
    if (!parse_bool(v, &c.report))
      config_error("SIMGPU_REPORT='%s' is not valid: expected 1/0, on/off, yes/no", v);
  }
  if (const char* v = env("SIMGPU_LOCKSTEP")) {
    if (!parse_bool(v, &c.lockstep))
      config_error("SIMGPU_LOCKSTEP='%s' is not valid: expected 1/0, on/off, yes/no", v);
  }
  if (const char* v = env("SIMGPU_RACE")) {
    std::string s(v);
    if (s == "report") c.race = race_mode::report;
    else if (s == "abort") c.race = race_mode::abort;
    else if (s == "off" || s == "0") c.race = race_mode::off;
    else config_error("SIMGPU_RACE='%s' is not valid: expected report, abort or off", v);
  }
  if (const char* v = env("SIMGPU_VMM_WAIT")) {
    bool wait = false;
    if (!parse_bool(v, &wait))
      config_error("SIMGPU_VMM_WAIT='%s' is not valid: expected 1/0, on/off, yes/no", v);
    c.vmm_wait = wait ? 1 : 0;
  }
  if (const char* v = env("SIMGPU_VMM_UNMAP_SPANS")) {
    bool spans = true;
    if (!parse_bool(v, &spans))
      config_error("SIMGPU_VMM_UNMAP_SPANS='%s' is not valid: expected 1/0, on/off, yes/no", v);
    c.vmm_unmap_spans = spans ? 1 : 0;
  }
  if (const char* v = env("SIMGPU_COPY_GAPS")) {
    bool gaps = true;
    if (!parse_bool(v, &gaps))
      config_error("SIMGPU_COPY_GAPS='%s' is not valid: expected 1/0, on/off, yes/no", v);
    c.copy_gaps = gaps ? 1 : 0;
  }
  if (const char* v = env("SIMGPU_VMM_SERIAL")) {
    bool serial = true;
    if (!parse_bool(v, &serial))
      config_error("SIMGPU_VMM_SERIAL='%s' is not valid: expected 1/0, on/off, yes/no", v);
    c.vmm_serial = serial ? 1 : 0;
  }
  if (const char* v = env("SIMGPU_LAUNCH_LOG")) c.launch_log = v;
  if (const char* v = env("SIMGPU_TIMELINE")) c.timeline = v;
  if (const char* v = env("SIMGPU_CUPTI_RECORDS")) {
    std::string s(v);
    if (s == "when-done") c.cupti_when_done = true;
    else if (s == "at-enqueue") c.cupti_when_done = false;
    else config_error("SIMGPU_CUPTI_RECORDS='%s' is not valid: expected at-enqueue or when-done", v);
  }
  return c;
}

}  // namespace

const config& get_config() {
  static const config c = load();
  return c;
}

}  // namespace simgpu
