// Pool-mode handlers of the memory hooks (see pool_hooks.h).
//
// Note [The pool behind the tracker]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// The tracker stays the source of truth for the
// application's live allocations and the virtual capacity: a pool allocation is
// reserved against OVERSUB_DEVICE_LIMIT first and recorded after, exactly as in track
// mode, and a free is forgotten first. Only the real allocator is replaced. A
// pointer the pool does not hold (never ours, freed twice, made before pool mode
// could start) goes to the real cudaFree and CUDA's answer is returned.
//
// Note [A context for the pool]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// The real cudaMalloc would have created the
// runtime's context and made it current on this thread; the pool calls the driver
// directly, so on a thread's first pool allocation (and after it changes device) the
// real cudaFree(nullptr) is called, the usual way to have the runtime do that.
#include "interpose/pool_hooks.h"

#include <mutex>

#include "common/log.h"
#include "common/options.h"
#include "common/stats.h"
#include "common/tracker.h"
#include "common/units.h"
#include "interpose/real.h"
#include "core/device_pool.h"
#include "core/pool_setup.h"
#include "core/refusal.h"

namespace oversub::interpose {

std::atomic<int> g_pool_on{-1};

namespace {

constexpr std::size_t pitch_alignment_bytes = 512;  // cudaMallocPitch's row alignment

__attribute__((tls_model("initial-exec"))) thread_local int t_context_device = -1;

// The device's memory as the runtime reports it (pool_settings_for asks).
device_memory runtime_memory() {
  device_memory m;
  call_real<hook_id::cudaMemGetInfo>(hook_id::cudaMemGetInfo, &m.free_bytes, &m.total_bytes);
  return m;
}

void ensure_context(int device) {
  if (t_context_device == device) return;
  call_real<hook_id::cudaFree>(hook_id::cudaFree, nullptr);
  t_context_device = device;
}

}  // namespace

bool decide_pool_mode() {
  static std::once_flag once;
  std::call_once(once, [] {
    fall_back_without_host_vmm();
    const config& cfg = current_config();
    bool on = false;
    if (cfg.mode >= run_mode::pool) {
      core::configure(pool_settings_for(cfg, &runtime_memory));
      on = core::available();
      if (!on) log::warn("OVERSUB_MODE={}: the CUDA driver could not be loaded; tracking only",
                         to_string(cfg.mode));
    }
    g_pool_on.store(on ? 1 : 0, std::memory_order_release);
  });
  return g_pool_on.load(std::memory_order_acquire) == 1;
}

cudaError_t pool_serve(call_site at, int device, void** out, size_t size,
                       cudaStream_t stream) {
  if (at.runtime) ensure_context(device);
  const pool::allocation_result r =
      core::device_allocate(device, size, driver_stream(at.per_thread, stream));
  if (!r) {
    return refuse(refusal{r.error == pool::pool_errc::driver_missing ? refusal_kind::pool_no_driver
                                                                      : refusal_kind::pool_full,
                          at.name, device, size, !at.runtime});
  }
  *out = r.ptr;
  stats::global().pool_allocations.count();
  return cudaSuccess;
}

size_t pool_pitch(size_t width) {
  const size_t row = (width + pitch_alignment_bytes - 1) / pitch_alignment_bytes *
                     pitch_alignment_bytes;
  return row < width ? 0 : row;
}

pool_free_result pool_free(call_site at, void* ptr, cudaStream_t stream, bool async) {
  if (ptr == nullptr || !pool_mode()) return pool_free_result::not_tracked;
  tracker& t = core();
  const auto base = reinterpret_cast<std::uintptr_t>(ptr);
  const std::optional<allocation> a = t.find(base);
  if (!a || a->base != base) return pool_free_result::not_tracked;
  const CUstream s = async ? driver_stream(at.per_thread, stream) : pool::no_stream;
  // Forget first: another thread may get the same address the moment the pool has it.
  if (!t.forget(base)) return pool_free_result::not_tracked;
  // Ours to track, not the pool's (made by the real allocator): CUDA frees it.
  if (!core::device_deallocate(a->device, ptr, a->bytes, s)) return pool_free_result::forgotten;
  return pool_free_result::freed;
}

std::size_t pool_cached_bytes(int device) {
  if (!pool_mode()) return 0;
  return core::device_cached_bytes(device);
}

void pool_note_work(CUstream stream) { core::note_work(stream); }

}  // namespace oversub::interpose
