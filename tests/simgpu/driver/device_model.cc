// Reading device model files. Format: one `key = value` per line, `#` starts a
// comment; every key below is required unless it has a default in device_model.h.
//
// Note [Driver call costs]
// ~~~~~~~~~~~~~~~~~~~~~~~~
// Each driver call family has its own host cost, from the model: the VMM calls
// (cuMemCreate, cuMemMap, cuMemSetAccess, cuMemUnmap, cuMemRelease) a per-call part
// plus a part per 2 MiB page of the call's size (so mapping 64 MiB in one call costs
// call_ns + 32 x per_2mib_ns); event record, event query (per poll), event
// synchronize (on top of the wait), cuStreamWaitEvent, the enqueue of a copy and of a
// kernel launch (a cuGraphLaunch is one launch enqueue) one figure each. Every other
// call costs api_overhead_ns. Every cost key is required: a model that lacks one, or
// gives a value that is not a non-negative number, is refused at load with the key's
// name, so no model silently runs on a default.
//
// Note [Repeated VMM calls]
// ~~~~~~~~~~~~~~~~~~~~~~~~~
// An H200 (driver 580) made 16 one-page calls of one family in a row, each followed
// by a stream query, far faster than 16 single calls while a kernel ran on another
// stream: cuMemMap 33.7 us for the 16 against 11.2 for one, cuMemSetAccess 652
// against 123.5, cuMemUnmap 372 against 64.4, cuMemCreate 341 against 108,
// cuMemRelease 263 against 38.1 (docs/gpu-results.md, p50 of 20); idle, the 16 cost
// 16 single calls. So the busy figure is mostly paid once per run of calls of one
// family. The optional key <family>_repeat_ns (the per-call part of such a repeat;
// absent: <family>_ns, every call paying it in full) is charged to a VMM call whose
// thread's last VMM call was of the same family and ended at most
// kVmmRepeatGapNs of host time before (other calls between, as the measurement's
// queries, do not break the run); any other VMM call pays <family>_ns. The gap is
// an assumption beyond the measurement (whose calls came a query apart, under a
// microsecond): a thread that did anything else for longer pays the full figure.
#include <algorithm>
#include "device_model.h"

#include <dlfcn.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>

#include "common.h"
#include "config.h"

