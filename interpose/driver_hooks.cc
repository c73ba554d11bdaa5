// The exported driver hooks (interpose/driver_hooks.def) and what they do: the
// allocating and freeing ones go through the same core as the runtime's
// (memory_core.h), the launches, copies, memsets and graph launches through the same
// pool and residency steps (pool_hooks.h, swap_hooks.h), other libraries' VMM
// allocations are counted (Note [Memory that is not ours] in residency/backend.h).
// Each hook forwards to its real function (driver_real.h, driver_real.cc). See
// driver_hooks.h for how callers get here.
#include "interpose/driver_hooks.h"

#include <cuda.h>

#include <mutex>
#include <unordered_map>

#include "common/log.h"
#include "common/stats.h"
#include "common/tracker.h"
#include "common/units.h"
#include "interpose/abi_guard.h"
#include "interpose/driver_real.h"
#include "interpose/driver_table.h"
#include "interpose/handlers.h"
#include "interpose/memory_core.h"
#include "interpose/pool_hooks.h"
#include "interpose/profile_hooks.h"
#include "interpose/real.h"
#include "interpose/swap_hooks.h"
#include "core/device_pool.h"
#include "core/error_codes.h"
#include "core/pitched_range.h"
#include "core/refusal.h"

namespace oversub::interpose {

namespace {

// The device of the calling thread's current context; false without one.
bool context_device(int& device) noexcept {
  using fn = decltype(&::cuCtxGetDevice);
  static const fn get = plain_driver<fn>("cuCtxGetDevice");
  CUdevice d = 0;
  if (get == nullptr || get(&d) != CUDA_SUCCESS) return false;
  device = static_cast<int>(d);
  return true;
}

call_site site(driver_hook_id id) noexcept {
  return call_site{driver_hooks[index(id)].name, driver_hooks[index(id)].per_thread, false};
}

void count(driver_hook_id id) noexcept {
  stats::count_call(hook_count + index(id));
  stats::counters& c = stats::global();
  switch (driver_hooks[index(id)].family) {
    case driver_family::launch: c.launches.count(); break;
    case driver_family::copy: c.copies.count(); break;
    case driver_family::memset: c.memsets.count(); break;
    case driver_family::graph: c.graph_launches.count(); break;
    default: break;
  }
}

// A driver call made on a path that speaks the runtime's codes (memory_core.h): the
// path sees the runtime's code for it, and the driver caller gets the driver's own
// code back exactly, or the path's answer translated (See Note [Error codes across
// the APIs] in core/error_codes.h).
struct driver_result {
  CUresult real = CUDA_SUCCESS;
  cudaError_t keep(CUresult rc) noexcept {
    real = rc;
    return to_runtime_error(rc);
  }
  CUresult answer(cudaError_t rc) const noexcept {
    return real != CUDA_SUCCESS ? real : to_driver_error(rc);
  }
};

// ---- handlers ------------------------------------------------------------------------

template <driver_hook_id Id>
struct driver_tag {};

// Default: forward.
template <driver_hook_id Base, typename... A>
CUresult handle_driver(driver_tag<Base>, driver_hook_id, real_driver<Base> real,
                       A... args) {
  return real(args...);
}

// Work on stream (launch, copy, memset, graph launch): tell the pool which stream
// got work, make its memory resident (swap/um), then enqueue it.
template <typename Prepare, typename Enqueue>
CUresult driver_work(driver_hook_id id, cudaStream_t stream, Prepare prepare,
                     Enqueue enqueue) {
  const call_site at = site(id);
  if (pool_mode()) pool_note_work(driver_stream(at.per_thread, stream));
  int device = 0;
  if (residency_mode() && context_device(device)) {
    if (const cudaError_t rc = prepare(at, device); rc != cudaSuccess) return to_driver_error(rc);
  }
  const CUresult rc = enqueue();
  profile_after();
  return rc;
}

swap_range range(CUdeviceptr p, std::size_t bytes) {
  return swap_range{reinterpret_cast<const void*>(p), bytes};
}

swap_range range(pitched_bytes r) {
  return swap_range{reinterpret_cast<const void*>(r.addr), r.bytes};
}

template <typename Real, typename... A>
CUresult copy_work(driver_hook_id id, cudaStream_t stream, swap_range a, swap_range b,
                   bool writes, Real real, A... args) {
  return driver_work(
      id, stream,
      [&](call_site at, int device) { return swap_ranges(at, device, a, b, writes, stream); },
      [&] { return real(args...); });
}

// ---- allocation

// An allocation of bytes into *dptr through the core (memory_core.h): real(&p) is the
// driver's own allocation, used when the pool does not serve it. Forwarded untouched
// without a result pointer or a current context.
template <typename Real>
CUresult driver_alloc(driver_hook_id id, CUdeviceptr* dptr, size_t bytes, alloc_kind kind,
                      CUstream stream, Real real) {
  int device = 0;
  if (dptr == nullptr || !context_device(device)) return real(dptr);
  void* out = nullptr;
  driver_result result;
  const cudaError_t rc = tracked_alloc(site(id), device, &out, bytes, kind, stream, [&] {
    CUdeviceptr p = 0;
    const cudaError_t r = result.keep(real(&p));
    out = reinterpret_cast<void*>(p);
    return r;
  });
  if (rc == cudaSuccess) *dptr = reinterpret_cast<CUdeviceptr>(out);
  return result.answer(rc);
}

CUresult handle_driver(driver_tag<driver_hook_id::cuMemAlloc_v2>, driver_hook_id id,
                       real_driver<driver_hook_id::cuMemAlloc_v2> real, CUdeviceptr* dptr,
                       size_t bytesize) {
  return driver_alloc(id, dptr, bytesize, alloc_kind::device, nullptr,
                      [&](CUdeviceptr* p) { return real(p, bytesize); });
}

CUresult handle_driver(driver_tag<driver_hook_id::cuMemAllocAsync>, driver_hook_id id,
                       real_driver<driver_hook_id::cuMemAllocAsync> real, CUdeviceptr* dptr,
                       size_t bytesize, CUstream stream) {
  return driver_alloc(id, dptr, bytesize, alloc_kind::async, stream,
                      [&](CUdeviceptr* p) { return real(p, bytesize, stream); });
}

CUresult handle_driver(driver_tag<driver_hook_id::cuMemAllocFromPoolAsync>, driver_hook_id id,
                       real_driver<driver_hook_id::cuMemAllocFromPoolAsync> real,
                       CUdeviceptr* dptr, size_t bytesize, CUmemoryPool pool,
                       CUstream stream) {
  // A null pool is CUDA's invalid value, not a request for ours: CUDA answers it.
  if (pool == nullptr) return real(dptr, bytesize, pool, stream);
  return driver_alloc(id, dptr, bytesize, alloc_kind::async, stream,
                      [&](CUdeviceptr* p) { return real(p, bytesize, pool, stream); });
}

CUresult handle_driver(driver_tag<driver_hook_id::cuMemAllocManaged>, driver_hook_id id,
                       real_driver<driver_hook_id::cuMemAllocManaged> real, CUdeviceptr* dptr,
                       size_t bytesize, unsigned int flags) {
  return driver_alloc(id, dptr, bytesize, alloc_kind::managed, nullptr,
                      [&](CUdeviceptr* p) { return real(p, bytesize, flags); });
}

CUresult handle_driver(driver_tag<driver_hook_id::cuMemAllocPitch_v2>, driver_hook_id id,
                       real_driver<driver_hook_id::cuMemAllocPitch_v2> real, CUdeviceptr* dptr,
                       size_t* pitch, size_t width, size_t height,
                       unsigned int element_bytes) {
  int device = 0;
  const bool valid_element = element_bytes == 4 || element_bytes == 8 || element_bytes == 16;
  if (dptr == nullptr || pitch == nullptr || !valid_element ||
      (height != 0 && width > SIZE_MAX / height) || !context_device(device)) {
    return real(dptr, pitch, width, height, element_bytes);
  }
  void* out = nullptr;
  driver_result result;
  const cudaError_t rc = tracked_pitch_alloc(
      site(id), device, &out, pitch, width, height,
      [&] {
        CUdeviceptr p = 0;
        const cudaError_t r = result.keep(real(&p, pitch, width, height, element_bytes));
        out = reinterpret_cast<void*>(p);
        return r;
      },
      [&] {
        real_driver<driver_hook_id::cuMemFree_v2>{driver_hook_id::cuMemFree_v2}(
            reinterpret_cast<CUdeviceptr>(out));
      });
  if (rc == cudaSuccess) *dptr = reinterpret_cast<CUdeviceptr>(out);
  return result.answer(rc);
}

// ---- free

CUresult handle_driver(driver_tag<driver_hook_id::cuMemFree_v2>, driver_hook_id id,
                       real_driver<driver_hook_id::cuMemFree_v2> real,
                       CUdeviceptr dptr) {
  driver_result result;
  return result.answer(tracked_free(site(id), reinterpret_cast<void*>(dptr), false, nullptr,
                                    [&] { return result.keep(real(dptr)); }));
}

CUresult handle_driver(driver_tag<driver_hook_id::cuMemFreeAsync>, driver_hook_id id,
                       real_driver<driver_hook_id::cuMemFreeAsync> real, CUdeviceptr dptr,
                       CUstream stream) {
  driver_result result;
  return result.answer(tracked_free(site(id), reinterpret_cast<void*>(dptr), true, stream,
                                    [&] { return result.keep(real(dptr, stream)); }));
}

// ---- memory information

CUresult handle_driver(driver_tag<driver_hook_id::cuMemGetInfo_v2>, driver_hook_id,
                       real_driver<driver_hook_id::cuMemGetInfo_v2> real, size_t* free_bytes,
                       size_t* total_bytes) {
  const CUresult rc = real(free_bytes, total_bytes);
  int device = 0;
  if (rc != CUDA_SUCCESS || free_bytes == nullptr || total_bytes == nullptr ||
      !context_device(device)) {
    return rc;
  }
  virtual_mem_info(device, free_bytes, total_bytes);
  return rc;
}

// ---- other libraries' VMM allocations (Note [Memory that is not ours] in
// residency/backend.h)

struct foreign_allocation {
  int device;
  std::uint64_t bytes;
  bool residency;  // counted against the swap/um capacity (else the tracker's limit)
};

std::mutex g_foreign_mutex;
std::unordered_map<CUmemGenericAllocationHandle, foreign_allocation>& foreign() {
  static auto* map = new std::unordered_map<CUmemGenericAllocationHandle, foreign_allocation>();
  return *map;
}

void give_back(const foreign_allocation& f) {
  if (f.residency) {
    core::device_reserve_foreign(f.device, -static_cast<std::int64_t>(f.bytes));
  } else {
    core().release(f.device, f.bytes);
  }
  stats::global().foreign_vmm_bytes.sub(f.bytes);
}

CUresult handle_driver(driver_tag<driver_hook_id::cuMemCreate>, driver_hook_id id,
                       real_driver<driver_hook_id::cuMemCreate> real,
                       CUmemGenericAllocationHandle* handle, size_t size,
                       const CUmemAllocationProp* prop, unsigned long long flags) {
  if (handle == nullptr || prop == nullptr || size == 0 ||
      prop->location.type != CU_MEM_LOCATION_TYPE_DEVICE) {
    return real(handle, size, prop, flags);
  }
  const foreign_allocation f{prop->location.id, size, residency_mode()};
  const call_site at = site(id);
  if (f.residency) {
    if (!core::device_reserve_foreign(f.device, static_cast<std::int64_t>(size))) {
      // The application maps device memory itself (PyTorch's expandable segments):
      // oversub counts it against the swap capacity and never moves it.
      return to_driver_error(
          refuse(refusal{refusal_kind::foreign_vmm, at.name, f.device, size, true}));
    }
  } else {
    resolve_limit(at, f.device);
    if (!core().reserve(f.device, size)) {
      return to_driver_error(refuse_allocation(at, f.device, size));
    }
  }
  stats::global().foreign_vmm_bytes.add(size);
  const CUresult rc = real(handle, size, prop, flags);
  if (rc != CUDA_SUCCESS) {
    give_back(f);
    return rc;
  }
  std::lock_guard<std::mutex> lock(g_foreign_mutex);
  foreign()[*handle] = f;
  return rc;
}

CUresult handle_driver(driver_tag<driver_hook_id::cuMemRelease>, driver_hook_id,
                       real_driver<driver_hook_id::cuMemRelease> real,
                       CUmemGenericAllocationHandle handle) {
  const CUresult rc = real(handle);
  if (rc != CUDA_SUCCESS) return rc;
  std::optional<foreign_allocation> f;
  {
    std::lock_guard<std::mutex> lock(g_foreign_mutex);
    auto it = foreign().find(handle);
    if (it != foreign().end()) {
      f = it->second;
      foreign().erase(it);
    }
  }
  if (f) give_back(*f);
  return rc;
}

// ---- launches

CUresult launch_work(driver_hook_id id, CUfunction f, CUstream stream, void** params,
                     void** extra, auto enqueue) {
  return driver_work(
      id, stream,
      [&](call_site at, int device) {
        return swap_driver_launch(at, device, f, params, extra, stream);
      },
      enqueue);
}

CUresult handle_driver(driver_tag<driver_hook_id::cuLaunchKernel>, driver_hook_id id,
                       real_driver<driver_hook_id::cuLaunchKernel> real, CUfunction f,
                       unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                       unsigned bz, unsigned shared, CUstream stream, void** params,
                       void** extra) {
  return launch_work(id, f, stream, params, extra, [&] {
    return real(f, gx, gy, gz, bx, by, bz, shared, stream, params, extra);
  });
}

CUresult handle_driver(driver_tag<driver_hook_id::cuLaunchKernelEx>, driver_hook_id id,
                       real_driver<driver_hook_id::cuLaunchKernelEx> real,
                       const CUlaunchConfig* config, CUfunction f, void** params,
                       void** extra) {
  const CUstream stream = config != nullptr ? config->hStream : nullptr;
  return launch_work(id, f, stream, params, extra,
                     [&] { return real(config, f, params, extra); });
}

CUresult handle_driver(driver_tag<driver_hook_id::cuLaunchCooperativeKernel>, driver_hook_id id,
                       real_driver<driver_hook_id::cuLaunchCooperativeKernel> real, CUfunction f,
                       unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                       unsigned bz, unsigned shared, CUstream stream, void** params) {
  return launch_work(id, f, stream, params, nullptr, [&] {
    return real(f, gx, gy, gz, bx, by, bz, shared, stream, params);
  });
}

// ---- copies

CUresult handle_driver(driver_tag<driver_hook_id::cuMemcpy>, driver_hook_id id,
                       real_driver<driver_hook_id::cuMemcpy> real, CUdeviceptr dst,
                       CUdeviceptr src, size_t n) {
  return copy_work(id, nullptr, range(dst, n), range(src, n), true, real, dst, src, n);
}

CUresult handle_driver(driver_tag<driver_hook_id::cuMemcpyAsync>, driver_hook_id id,
                       real_driver<driver_hook_id::cuMemcpyAsync> real, CUdeviceptr dst,
                       CUdeviceptr src, size_t n, CUstream stream) {
  return copy_work(id, stream, range(dst, n), range(src, n), true, real, dst, src, n, stream);
}

CUresult handle_driver(driver_tag<driver_hook_id::cuMemcpyHtoD_v2>, driver_hook_id id,
                       real_driver<driver_hook_id::cuMemcpyHtoD_v2> real, CUdeviceptr dst,
                       const void* src, size_t n) {
  return copy_work(id, nullptr, range(dst, n), {}, true, real, dst, src, n);
}

CUresult handle_driver(driver_tag<driver_hook_id::cuMemcpyDtoH_v2>, driver_hook_id id,
                       real_driver<driver_hook_id::cuMemcpyDtoH_v2> real, void* dst,
                       CUdeviceptr src, size_t n) {
  return copy_work(id, nullptr, range(src, n), {}, false, real, dst, src, n);
}

CUresult handle_driver(driver_tag<driver_hook_id::cuMemcpyDtoD_v2>, driver_hook_id id,
                       real_driver<driver_hook_id::cuMemcpyDtoD_v2> real, CUdeviceptr dst,
                       CUdeviceptr src, size_t n) {
  return copy_work(id, nullptr, range(dst, n), range(src, n), true, real, dst, src, n);
}

CUresult handle_driver(driver_tag<driver_hook_id::cuMemcpyHtoDAsync_v2>, driver_hook_id id,
                       real_driver<driver_hook_id::cuMemcpyHtoDAsync_v2> real, CUdeviceptr dst,
                       const void* src, size_t n, CUstream stream) {
  return copy_work(id, stream, range(dst, n), {}, true, real, dst, src, n, stream);
}

CUresult handle_driver(driver_tag<driver_hook_id::cuMemcpyDtoHAsync_v2>, driver_hook_id id,
                       real_driver<driver_hook_id::cuMemcpyDtoHAsync_v2> real, void* dst,
                       CUdeviceptr src, size_t n, CUstream stream) {
  return copy_work(id, stream, range(src, n), {}, false, real, dst, src, n, stream);
}

CUresult handle_driver(driver_tag<driver_hook_id::cuMemcpyDtoDAsync_v2>, driver_hook_id id,
                       real_driver<driver_hook_id::cuMemcpyDtoDAsync_v2> real, CUdeviceptr dst,
                       CUdeviceptr src, size_t n, CUstream stream) {
  return copy_work(id, stream, range(dst, n), range(src, n), true, real, dst, src, n, stream);
}

// A 2D copy's device-side ranges (device or unified memory on either side).
void copy2d_ranges(const CUDA_MEMCPY2D* c, swap_range& dst, swap_range& src, bool& writes) {
  auto on_device = [](CUmemorytype t) {
    return t == CU_MEMORYTYPE_DEVICE || t == CU_MEMORYTYPE_UNIFIED;
  };
  writes = true;
  if (c == nullptr) return;
  if (on_device(c->dstMemoryType)) {
    dst = range(pitched_range(c->dstDevice, c->dstPitch, c->WidthInBytes, c->Height,
                              c->dstXInBytes, c->dstY));
  } else {
    writes = false;
  }
  if (on_device(c->srcMemoryType)) {
    src = range(pitched_range(c->srcDevice, c->srcPitch, c->WidthInBytes, c->Height,
                              c->srcXInBytes, c->srcY));
  }
}

CUresult handle_driver(driver_tag<driver_hook_id::cuMemcpy2D_v2>, driver_hook_id id,
                       real_driver<driver_hook_id::cuMemcpy2D_v2> real,
                       const CUDA_MEMCPY2D* c) {
  swap_range dst, src;
  bool writes = true;
  copy2d_ranges(c, dst, src, writes);
  return copy_work(id, nullptr, dst, src, writes, real, c);
}

CUresult handle_driver(driver_tag<driver_hook_id::cuMemcpy2DAsync_v2>, driver_hook_id id,
                       real_driver<driver_hook_id::cuMemcpy2DAsync_v2> real,
                       const CUDA_MEMCPY2D* c, CUstream stream) {
  swap_range dst, src;
  bool writes = true;
  copy2d_ranges(c, dst, src, writes);
  return copy_work(id, stream, dst, src, writes, real, c, stream);
}

// ---- memsets: Base's element size from its name (D8, D16, D32)

template <driver_hook_id Base>
constexpr std::size_t element_bytes() {
  constexpr std::string_view n = driver_hooks[index(Base)].name;
  return n.find("D32") != std::string_view::npos   ? 4
         : n.find("D16") != std::string_view::npos ? 2
                                                   : 1;
}

#define OVERSUB_MEMSET_1D(base)                                                          \
  template <typename V>                                                                  \
  CUresult handle_driver(driver_tag<driver_hook_id::base>, driver_hook_id id,            \
                         real_driver<driver_hook_id::base> real, CUdeviceptr dst, V value, \
                         size_t n) {                                            \
    return copy_work(id, nullptr, range(dst, n * element_bytes<driver_hook_id::base>()), {}, \
                     true, real, dst, value, n);                                         \
  }
#define OVERSUB_MEMSET_1D_ASYNC(base)                                                    \
  template <typename V>                                                                  \
  CUresult handle_driver(driver_tag<driver_hook_id::base>, driver_hook_id id,            \
                         real_driver<driver_hook_id::base> real, CUdeviceptr dst, V value, \
                         size_t n, CUstream stream) {                           \
    return copy_work(id, stream, range(dst, n * element_bytes<driver_hook_id::base>()), {}, \
                     true, real, dst, value, n, stream);                                 \
  }
#define OVERSUB_MEMSET_2D(base)                                                          \
  template <typename V>                                                                  \
  CUresult handle_driver(driver_tag<driver_hook_id::base>, driver_hook_id id,            \
                         real_driver<driver_hook_id::base> real, CUdeviceptr dst,        \
                         size_t pitch, V value, size_t width, size_t height) {  \
    const std::size_t row = width * element_bytes<driver_hook_id::base>();               \
    return copy_work(id, nullptr, range(pitched_range(dst, pitch, row, height)), {}, true, \
                     real, dst, pitch, value, width, height);                            \
  }
#define OVERSUB_MEMSET_2D_ASYNC(base)                                                    \
  template <typename V>                                                                  \
  CUresult handle_driver(driver_tag<driver_hook_id::base>, driver_hook_id id,            \
                         real_driver<driver_hook_id::base> real, CUdeviceptr dst,        \
                         size_t pitch, V value, size_t width, size_t height,             \
                         CUstream stream) {                                     \
    const std::size_t row = width * element_bytes<driver_hook_id::base>();               \
    return copy_work(id, stream, range(pitched_range(dst, pitch, row, height)), {}, true,  \
                     real, dst, pitch, value, width, height, stream);                    \
  }
OVERSUB_MEMSET_1D(cuMemsetD8_v2)
OVERSUB_MEMSET_1D(cuMemsetD16_v2)
OVERSUB_MEMSET_1D(cuMemsetD32_v2)
OVERSUB_MEMSET_1D_ASYNC(cuMemsetD8Async)
OVERSUB_MEMSET_1D_ASYNC(cuMemsetD16Async)
OVERSUB_MEMSET_1D_ASYNC(cuMemsetD32Async)
OVERSUB_MEMSET_2D(cuMemsetD2D8_v2)
OVERSUB_MEMSET_2D(cuMemsetD2D16_v2)
OVERSUB_MEMSET_2D(cuMemsetD2D32_v2)
OVERSUB_MEMSET_2D_ASYNC(cuMemsetD2D8Async)
OVERSUB_MEMSET_2D_ASYNC(cuMemsetD2D16Async)
OVERSUB_MEMSET_2D_ASYNC(cuMemsetD2D32Async)
#undef OVERSUB_MEMSET_1D
#undef OVERSUB_MEMSET_1D_ASYNC
#undef OVERSUB_MEMSET_2D
#undef OVERSUB_MEMSET_2D_ASYNC

// ---- graphs: a replay may write any page (swap_graph_launch, swap_hooks.h)

CUresult handle_driver(driver_tag<driver_hook_id::cuGraphLaunch>, driver_hook_id id,
                       real_driver<driver_hook_id::cuGraphLaunch> real, CUgraphExec exec,
                       CUstream stream) {
  return driver_work(
      id, stream,
      [&](call_site at, int device) { return swap_graph_launch(at, device, exec, stream); },
      [&] { return real(exec, stream); });
}

// ---- graph instantiation: what a replay prefetches (Note [A graph's footprint] in
// core/graph_footprint.h)

CUresult handle_driver(driver_tag<driver_hook_id::cuGraphInstantiateWithFlags>, driver_hook_id,
                       real_driver<driver_hook_id::cuGraphInstantiateWithFlags> real,
                       CUgraphExec* exec, CUgraph graph, unsigned long long flags) {
  const CUresult rc = real(exec, graph, flags);
  if (rc == CUDA_SUCCESS && exec != nullptr) swap_graph_instantiated(*exec, graph);
  return rc;
}

CUresult handle_driver(driver_tag<driver_hook_id::cuGraphInstantiateWithParams>, driver_hook_id,
                       real_driver<driver_hook_id::cuGraphInstantiateWithParams> real,
                       CUgraphExec* exec, CUgraph graph, CUDA_GRAPH_INSTANTIATE_PARAMS* params) {
  const CUresult rc = real(exec, graph, params);
  if (rc == CUDA_SUCCESS && exec != nullptr) swap_graph_instantiated(*exec, graph);
  return rc;
}

CUresult handle_driver(driver_tag<driver_hook_id::cuGraphExecDestroy>, driver_hook_id,
                       real_driver<driver_hook_id::cuGraphExecDestroy> real, CUgraphExec exec) {
  swap_graph_exec_destroyed(exec);
  return real(exec);
}

CUresult handle_driver(driver_tag<driver_hook_id::cuGraphDestroy>, driver_hook_id,
                       real_driver<driver_hook_id::cuGraphDestroy> real, CUgraph graph) {
  swap_graph_destroyed(graph);
  return real(graph);
}

}  // namespace

const char* const* driver_hook_names() noexcept {
  static const auto names = [] {
    std::array<const char*, driver_hook_count> n{};
    for (std::size_t i = 0; i < driver_hook_count; ++i) n[i] = driver_hooks[i].name;
    return n;
  }();
  return names.data();
}

std::size_t driver_hook_names_count() noexcept { return driver_hook_count; }

}  // namespace oversub::interpose

