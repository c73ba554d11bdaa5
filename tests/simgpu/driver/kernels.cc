// Kernel registry and launch (see Note [What a launch does] in kernels.h).
#include "kernels.h"

#include <sys/mman.h>

#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <map>
#include <memory>

#include "address_space.h"
#include "callbacks.h"
#include "capture.h"
#include "config.h"
#include "device.h"
#include "fault.h"
#include "fault_injection.h"
#include "managed.h"
#include "timeline.h"

namespace simgpu {

namespace {

std::map<const void*, kernel_obj*>& registry() {
  static auto* m = new std::map<const void*, kernel_obj*>();
  return *m;
}
std::map<const kernel_obj*, bool>& kernels() {
  static auto* m = new std::map<const kernel_obj*, bool>();
  return *m;
}

// A derived access's mode bit: its extent is a guess (a VMM pointer reaches the run
// of mapped memory from its mapping on), so its cost follows its first byte's place,
// not each mapping's (host_bytes_of).
constexpr int kDerivedExtent = 1 << 8;

// The bytes of a footprint access a kernel reads or writes in host memory.
uint64_t host_bytes_of(const simgpuAccess& a) {
  const auto p = reinterpret_cast<uintptr_t>(a.ptr);
  if ((a.mode & kDerivedExtent) == 0) return host_bytes_in(p, a.bytes);
  const mem_place where = classify(p);
  return where == mem_place::host_mapping || where == mem_place::pinned ? a.bytes : 0;
}

// The derived footprint: the allocation behind every pointer-sized argument word.
bool derive_footprint(const kernel_obj* k, const std::vector<uint8_t>& buf,
                      simgpuFootprint* fp, uintptr_t* bad, char* why, size_t why_bytes) {
  for (const simgpuParamInfo& p : k->params) {
    bool is_ptr = p.flags & (SIMGPU_PARAM_POINTER | SIMGPU_PARAM_CONST_POINTER);
    int mode = ((p.flags & SIMGPU_PARAM_CONST_POINTER) ? SIMGPU_READ : SIMGPU_READWRITE) |
               kDerivedExtent;
    for (size_t off = round_up(p.offset, 8); off + 8 <= p.offset + p.size; off += 8) {
      uintptr_t v = 0;
      std::memcpy(&v, buf.data() + off, 8);
      if (v == 0) continue;
      uintptr_t base = 0;
      uint64_t bytes = 0;
      if (in_device_va(v)) {
        region* r = find_region(v);
        if (r == nullptr || !r->live) {
          if (is_ptr) {  // a pointer parameter into dead device memory
            *bad = v;
            describe_address(v, why, why_bytes);
            return false;
          }
          continue;
        }
        base = r->base;
        bytes = r->kind == region_kind::vmm_reservation ? 0 : r->bytes;
        if (r->kind == region_kind::vmm_reservation) {
          vmm_mapping* m = find_mapping(r, v);
          if (m == nullptr || m->access == 0) {
            if (is_ptr) {
              *bad = v;
              describe_address(v, why, why_bytes);
              return false;
            }
            continue;
          }
          // A VMM pointer: the run of mapped, accessible memory from v's mapping on.
          base = m->lo;
          uintptr_t end = m->hi;
          while (vmm_mapping* n = find_mapping(r, end)) {
            if (n->access == 0) break;
            end = n->hi;
          }
          bytes = end - base;
        }
      } else if (pinned_block* b = find_pinned(v)) {
        base = b->base;
        bytes = b->bytes;
      } else {
        if (is_ptr && off == p.offset) {  // a pointer parameter to pageable host memory
          *bad = v;
          describe_address(v, why, why_bytes);
          return false;
        }
        continue;
      }
      bool dup = false;
      for (int i = 0; i < fp->count; ++i) {
        if (reinterpret_cast<uintptr_t>(fp->accesses[i].ptr) == base) {
          fp->accesses[i].mode |= mode;
          dup = true;
        }
      }
      if (!dup && fp->count >= SIMGPU_MAX_ACCESSES) {
        // Dropping it would hide an access from the race detector.
        std::fprintf(stderr, "simgpu: kernel '%s' passes more than %d allocations\n",
                     k->name.c_str(), SIMGPU_MAX_ACCESSES);
        std::abort();
      }
      if (!dup)
        fp->accesses[fp->count++] = simgpuAccess{reinterpret_cast<const void*>(base), bytes, mode};
    }
  }
  return true;
}

// Note [The launch log]
// ~~~~~~~~~~~~~~~~~~~~~
// SIMGPU_LAUNCH_LOG=path appends one line per kernel that
// runs: "<correlation id> <kernel name> <base> <base> ...", the bases (hex) of the
// live device allocations (cuMemAlloc, managed) the kernel's footprint touches, in
// footprint order. With a footprint function that is what the kernel's author says
// it uses: the ground truth the profiler's argument scanning is tested against.
// The line ends with "ns=<duration>": the kernel's virtual duration as its CUPTI
// activity record gives it (end - start, each truncated to whole ns), the ground
// truth for the durations oversub learns.
void log_launch(const kernel_obj* k, const simgpuFootprint& fp, uint64_t duration_ns) {
  const std::string& path = get_config().launch_log;
  if (path.empty()) return;
  static FILE* out = std::fopen(path.c_str(), "a");
  if (out == nullptr) return;
  std::string line = std::to_string(current_correlation_id()) + " " + k->name;
  for (int i = 0; i < fp.count; ++i) {
    const uintptr_t p = reinterpret_cast<uintptr_t>(fp.accesses[i].ptr);
    if (!in_device_va(p)) continue;
    region* r = find_region(p);
    if (r == nullptr || !r->live || r->kind == region_kind::vmm_reservation) continue;
    char hex[32];
    std::snprintf(hex, sizeof hex, " %" PRIxPTR, r->base);
    line += hex;
  }
  line += " ns=" + std::to_string(duration_ns) + "\n";
  std::fwrite(line.data(), 1, line.size(), out);
  std::fflush(out);
}

struct run_args {
  kernel_obj* k;
  void** args;
  dim3 grid, block;
};

void run_grid(void* p) {
  auto* a = static_cast<run_args*>(p);
  a->k->run(a->args, a->grid, a->block);
}

CUresult launch_buffer(kernel_obj* k, dim3 grid, dim3 block, unsigned shared_bytes,
                       stream_obj* s, const std::vector<uint8_t>& buf) {
  device_state& d = dev();
  bool record = false;
  if (CUresult g = capture_gate(s, &record); g != CUDA_SUCCESS) return g;
  if (record) {
    capture_add(s, "kernel '" + k->name + "'", [=](stream_obj* on) {
      return launch_buffer(k, grid, block, shared_bytes, on, buf);
    });
    return CUDA_SUCCESS;
  }
  if (CUresult f = inject_failure(fail_kind::launch); f != CUDA_SUCCESS) return f;

  std::vector<uint8_t> mine(buf);
  std::vector<void*> args(k->params.size());
  for (size_t i = 0; i < k->params.size(); ++i) args[i] = mine.data() + k->params[i].offset;

  simgpuFootprint fp{};
  uintptr_t bad = 0;
  char why[256];
  std::string what = "kernel '" + k->name + "'";
  if (k->footprint != nullptr) {
    k->footprint(args.data(), grid, block, &fp);
  } else if (!derive_footprint(k, mine, &fp, &bad, why, sizeof why)) {
    log_line("%s accessed 0x%" PRIxPTR ": %s", what.c_str(), bad, why);
    g_sticky_error.store(CUDA_ERROR_ILLEGAL_ADDRESS);
    return CUDA_ERROR_ILLEGAL_ADDRESS;
  }
  for (int i = 0; i < fp.count; ++i) {
    const simgpuAccess& a = fp.accesses[i];
    if (!device_range_ok(reinterpret_cast<uintptr_t>(a.ptr), a.bytes, a.mode & SIMGPU_WRITE,
                         &bad, why, sizeof why)) {
      log_line("%s accessed 0x%" PRIxPTR ": %s", what.c_str(), bad, why);
      g_sticky_error.store(CUDA_ERROR_ILLEGAL_ADDRESS);
      return CUDA_ERROR_ILLEGAL_ADDRESS;
    }
  }

  double start = op_begin(s, engine::compute, d.model.launch_latency_ns, call_cost::launch);
  device_window w;
  w.what = what.c_str();
  for (int i = 0; i < fp.count; ++i) {
    region* r = find_region(reinterpret_cast<uintptr_t>(fp.accesses[i].ptr));
    if (r != nullptr && r->live && r->kind == region_kind::managed)
      managed_prepare_for_kernel(r, w);
  }
  for (int i = 0; i < fp.count; ++i) {
    const simgpuAccess& a = fp.accesses[i];
    // See Note [A kernel touches its footprint] in managed.h.
    if ((a.mode & kDerivedExtent) == 0)
      managed_fault_declared(reinterpret_cast<uintptr_t>(a.ptr), a.bytes, w);
    window_declare(w, reinterpret_cast<uintptr_t>(a.ptr), a.bytes, a.mode & SIMGPU_WRITE);
  }
  run_args ra{k, args.data(), grid, block};
  bool ok = run_in_window(w, &run_grid, &ra);
  const std::vector<reached_run> reached = window_reached(w);
  double reached_device = 0, reached_host = 0;
  for (const reached_run& run : reached) {
    // See Note [A range across mappings] in address_space.cc.
    const uint64_t host = host_bytes_in(run.lo, run.hi - run.lo);
    reached_host += static_cast<double>(host);
    reached_device += static_cast<double>(run.hi - run.lo - host);
    if (in_device_va(run.lo)) d.st.kernel_host_mapped_bytes += host;
  }
  double duration = kernel_duration_ns(fp, reached_device, reached_host) + w.fault_ns;
  double end = start + duration;
  log_launch(k, fp, static_cast<uint64_t>(end) - static_cast<uint64_t>(start));
  op_end(s, engine::compute, end);
  timeline_op(w.fault_ns > 0 ? "kernel (faulting)" : "kernel", k->name.c_str(), s->id, start,
              end, 0);
  // See Note [Migrations of pages in use] in managed.h.
  for (int i = 0; i < fp.count; ++i) {
    const simgpuAccess& a = fp.accesses[i];
    managed_note_device_use(reinterpret_cast<uintptr_t>(a.ptr), a.bytes, end);
  }
  for (const reached_run& run : reached) managed_note_device_use(run.lo, run.hi - run.lo, end);
  ++d.st.kernels;
  // Note [Kernels on host-located mappings]
  // ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
  // The footprint's bytes in host-located
  // VMM mappings, and the pages reached there outside it (counted above), are
  // counted (and paid at kernel_host_access_bandwidth by kernel_duration_ns), so a
  // test can tell that a swap engine made every page resident before its kernel.
  for (int i = 0; i < fp.count; ++i) {
    const auto p = reinterpret_cast<uintptr_t>(fp.accesses[i].ptr);
    if (in_device_va(p)) d.st.kernel_host_mapped_bytes += host_bytes_of(fp.accesses[i]);
  }
  if (!ok) return CUDA_ERROR_ILLEGAL_ADDRESS;

  auto desc = std::make_shared<const std::string>(what + " on " + stream_name(s));
  for (int i = 0; i < fp.count; ++i) {
    const simgpuAccess& a = fp.accesses[i];
    race_access(s, reinterpret_cast<uintptr_t>(a.ptr), a.bytes, a.mode & SIMGPU_WRITE, desc);
  }
  for (const reached_run& run : reached) race_access(s, run.lo, run.hi - run.lo, run.write, desc);
  if (activity_sink_installed()) {
    simgpuActivity rec{};
    rec.kind = SIMGPU_ACTIVITY_KERNEL;
    rec.start_ns = static_cast<uint64_t>(start);
    rec.end_ns = static_cast<uint64_t>(end);
    rec.correlationId = current_correlation_id();
    rec.streamId = static_cast<uint32_t>(s->id);
    rec.contextId = 1;
    rec.name = k->name.c_str();
    rec.grid = grid;
    rec.block = block;
    rec.sharedMem = shared_bytes;
    emit_activity(rec);
  }
  return CUDA_SUCCESS;
}

}  // namespace

double kernel_duration_ns(const simgpuFootprint& fp, double reached_device_bytes,
                          double reached_host_bytes) {
  const device_model& m = dev().model;
  double device_bytes = reached_device_bytes, host_bytes = reached_host_bytes;
  for (int i = 0; i < fp.count; ++i) {
    const simgpuAccess& a = fp.accesses[i];
    // See Note [A range across mappings] in address_space.cc.
    const auto host = static_cast<double>(host_bytes_of(a));
    const double times =
        ((a.mode & SIMGPU_READ) ? 1.0 : 0.0) + ((a.mode & SIMGPU_WRITE) ? 1.0 : 0.0);
    host_bytes += host * times;
    device_bytes += (static_cast<double>(a.bytes) - host) * times;
  }
  double compute_ns = fp.flops / m.fp32_flops_per_s * 1e9;
  double memory_ns = device_bytes / m.mem_bytes_per_s * 1e9;
  // Note [Kernels on host memory]
  // ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
  // Every byte a kernel reads or writes in host
  // memory crosses the link at the model's zero-copy rate, each time it is read
  // (a footprint that declares a range twice pays for it twice; nothing is cached).
  return std::max(compute_ns, memory_ns) + host_bytes / m.kernel_host_access_bytes_per_s * 1e9;
}

kernel_obj* find_kernel(CUfunction f) {
  auto* k = reinterpret_cast<kernel_obj*>(f);
  return kernels().count(k) ? k : nullptr;
}

CUresult launch_kernel(kernel_obj* k, dim3 grid, dim3 block, unsigned shared_bytes,
                       stream_obj* s, void** kernel_params, void** extra) {
  if (grid.x == 0 || grid.y == 0 || grid.z == 0 || block.x == 0 || block.y == 0 ||
      block.z == 0)
    return CUDA_ERROR_INVALID_VALUE;
  uint64_t threads = uint64_t{block.x} * block.y * block.z;
  if (threads > static_cast<uint64_t>(dev().model.max_threads_per_block) || block.z > 64 ||
      grid.y > 65535 || grid.z > 65535)
    return CUDA_ERROR_INVALID_VALUE;
  if (shared_bytes > static_cast<unsigned>(dev().model.max_shared_per_block_bytes))
    return CUDA_ERROR_INVALID_VALUE;
  std::vector<uint8_t> buf(std::max<size_t>(k->param_bytes, 1), 0);
  if (kernel_params != nullptr) {
    for (size_t i = 0; i < k->params.size(); ++i) {
      if (kernel_params[i] == nullptr) return CUDA_ERROR_INVALID_VALUE;
      std::memcpy(buf.data() + k->params[i].offset, kernel_params[i], k->params[i].size);
    }
  } else if (extra != nullptr) {
    void* p = nullptr;
    size_t n = 0;
    bool have_size = false;
    for (size_t i = 0; extra[i] != CU_LAUNCH_PARAM_END; i += 2) {
      if (extra[i] == CU_LAUNCH_PARAM_BUFFER_POINTER) p = extra[i + 1];
      else if (extra[i] == CU_LAUNCH_PARAM_BUFFER_SIZE) {
        n = *static_cast<size_t*>(extra[i + 1]);
        have_size = true;
      } else return CUDA_ERROR_INVALID_VALUE;
    }
    if (p == nullptr || !have_size || n < k->param_bytes) return CUDA_ERROR_INVALID_VALUE;
    std::memcpy(buf.data(), p, k->param_bytes);
  } else if (!k->params.empty()) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  return launch_buffer(k, grid, block, shared_bytes, s, buf);
}

}  // namespace simgpu

using namespace simgpu;

SIMGPU_EXPORT CUfunction simgpuRegisterKernel(const void* hostFun, const char* name,
                                              const simgpuParamInfo* params, size_t nparams,
                                              simgpuKernelRun run,
                                              simgpuKernelFootprint footprint) {
  if (hostFun == nullptr || name == nullptr || run == nullptr || (nparams && !params))
    return nullptr;
  lock_guard lock;
  auto& reg = registry();
  auto it = reg.find(hostFun);
  if (it != reg.end()) return reinterpret_cast<CUfunction>(it->second);
  auto* k = new kernel_obj();
  k->host_fun = hostFun;
  k->name = name;
  k->params.assign(params, params + nparams);
  for (const auto& p : k->params) k->param_bytes = std::max(k->param_bytes, p.offset + p.size);
  k->run = run;
  k->footprint = footprint;
  reg[hostFun] = k;
  kernels()[k] = true;
  return reinterpret_cast<CUfunction>(k);
}

SIMGPU_EXPORT CUfunction simgpuFunctionFromHost(const void* hostFun) {
  lock_guard lock;
  auto it = registry().find(hostFun);
  return it == registry().end() ? nullptr : reinterpret_cast<CUfunction>(it->second);
}
