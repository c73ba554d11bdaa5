// Swap- and um-mode glue of the hooks (see swap_hooks.h): each entry point's ranges,
// and a launch's argument words read with its parameter layout (asked of CUDA here,
// where the symbols are); core/launch_residency.h does the rest.
#include "interpose/swap_hooks.h"

#include <algorithm>
#include <array>
#include <memory>
#include <new>
#include <span>
#include <vector>

#include "common/log.h"
#include "common/options.h"
#include "common/stats.h"
#include "common/tracker.h"
#include "common/units.h"
#include "interpose/abi_guard.h"
#include "interpose/handlers.h"
#include "interpose/pool_hooks.h"
#include "interpose/profile_hooks.h"
#include "interpose/real.h"
#include "core/graph_footprint.h"
#include "core/launch_residency.h"
#include "profiler/launch_scan.h"
#include "profiler/session.h"

namespace oversub::interpose {

std::atomic<int> g_residency_on{-1};

namespace {

profiler::function_cache g_layouts;
profiler::function_cache g_driver_layouts;
std::atomic<bool> g_unreadable_logged{false};

// The parameter layout of func, asked of CUDA once (outside any lock of ours), or
// null while an application error is pending (Note [Probing leaves no error
// behind] in profiler/session.h): the launch is then prepared with no buffers (its
// pages reached where they are) and the function probed at a later launch.
// See Note [A launch that may touch anything] (residency/swap_engine.h): each function whose
// layout cannot be read is named once in the log, at warn level for the first.
void say_unreadable(const char* name) {
  const bool first = !g_unreadable_logged.exchange(true, std::memory_order_relaxed);
  log::emit(first ? log::level::warn : log::level::info,
            "kernel '{}': its parameter layout cannot be read, so swap mode cannot tell "
            "which buffers it uses; its launches are taken to touch any page (slower; "
            "counted as launches_unreadable)",
            name != nullptr ? name : "<unnamed>");
}

const profiler::function_info* layout_of(const void* func) {
  if (const profiler::function_info* f = g_layouts.lookup(func)) return f;
  profiler::function_info info;
  if (!profiler::probe_runtime_params(cuda_queries(), func, info.params, &info.unreadable)) {
    return nullptr;
  }
  if (info.unreadable) {
    const char* name = nullptr;
    const profiler::cuda_queries& q = cuda_queries();
    if (q.runtime_name == nullptr || q.runtime_name(&name, func) != 0) name = nullptr;
    if (q.runtime_take_error != nullptr) q.runtime_take_error();  // Note [Probing leaves no error behind] in profiler/session.h
    say_unreadable(name);
  }
  return g_layouts.insert(func, std::move(info));
}

// The call as core/launch_residency.h sees it: its stream the driver stream it
// enqueues on (the thread's for a _ptsz/_ptds twin's null stream).
resident_call resident(call_site at, int device, cudaStream_t stream) {
  return resident_call{at.name, device, driver_stream(at.per_thread, stream), at.runtime};
}

// The parameter layout of driver function f, asked of CUDA once.
const profiler::function_info* driver_layout_of(void* f) {
  if (const profiler::function_info* info = g_driver_layouts.lookup(f)) return info;
  profiler::function_info info;
  info.unreadable = !profiler::probe_driver_params(cuda_queries(), f, info.params);
  if (info.unreadable) {
    const char* name = nullptr;
    const profiler::cuda_queries& q = cuda_queries();
    if (q.driver_name == nullptr || q.driver_name(&name, f) != 0) {
      if (q.kernel_name == nullptr || q.kernel_name(&name, f) != 0) name = nullptr;
    }
    say_unreadable(name);
  }
  return g_driver_layouts.insert(f, std::move(info));
}

}  // namespace

bool decide_residency_mode() {
  // The pool first: it may fall back from swap to um or pool (fall_back_without_host_vmm).
  const bool on = pool_mode() && (current_config().mode == run_mode::swap ||
                                  current_config().mode == run_mode::um);
  int expected = -1;
  if (!g_residency_on.compare_exchange_strong(expected, on ? 1 : 0)) return expected == 1;
  return on;
}

cudaError_t swap_launch(hook_id id, const void* func, void** args, cudaStream_t stream) {
  std::uint64_t* words = launch_words();
  std::size_t n_words = 0;
  bool unreadable = words == nullptr;
  if (words != nullptr && func != nullptr && args != nullptr) {
    if (const profiler::function_info* f = layout_of(func)) {
      n_words = profiler::gather_words(f->params, args, words);
      unreadable = f->unreadable;
    } else {
      unreadable = true;  // not probed yet (an application error is pending)
    }
  }
  const call_site at = site_of(id);
  // See Note [A test-only fault point] in interpose/abi_guard.h.
  test_throw_point("schedule_before_launch");
  return make_launch_resident(resident(at, current_device(), stream), core(), words, n_words,
                              unreadable, func);
}

cudaError_t swap_driver_launch(call_site at, int device, void* f, void** params, void** extra,
                               cudaStream_t stream) {
  std::uint64_t* words = launch_words();
  std::size_t n_words = 0;
  bool unreadable = words == nullptr;
  if (words != nullptr && f != nullptr && (params != nullptr || extra != nullptr)) {
    const profiler::function_info* info = driver_layout_of(f);
    unreadable = info->unreadable;
    if (params != nullptr) {
      n_words = profiler::gather_words(info->params, params, words);
    } else {
      std::size_t packed_bytes = 0;
      if (const void* packed = profiler::packed_arguments(extra, &packed_bytes)) {
        n_words = profiler::gather_packed(info->params, packed, packed_bytes, words);
      }
    }
  }
  // See Note [A test-only fault point] in interpose/abi_guard.h.
  test_throw_point("schedule_before_launch");
  return make_launch_resident(resident(at, device, stream), core(), words, n_words, unreadable,
                              f);
}

cudaError_t swap_ranges(call_site at, int device, swap_range a, swap_range b, bool writes,
                        cudaStream_t stream) {
  const residency::byte_range ranges[2] = {{reinterpret_cast<std::uintptr_t>(a.ptr), a.bytes},
                                      {reinterpret_cast<std::uintptr_t>(b.ptr), b.bytes}};
  return make_copy_resident(resident(at, device, stream), ranges, 2, writes);
}

cudaError_t swap_graph_launch(call_site at, int device, cudaGraphExec_t exec, cudaStream_t stream) {
  return make_graph_resident(resident(at, device, stream), exec);
}

cudaError_t swap_graph_launch(hook_id id, cudaGraphExec_t exec, cudaStream_t stream) {
  return swap_graph_launch(site_of(id), current_device(), exec, stream);
}

void swap_graph_instantiated(cudaGraphExec_t exec, cudaGraph_t graph) noexcept {
  if (residency_mode()) core::graph_instantiated(exec, graph);
}

void swap_graph_destroyed(cudaGraph_t graph) noexcept {
  if (residency_mode()) core::graph_destroyed(graph);
}

void swap_graph_exec_destroyed(cudaGraphExec_t exec) noexcept {
  if (residency_mode()) core::graph_exec_destroyed(exec);
}

cudaError_t handle(hook_tag<hook_id::cudaGraphInstantiate>, hook_id id, cudaGraphExec_t* exec,
                   cudaGraph_t graph, unsigned long long flags) {
  const cudaError_t rc = call_real<hook_id::cudaGraphInstantiate>(id, exec, graph, flags);
  if (rc == cudaSuccess && exec != nullptr) swap_graph_instantiated(*exec, graph);
  return rc;
}

cudaError_t handle(hook_tag<hook_id::cudaGraphInstantiateWithFlags>, hook_id id,
                   cudaGraphExec_t* exec, cudaGraph_t graph, unsigned long long flags) {
  const cudaError_t rc =
      call_real<hook_id::cudaGraphInstantiateWithFlags>(id, exec, graph, flags);
  if (rc == cudaSuccess && exec != nullptr) swap_graph_instantiated(*exec, graph);
  return rc;
}

cudaError_t handle(hook_tag<hook_id::cudaGraphInstantiateWithParams>, hook_id id,
                   cudaGraphExec_t* exec, cudaGraph_t graph,
                   cudaGraphInstantiateParams* params) {
  const cudaError_t rc =
      call_real<hook_id::cudaGraphInstantiateWithParams>(id, exec, graph, params);
  if (rc == cudaSuccess && exec != nullptr) swap_graph_instantiated(*exec, graph);
  return rc;
}

cudaError_t handle(hook_tag<hook_id::cudaGraphExecDestroy>, hook_id id, cudaGraphExec_t exec) {
  swap_graph_exec_destroyed(exec);
  return call_real<hook_id::cudaGraphExecDestroy>(id, exec);
}

cudaError_t handle(hook_tag<hook_id::cudaGraphDestroy>, hook_id id, cudaGraph_t graph) {
  swap_graph_destroyed(graph);
  return call_real<hook_id::cudaGraphDestroy>(id, graph);
}

cudaError_t swap_ranges(hook_id id, swap_range a, swap_range b, bool writes,
                        cudaStream_t stream) {
  return swap_ranges(site_of(id), current_device(), a, b, writes, stream);
}

}  // namespace oversub::interpose
