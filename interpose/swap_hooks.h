// The swap side of the hooks (OVERSUB_MODE=swap): before a launch, copy or memset is
// enqueued, the device memory it uses is made resident (residency/swap_engine.h) and the
// work is ordered after the fetches.
//
// A launch's buffers are the live allocations its argument words point into
// (profiler/launch_scan.h: the parameter layout from cudaFuncGetParamInfo, every
// 8-byte-aligned word of the arguments, looked up in the tracker's interval map). A
// copy's or memset's are its destination and source ranges. Work whose ranges we
// cannot compute (3D copies and memsets, graph launches) is still counted as a
// possible write (Note [What counts as a write] in residency/swap_engine.h); what it touches
// on the host is reached through the host mapping, slowly but correctly.
//
// Note [Swap before any profile]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// With no schedule learned yet (the first iteration,
// or a job that never repeats), this on-demand residency is the whole policy: each
// launch's pages are fetched as it comes, evicting the least recently used, so the
// first iteration already runs past the device's memory.
#ifndef OVERSUB_INTERPOSE_SWAP_HOOKS_H
#define OVERSUB_INTERPOSE_SWAP_HOOKS_H

#include <atomic>
#include <cstddef>
#include <tuple>
#include <type_traits>

#include "core/pitched_range.h"
#include "interpose/hook_table.h"

namespace oversub::interpose {

// Whether a residency engine decides what is on the device: OVERSUB_MODE=swap (pages
// moved to host memory, residency/swap_engine.h) or um (managed memory prefetched,
// residency/um_engine.h), with the pool running. Both make a launch's, copy's or
// memset's memory resident before it is enqueued and count other libraries' VMM
// memory against their capacity; what only one of them does is asked of the engine
// (pool::device_*), which knows which it is. 1: on; 0: off; -1: undecided.
extern std::atomic<int> g_residency_on;
bool decide_residency_mode();
inline bool residency_mode() {
  const int on = g_residency_on.load(std::memory_order_acquire);
  return on < 0 ? decide_residency_mode() : on == 1;
}

struct swap_range {
  const void* ptr = nullptr;
  std::size_t bytes = 0;
};

// The bytes a 2D call reaches on one side (core/pitched_range.h).
inline swap_range pitched(const void* base, std::size_t pitch, std::size_t width,
                          std::size_t height) {
  const pitched_bytes r =
      pitched_range(reinterpret_cast<std::uintptr_t>(base), pitch, width, height);
  return swap_range{reinterpret_cast<const void*>(r.addr), r.bytes};
}

// The launch's buffers made resident on stream. cudaErrorMemoryAllocation (logged,
// with the figures) when the launch's own buffers exceed the device capacity or no
// room can be made; CUDA's code when a copy or mapping fails.
cudaError_t swap_launch(hook_id id, const void* func, void** args, cudaStream_t stream);
// The same for a driver launch of f on device (the context's): its parameters as
// per-parameter pointers (kernelParams) or a packed buffer (extra).
cudaError_t swap_driver_launch(call_site at, int device, void* f, void** params, void** extra,
                               cudaStream_t stream);
// A copy's or memset's ranges made resident on stream (writes: it may write device
// memory).
cudaError_t swap_ranges(call_site at, int device, swap_range a, swap_range b, bool writes,
                        cudaStream_t stream);
// A graph replay on stream: its kernels may use any page (Note [A launch that may
// touch anything] in residency/swap_engine.h); they reach what is on the host where it is.
cudaError_t swap_graph_launch(call_site at, int device, cudaGraphExec_t exec, cudaStream_t stream);
cudaError_t swap_graph_launch(hook_id id, cudaGraphExec_t exec, cudaStream_t stream);
// A graph instantiated, or a graph or executable graph destroyed: what a replay
// prefetches (Note [A graph's footprint] in core/graph_footprint.h).
void swap_graph_instantiated(cudaGraphExec_t exec, cudaGraph_t graph) noexcept;
void swap_graph_destroyed(cudaGraph_t graph) noexcept;
void swap_graph_exec_destroyed(cudaGraphExec_t exec) noexcept;
cudaError_t swap_ranges(hook_id id, swap_range a, swap_range b, bool writes,
                        cudaStream_t stream);

// Dispatch by entry point (the generic handler calls it before the real call).
template <hook_id Base, typename... A>
cudaError_t swap_before(hook_id id, A... args) {
  if (!residency_mode()) return cudaSuccess;
  auto t = std::make_tuple(args...);
  if constexpr (Base == hook_id::cudaLaunchKernel || Base == hook_id::__cudaLaunchKernel ||
                Base == hook_id::cudaLaunchCooperativeKernel) {
    return swap_launch(id, reinterpret_cast<const void*>(std::get<0>(t)), std::get<3>(t),
                       std::get<5>(t));
  } else if constexpr (Base == hook_id::cudaLaunchKernelExC) {
    const cudaLaunchConfig_t* c = std::get<0>(t);
    return swap_launch(id, std::get<1>(t), std::get<2>(t), c != nullptr ? c->stream : nullptr);
  } else if constexpr (Base == hook_id::cudaMemcpy || Base == hook_id::cudaMemcpyAsync) {
    cudaStream_t s = nullptr;
    if constexpr (Base == hook_id::cudaMemcpyAsync) s = std::get<4>(t);
    const std::size_t n = std::get<2>(t);
    return swap_ranges(id, {std::get<0>(t), n}, {std::get<1>(t), n},
                       std::get<3>(t) != cudaMemcpyDeviceToHost, s);
  } else if constexpr (Base == hook_id::cudaMemcpy2D || Base == hook_id::cudaMemcpy2DAsync) {
    cudaStream_t s = nullptr;
    if constexpr (Base == hook_id::cudaMemcpy2DAsync) s = std::get<7>(t);
    const std::size_t width = std::get<4>(t);
    const std::size_t rows = std::get<5>(t);
    return swap_ranges(id, pitched(std::get<0>(t), std::get<1>(t), width, rows),
                       pitched(std::get<2>(t), std::get<3>(t), width, rows),
                       std::get<6>(t) != cudaMemcpyDeviceToHost, s);
  } else if constexpr (Base == hook_id::cudaMemset || Base == hook_id::cudaMemsetAsync) {
    cudaStream_t s = nullptr;
    if constexpr (Base == hook_id::cudaMemsetAsync) s = std::get<3>(t);
    return swap_ranges(id, {std::get<0>(t), std::get<2>(t)}, {}, true, s);
  } else if constexpr (Base == hook_id::cudaMemset2D || Base == hook_id::cudaMemset2DAsync) {
    cudaStream_t s = nullptr;
    if constexpr (Base == hook_id::cudaMemset2DAsync) s = std::get<5>(t);
    return swap_ranges(id, pitched(std::get<0>(t), std::get<1>(t), std::get<3>(t), std::get<4>(t)),
                       {}, true, s);
  } else if constexpr (Base == hook_id::cudaGraphLaunch) {
    return swap_graph_launch(id, std::get<0>(t), std::get<1>(t));
  } else {
    // 3D copies and memsets, peer copies: a possible write, ranges not computed
    // (their stream does not matter for an empty prepare).
    return swap_ranges(id, {}, {}, true, nullptr);
  }
}

}  // namespace oversub::interpose

#endif  // OVERSUB_INTERPOSE_SWAP_HOOKS_H
