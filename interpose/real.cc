// Real-function lookup, process state and the per-call counters (see real.h).
#include "interpose/real.h"

#include <dlfcn.h>

#include "common/log.h"
#include "common/options.h"
#include "common/stats.h"
#include "common/tracker.h"

namespace oversub::interpose {

std::atomic<process_state> g_state{process_state::uninitialised};
std::atomic<void*> g_real[hook_count];
__attribute__((tls_model("initial-exec"))) thread_local bool t_in_hook = false;

namespace {

constexpr const char* runtime_version = "libcudart.so.13";
constexpr const char* runtime_soname = "libcudart.so.13";

std::atomic<bool> g_missing_logged[hook_count];
std::atomic<void*> g_get_device{nullptr};

bool is_ours(void* p) {
  Dl_info mine{};
  Dl_info theirs{};
  if (dladdr(reinterpret_cast<void*>(&resolve_real), &mine) == 0) return false;
  if (dladdr(p, &theirs) == 0) return false;
  return mine.dli_fbase == theirs.dli_fbase;
}

void* lookup(const char* name) {
  void* p = dlvsym(RTLD_NEXT, name, runtime_version);
  if (p == nullptr) p = dlsym(RTLD_NEXT, name);
  if (p == nullptr) {
    // Note [A runtime loaded privately]
    // ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
    // A framework may dlopen libcudart with
    // RTLD_LOCAL; RTLD_NEXT cannot see it then, but its handle can.
    if (void* h = dlopen(runtime_soname, RTLD_NOW | RTLD_NOLOAD)) {
      p = dlvsym(h, name, runtime_version);
      if (p == nullptr) p = dlsym(h, name);
      dlclose(h);
    }
  }
  if (p != nullptr && is_ours(p)) p = nullptr;
  return p;
}

}  // namespace

void* resolve_real(hook_id id) noexcept {
  void* p = lookup(hook_names[index(id)]);
  if (p != nullptr) g_real[index(id)].store(p, std::memory_order_release);
  return p;
}

cudaError_t missing_real(hook_id id) noexcept {
  if (!g_missing_logged[index(id)].exchange(true)) {
    log::error("{} called but no CUDA runtime ({}) defines it; returning "
               "cudaErrorSharedObjectSymbolNotFound",
               hook_names[index(id)], runtime_soname);
  }
  return cudaErrorSharedObjectSymbolNotFound;
}

int current_device() noexcept {
  using get_device_t = decltype(&::cudaGetDevice);
  void* p = g_get_device.load(std::memory_order_acquire);
  if (p == nullptr) {
    p = lookup("cudaGetDevice");
    if (p == nullptr) return 0;
    g_get_device.store(p, std::memory_order_release);
  }
  int device = 0;
  if (reinterpret_cast<get_device_t>(p)(&device) != cudaSuccess) return 0;
  return device;
}

tracker& core() noexcept {
  // In swap mode the limit bounds what is resident, not what is allocated: the
  // residency engine enforces it (core/pool_setup.cc), the tracker only tracks.
  const config& cfg = current_config();
  static tracker* instance =
      new tracker(cfg.mode >= run_mode::swap ? device_limit{} : cfg.limit);
  return *instance;
}

void count_call(hook_id id) noexcept {
  stats::count_call(index(id));
  stats::counters& c = stats::global();
  switch (hook_families[index(id)]) {
    case hook_family::launch: c.launches.count(); break;
    case hook_family::copy: c.copies.count(); break;
    case hook_family::memset: c.memsets.count(); break;
    case hook_family::sync: c.syncs.count(); break;
    case hook_family::graph: c.graph_launches.count(); break;
    case hook_family::alloc:
    case hook_family::free:
    case hook_family::graph_build:
    case hook_family::info:
    case hook_family::lookup: break;
  }
}

void enter_passthrough() noexcept {
  g_state.store(process_state::passthrough, std::memory_order_release);
}

}  // namespace oversub::interpose
