// The profiling side of the hooks (OVERSUB_PROFILE_OUT, any mode but off): starts
// the profiler session (profiler/session.h) at the first hooked call, hands it the
// CUDA queries it needs (resolved here, where symbol names live), tells it about
// allocations and frees, and, where CUPTI could not be had, about launches, copies
// and memsets seen by the runtime hooks.
#ifndef OVERSUB_INTERPOSE_PROFILE_HOOKS_H
#define OVERSUB_INTERPOSE_PROFILE_HOOKS_H

#include <atomic>
#include <cstdint>
#include <tuple>

#include "interpose/hook_table.h"
#include "profiler/cupti_source.h"
#include "profiler/session.h"

namespace oversub::interpose {

// 1: profiling; 0: not; -1: not decided yet.
extern std::atomic<int> g_profile_on;
bool decide_profiling() noexcept;
inline bool profiling() noexcept {
  const int on = g_profile_on.load(std::memory_order_acquire);
  return on < 0 ? decide_profiling() : on == 1;
}

// The CUDA queries the profiler and the swap hooks need (parameter layouts, names,
// the last-error slot), looked up once.
const profiler::cuda_queries& cuda_queries() noexcept;

void profile_alloc(const void* base, std::uint64_t bytes);
void profile_free(const void* base);

profiler::copy_kind profile_copy_kind(cudaMemcpyKind kind) noexcept;

// Before a launch, copy or memset enqueues: the fallback's view of it.
template <hook_id Base, typename... A>
void profile_before(A... args) {
  auto t = std::make_tuple(args...);
  if constexpr (Base == hook_id::__cudaLaunchKernel) {
    // Its CUPTI callback carries no params: the launch is named here (Note [Launches
    // without params] in profiler/cupti_source.h).
    profiler::cupti::note_hook_launch(reinterpret_cast<const void*>(std::get<0>(t)),
                                      std::get<3>(t));
  }
  if (!profiling() || !profiler::hooks_feed_launches()) return;
  if constexpr (Base == hook_id::cudaLaunchKernel || Base == hook_id::__cudaLaunchKernel ||
                Base == hook_id::cudaLaunchCooperativeKernel) {
    profiler::on_hook_launch(reinterpret_cast<const void*>(std::get<0>(t)), std::get<3>(t));
  } else if constexpr (Base == hook_id::cudaLaunchKernelExC) {
    profiler::on_hook_launch(std::get<1>(t), std::get<2>(t));
  } else if constexpr (Base == hook_id::cudaMemcpy || Base == hook_id::cudaMemcpyAsync) {
    profiler::on_hook_copy(profile_copy_kind(std::get<3>(t)), std::get<2>(t), std::get<0>(t),
                           std::get<1>(t));
  } else if constexpr (Base == hook_id::cudaMemset || Base == hook_id::cudaMemsetAsync) {
    profiler::on_hook_copy(profiler::copy_kind::memset, std::get<2>(t), std::get<0>(t),
                           nullptr);
  }
}

// After the call returned: progress, and the profile once enough iterations.
inline void profile_after() {
  profiler::cupti::clear_hook_launch();
  if (profiling()) profiler::after_call();
}

}  // namespace oversub::interpose

#endif  // OVERSUB_INTERPOSE_PROFILE_HOOKS_H