namespace simgpu {

namespace {

std::string library_dir() {
  Dl_info info{};
  if (dladdr(reinterpret_cast<void*>(&load_device_model), &info) == 0 || !info.dli_fname)
    return ".";
  std::string p(info.dli_fname);
  size_t slash = p.rfind('/');
  return slash == std::string::npos ? "." : p.substr(0, slash);
}

std::string trim(const std::string& s) {
  size_t a = s.find_first_not_of(" \t\r");
  if (a == std::string::npos) return "";
  size_t b = s.find_last_not_of(" \t\r");
  return s.substr(a, b - a + 1);
}

}  // namespace

device_model load_device_model() {
  const config& cfg = get_config();
  std::string path;
  if (cfg.device.find('/') != std::string::npos) {
    path = cfg.device;
  } else {
    std::string dir = cfg.device_dir.empty() ? library_dir() + "/devices" : cfg.device_dir;
    path = dir + "/" + cfg.device + ".model";
  }
  std::ifstream in(path);
  if (!in)
    config_error("SIMGPU_DEVICE='%s' is not valid: expected a model name with a file %s "
                 "(h100-pcie, a100, titanx-maxwell, k40) or a path to a model file",
                 cfg.device.c_str(), path.c_str());
  std::map<std::string, std::string> kv;
  std::string line;
  int lineno = 0;
  while (std::getline(in, line)) {
    ++lineno;
    size_t hash = line.find('#');
    if (hash != std::string::npos) line.resize(hash);
    line = trim(line);
    if (line.empty()) continue;
    size_t eq = line.find('=');
    if (eq == std::string::npos)
      config_error("device model %s:%d: expected key = value", path.c_str(), lineno);
    kv[trim(line.substr(0, eq))] = trim(line.substr(eq + 1));
  }
  device_model m;
  size_t slash = path.rfind('/');
  m.id = path.substr(slash == std::string::npos ? 0 : slash + 1);
  if (m.id.size() > 6 && m.id.compare(m.id.size() - 6, 6, ".model") == 0)
    m.id.resize(m.id.size() - 6);

  auto need = [&](const char* key) -> const std::string& {
    auto it = kv.find(key);
    if (it == kv.end()) config_error("device model %s: missing key '%s'", path.c_str(), key);
    return it->second;
  };
  auto num = [&](const char* key) {
    const std::string& v = need(key);
    char* end = nullptr;
    double d = std::strtod(v.c_str(), &end);
    if (end == v.c_str() || *end != '\0' || !(d >= 0))
      config_error("device model %s: '%s = %s' is not a non-negative number", path.c_str(),
                   key, v.c_str());
    return d;
  };
  auto opt = [&](const char* key, double def) { return kv.count(key) ? num(key) : def; };
  auto bytes = [&](const char* key) {
    uint64_t b = 0;
    if (!parse_bytes(need(key).c_str(), &b))
      config_error("device model %s: '%s' is not a size", path.c_str(), key);
    return b;
  };

  m.name = need("name");
  m.memory_bytes = bytes("memory");
  m.sm_count = static_cast<int>(num("sm_count"));
  const std::string& cc = need("compute_capability");
  if (std::sscanf(cc.c_str(), "%d.%d", &m.cc_major, &m.cc_minor) != 2)
    config_error("device model %s: compute_capability '%s' is not major.minor", path.c_str(),
                 cc.c_str());
  m.fp32_flops_per_s = num("fp32_flops");
  m.mem_bytes_per_s = num("memory_bandwidth");
  m.h2d_pinned_bytes_per_s = num("h2d_pinned_bandwidth");
  m.d2h_pinned_bytes_per_s = num("d2h_pinned_bandwidth");
  m.h2d_pageable_bytes_per_s = num("h2d_pageable_bandwidth");
  m.d2h_pageable_bytes_per_s = num("d2h_pageable_bandwidth");
  m.copy_latency_ns = num("copy_latency_ns");
  m.launch_latency_ns = num("launch_latency_ns");
  m.api_overhead_ns = num("api_overhead_ns");
  m.managed_fault_ns = num("managed_fault_ns");
  // Note [Managed migration rates]
  // ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
  // The Unified Memory driver migrates managed pages at its own rates, not the pinned
  // copy's: an H200 (driver 580) prefetched to the device at 49.3 GB/s and to the host
  // at 9.4 GB/s where pinned copies ran at 54.9 and 55.3 (docs/gpu-results.md). Every
  // managed migration (a prefetch, a fault's page, a page the driver evicts to make
  // room, a host access to a device-resident page) moves at these rates, in their
  // direction. A model that measured none takes its pinned rates, which is kinder to
  // managed memory than that GPU was.
  m.managed_h2d_bytes_per_s = opt("managed_h2d_bandwidth", m.h2d_pinned_bytes_per_s);
  m.managed_d2h_bytes_per_s = opt("managed_d2h_bandwidth", m.d2h_pinned_bytes_per_s);
  auto vmm = [&](const char* family) {
    std::string call = std::string(family) + "_ns";
    std::string page = std::string(family) + "_per_2mib_ns";
    // See Note [Repeated VMM calls].
    std::string repeat = std::string(family) + "_repeat_ns";
    const double call_ns = num(call.c_str());
    return device_model::vmm_cost{call_ns, num(page.c_str()), opt(repeat.c_str(), call_ns)};
  };
  m.vmm_create = vmm("vmm_create");
  m.vmm_map = vmm("vmm_map");
  m.vmm_set_access = vmm("vmm_set_access");
  m.vmm_unmap = vmm("vmm_unmap");
  m.vmm_release = vmm("vmm_release");
  m.event_record_ns = num("event_record_ns");
  m.event_query_ns = num("event_query_ns");
  m.event_sync_ns = num("event_sync_ns");
  m.stream_wait_event_ns = num("stream_wait_event_ns");
  m.copy_enqueue_ns = num("copy_enqueue_ns");
  m.launch_enqueue_ns = num("launch_enqueue_ns");
  auto flag = [&](const char* key) {
    const std::string& v = need(key);
    if (v != "0" && v != "1")
      config_error("device model %s: '%s = %s' is not 0 or 1", path.c_str(), key, v.c_str());
    return v == "1" ? 1 : 0;
  };
  m.vmm_waits_for_device = flag("vmm_waits_for_device");
  m.vmm_unmap_spans_mappings =
      kv.count("vmm_unmap_spans_mappings") ? flag("vmm_unmap_spans_mappings") : 1;
  m.copy_engines_serve_ready =
      kv.count("copy_engines_serve_ready") ? flag("copy_engines_serve_ready") : 1;
  m.vmm_calls_serialized = kv.count("vmm_calls_serialized") ? flag("vmm_calls_serialized") : 1;
  m.host_vmm_supported = flag("host_vmm_supported");
  m.kernel_host_access_bytes_per_s = num("kernel_host_access_bandwidth");
  m.managed_page_bytes = bytes("managed_page_size");
  m.concurrent_managed_access = static_cast<int>(num("concurrent_managed_access"));
  // See Note [Discards] in tests/simgpu/driver/managed.h: where not measured, a fault's
  // own part, but never more than the migration to the host that the discard spares.
  m.managed_discard_page_ns = opt(
      "managed_discard_page_ns",
      std::min(m.managed_fault_ns,
               static_cast<double>(m.managed_page_bytes) / m.managed_d2h_bytes_per_s * 1e9));
  m.clock_khz = static_cast<int>(opt("clock_khz", 1000000));
  m.mem_clock_khz = static_cast<int>(opt("memory_clock_khz", 1000000));
  m.mem_bus_width_bits = static_cast<int>(opt("memory_bus_width_bits", 384));
  m.l2_bytes = static_cast<int>(opt("l2_bytes", 4 * 1024 * 1024));
  m.max_threads_per_sm = static_cast<int>(opt("max_threads_per_sm", 2048));
  m.max_shared_per_block_bytes = static_cast<int>(opt("max_shared_per_block_bytes", 49152));
  if (m.managed_page_bytes < 4096 || (m.managed_page_bytes & (m.managed_page_bytes - 1)) != 0)
    config_error("device model %s: managed_page_size must be a power of two >= 4KiB",
                 path.c_str());
  if (m.fp32_flops_per_s <= 0 || m.mem_bytes_per_s <= 0 || m.h2d_pinned_bytes_per_s <= 0 ||
      m.d2h_pinned_bytes_per_s <= 0 || m.h2d_pageable_bytes_per_s <= 0 ||
      m.d2h_pageable_bytes_per_s <= 0 || m.kernel_host_access_bytes_per_s <= 0 ||
      m.managed_h2d_bytes_per_s <= 0 || m.managed_d2h_bytes_per_s <= 0)
    config_error("device model %s: rates must be positive", path.c_str());
  return m;
}

}  // namespace simgpu