// ---- the exported hooks -----------------------------------------------------------------

#define OVERSUB_EXPORT __attribute__((visibility("default")))
#define OVERSUB_COMMA_ARGS(...) __VA_OPT__(, ) __VA_ARGS__

// The whole body is guarded: see Note [Nothing crosses the ABI edge] in
// interpose/abi_guard.h.
#define OVERSUB_DRIVER_EMIT(family, symbol, base, query, since, per_thread, params, args)   \
  extern "C" OVERSUB_EXPORT CUresult symbol params noexcept {                               \
    namespace ip = oversub::interpose;                                                      \
    constexpr ip::driver_hook_id id = ip::driver_hook_id::symbol;                           \
    try {                                                                                   \
      const ip::real_driver<ip::driver_hook_id::base> real{id};                             \
      if (!ip::hooks_active()) return real args;                                            \
      ip::reentrancy_guard guard;                                                           \
      ip::count(id);                                                                        \
      const ip::call_clock clock(ip::hook_count + ip::index(id));                           \
      ip::test_throw_point(#symbol);                                                        \
      return ip::handle_driver(ip::driver_tag<ip::driver_hook_id::base>{}, id,              \
                               real OVERSUB_COMMA_ARGS args);                               \
    } catch (...) {                                                                         \
      return ip::driver_code_of_thrown(#symbol);                                            \
    }                                                                                       \
  }
#include "interpose/driver_hook_list.h"

namespace oversub::interpose {

void* hook_address(driver_hook_id id) noexcept {
  static void* const addresses[driver_hook_count] = {
#define OVERSUB_DRIVER_EMIT(family, symbol, base, query, since, per_thread, params, args) \
  reinterpret_cast<void*>(&::symbol),
#include "interpose/driver_hook_list.h"
      reinterpret_cast<void*>(&::oversub_cuGetProcAddress_v1),
      reinterpret_cast<void*>(&::cuGetProcAddress_v2),
  };
  return addresses[index(id)];
}

}  // namespace oversub::interpose
