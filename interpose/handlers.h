// What a hook does, one overload per plain hook.
//
// The exported wrapper (hooks.cc) calls handle(hook_tag<base>{}, id, args...),
// where id is the symbol actually called (cudaMemcpy or cudaMemcpy_ptds). Hooks
// that only need counting use the generic template, which forwards; the memory
// hooks have their own overloads (memory_hooks.cc), which call the core. Every
// handler returns CUDA's own error codes; what one throws is turned into one by the
// wrapper (see Note [Nothing crosses the ABI edge] in interpose/abi_guard.h).
#ifndef OVERSUB_INTERPOSE_HANDLERS_H
#define OVERSUB_INTERPOSE_HANDLERS_H

#include "interpose/hook_table.h"
#include "interpose/pool_hooks.h"
#include "interpose/profile_hooks.h"
#include "interpose/real.h"
#include "interpose/swap_hooks.h"

namespace oversub::interpose {

// Work-enqueuing families also tell the pool which stream got work (pool mode),
// before the work is enqueued (Note [Stream-ordered reuse] in pool/stream_fences.h).
template <hook_id Base, typename... A>
cudaError_t handle(hook_tag<Base>, hook_id id, A... args) {
  constexpr hook_family family = hook_families[index(Base)];
  if constexpr (family == hook_family::launch || family == hook_family::copy ||
                family == hook_family::memset || family == hook_family::graph) {
    note_stream_work(id, args...);
    if (const cudaError_t rc = swap_before<Base>(id, args...); rc != cudaSuccess) return rc;
    profile_before<Base>(args...);
    const cudaError_t rc = call_real<Base>(id, args...);
    profile_after();
    return rc;
  }
  return call_real<Base>(id, args...);
}

cudaError_t handle(hook_tag<hook_id::cudaMalloc>, hook_id id, void** devPtr,
                   size_t size);
cudaError_t handle(hook_tag<hook_id::cudaMallocAsync>, hook_id id, void** devPtr,
                   size_t size, cudaStream_t stream);
cudaError_t handle(hook_tag<hook_id::cudaMallocFromPoolAsync>, hook_id id, void** ptr,
                   size_t size, cudaMemPool_t pool, cudaStream_t stream);
cudaError_t handle(hook_tag<hook_id::cudaMallocPitch>, hook_id id, void** devPtr,
                   size_t* pitch, size_t width, size_t height);
cudaError_t handle(hook_tag<hook_id::cudaMallocManaged>, hook_id id, void** devPtr,
                   size_t size, unsigned int flags);
cudaError_t handle(hook_tag<hook_id::cudaFree>, hook_id id, void* devPtr);
cudaError_t handle(hook_tag<hook_id::cudaFreeAsync>, hook_id id, void* devPtr,
                   cudaStream_t stream);
cudaError_t handle(hook_tag<hook_id::cudaMemGetInfo>, hook_id id, size_t* free_bytes,
                   size_t* total_bytes);
// Graph instantiation and destruction (Note [A graph's footprint] in
// core/graph_footprint.h; swap_hooks.cc).
cudaError_t handle(hook_tag<hook_id::cudaGraphInstantiate>, hook_id id,
                   cudaGraphExec_t* exec, cudaGraph_t graph, unsigned long long flags);
cudaError_t handle(hook_tag<hook_id::cudaGraphInstantiateWithFlags>, hook_id id,
                   cudaGraphExec_t* exec, cudaGraph_t graph, unsigned long long flags);
cudaError_t handle(hook_tag<hook_id::cudaGraphInstantiateWithParams>, hook_id id,
                   cudaGraphExec_t* exec, cudaGraph_t graph,
                   cudaGraphInstantiateParams* params);
cudaError_t handle(hook_tag<hook_id::cudaGraphExecDestroy>, hook_id id, cudaGraphExec_t exec);
cudaError_t handle(hook_tag<hook_id::cudaGraphDestroy>, hook_id id, cudaGraph_t graph);
// The runtime's way to the driver: its answer, replaced by our hook where the
// version table says so (driver_real.cc).
cudaError_t handle(hook_tag<hook_id::cudaGetDriverEntryPoint>, hook_id id, const char* symbol,
                   void** funcPtr, unsigned long long flags,
                   cudaDriverEntryPointQueryResult* driverStatus);
cudaError_t handle(hook_tag<hook_id::cudaGetDriverEntryPointByVersion>, hook_id id,
                   const char* symbol, void** funcPtr, unsigned int cudaVersion,
                   unsigned long long flags,
                   cudaDriverEntryPointQueryResult* driverStatus);

}  // namespace oversub::interpose

#endif  // OVERSUB_INTERPOSE_HANDLERS_H
