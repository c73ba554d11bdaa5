// The real driver functions and the answers: each driver hook's real function, and
// what a caller looking up a driver function is handed. cuGetProcAddress(_v2) (exported
// here), dlsym (dlsym_hook.cc) and cudaGetDriverEntryPoint(ByVersion) get our hook
// (driver_hooks.cc) in place of the driver's function for an ABI we intercept. See
// driver_hooks.h for how callers get here.
//
// Note [One real function per ABI]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// Each hook forwards to one real function, the
// first one seen for its ABI name: from a cuGetProcAddress answer, a dlsym answer, or
// looked up by name after liboversub (dlsym(RTLD_NEXT), then a loaded libcuda.so.1).
// A later answer for the same ABI that is a different address in the same object
// (libcuda may hand out an internal entry point from cuGetProcAddress and an exported
// one from dlsym) is the same function and is wrapped too; an answer from another
// object (a second interposer that exports the same name) is handed back untouched
// and counted in driver_answers_passed, so such a chain keeps working, unseen by us.
#include "interpose/driver_real.h"

#include <cuda.h>
#include <dlfcn.h>

#include <atomic>
#include <cstring>

#include "common/log.h"
#include "common/stats.h"
#include "interpose/abi_guard.h"
#include "interpose/driver_hooks.h"
#include "interpose/driver_table.h"
#include "interpose/handlers.h"
#include "interpose/real.h"

namespace oversub::interpose {

namespace {

std::atomic<void*> g_driver_real[driver_hook_count];
std::atomic<bool> g_driver_missing_logged[driver_hook_count];
std::atomic<bool> g_passed_logged{false};

// This library's load address (dladdr's dli_fbase), to recognise our own hooks.
void* own_base() noexcept {
  static void* const base = [] {
    Dl_info info{};
    return dladdr(reinterpret_cast<void*>(&own_base), &info) != 0 ? info.dli_fbase : nullptr;
  }();
  return base;
}

void* object_of(const void* p) noexcept {
  Dl_info info{};
  return dladdr(p, &info) != 0 ? info.dli_fbase : nullptr;
}

bool is_ours(const void* p) noexcept { return p != nullptr && object_of(p) == own_base(); }

// True when p lies in a library whose file name is libcuda.so*: the driver (or
// simgpu's stand-in, which has the same soname).
bool from_driver(const void* p) noexcept {
  Dl_info info{};
  if (dladdr(p, &info) == 0 || info.dli_fname == nullptr) return false;
  const char* slash = std::strrchr(info.dli_fname, '/');
  const char* file = slash != nullptr ? slash + 1 : info.dli_fname;
  return std::strncmp(file, "libcuda.so", 10) == 0;
}

void* resolve_driver_real(driver_hook_id id) noexcept {
  void* p = lookup_driver(driver_hooks[index(id)].name);
  if (p == nullptr) return nullptr;
  void* held = nullptr;
  g_driver_real[index(id)].compare_exchange_strong(held, p, std::memory_order_acq_rel);
  return held != nullptr ? held : p;
}

// True when answers should be replaced by our hooks: the process is tracking
// (whatever this thread is doing: a runtime resolving its entry points inside one of
// our hooks still gets our functions for later calls).
bool intercepting() {
  process_state s = g_state.load(std::memory_order_acquire);
  if (s == process_state::uninitialised) s = initialise();
  return s == process_state::tracking;
}

// See Note [One real function per ABI].
void* adopt(driver_hook_id id, void* p) {
  if (p == nullptr || is_ours(p)) return p;
  void* held = nullptr;
  std::atomic<void*>& slot = g_driver_real[index(id)];
  if (!slot.compare_exchange_strong(held, p, std::memory_order_acq_rel) && held != p &&
      object_of(held) != object_of(p)) {
    stats::global().driver_answers_passed.count();
    if (!g_passed_logged.exchange(true, std::memory_order_relaxed)) {
      log::info("{}: handed out another library's function, not intercepted (this ABI's "
                "real function is already {})",
                driver_hooks[index(id)].name, held);
    }
    return p;
  }
  stats::global().driver_answers_wrapped.count();
  return hook_address(id);
}

void* answer(const char* symbol, int version, bool per_thread, void* p) {
  if (symbol == nullptr || p == nullptr || !intercepting()) return p;
  const driver_answer a = answer_query(symbol, version, per_thread);
  if (!a.found || !a.hook) return p;
  return adopt(*a.hook, p);
}

}  // namespace

void* lookup_driver(const char* name) noexcept {
  void* p = dlsym(RTLD_NEXT, name);
  if (p == nullptr) {
    if (void* h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD)) {
      p = dlsym(h, name);
      dlclose(h);
    }
  }
  return is_ours(p) ? nullptr : p;
}

CUresult missing_driver_real(driver_hook_id id) noexcept {
  if (!g_driver_missing_logged[index(id)].exchange(true)) {
    log::error("{} called but no CUDA driver (libcuda.so.1) defines it; returning "
               "CUDA_ERROR_SHARED_OBJECT_SYMBOL_NOT_FOUND",
               driver_hooks[index(id)].name);
  }
  return CUDA_ERROR_SHARED_OBJECT_SYMBOL_NOT_FOUND;
}

void* real_of(driver_hook_id id) noexcept {
  void* p = g_driver_real[index(id)].load(std::memory_order_acquire);
  return p != nullptr ? p : resolve_driver_real(id);
}

bool driver_mem_info(std::size_t* free_bytes, std::size_t* total_bytes) noexcept {
  void* p = real_of(driver_hook_id::cuMemGetInfo_v2);
  if (p == nullptr) return false;
  return reinterpret_cast<driver_real_type<driver_hook_id::cuMemGetInfo_v2>::type>(p)(
             free_bytes, total_bytes) == CUDA_SUCCESS;
}

void* driver_answer_for_symbol(const char* name, void* p) noexcept {
  if (name == nullptr || p == nullptr || name[0] != 'c' || name[1] != 'u') return p;
  try {
    const std::optional<driver_hook_id> id = find_driver_export(name);
    if (!id || is_ours(p) || !intercepting() || !from_driver(p)) return p;
    test_throw_point("dlsym");
    return adopt(*id, p);
  } catch (...) {
    return answer_on_thrown("dlsym", p);
  }
}

void* driver_answer_for_query(const char* symbol, int version, unsigned long long flags,
                              bool default_per_thread, void* p) noexcept {
  const bool per_thread = (flags & cudaEnablePerThreadDefaultStream) != 0 ||
                          ((flags & cudaEnableLegacyStream) == 0 && default_per_thread);
  try {
    return answer(symbol, version, per_thread, p);
  } catch (...) {
    return answer_on_thrown("cudaGetDriverEntryPoint", p);
  }
}

cudaError_t handle(hook_tag<hook_id::cudaGetDriverEntryPoint>, hook_id id, const char* symbol,
                   void** funcPtr, unsigned long long flags,
                   cudaDriverEntryPointQueryResult* driverStatus) {
  const cudaError_t rc =
      call_real<hook_id::cudaGetDriverEntryPoint>(id, symbol, funcPtr, flags, driverStatus);
  if (rc == cudaSuccess && funcPtr != nullptr) {
    // Without a version the runtime asks for its own (CUDART_VERSION).
    *funcPtr = driver_answer_for_query(symbol, CUDART_VERSION, flags,
                                       hook_per_thread[index(id)], *funcPtr);
  }
  return rc;
}

cudaError_t handle(hook_tag<hook_id::cudaGetDriverEntryPointByVersion>, hook_id id,
                   const char* symbol, void** funcPtr, unsigned int cudaVersion,
                   unsigned long long flags,
                   cudaDriverEntryPointQueryResult* driverStatus) {
  const cudaError_t rc = call_real<hook_id::cudaGetDriverEntryPointByVersion>(
      id, symbol, funcPtr, cudaVersion, flags, driverStatus);
  if (rc == cudaSuccess && funcPtr != nullptr) {
    *funcPtr = driver_answer_for_query(symbol, static_cast<int>(cudaVersion), flags,
                                       hook_per_thread[index(id)], *funcPtr);
  }
  return rc;
}

}  // namespace oversub::interpose

// ---- cuGetProcAddress -------------------------------------------------------------------

// cuGetProcAddress, both ABIs: ask the real one, then answer by the version table
// (Note [Answering by version] in driver_table.h). A query with the default flag is
// asked again with the legacy one to learn which flavour the driver chose. What is
// thrown on the way leaves the driver's answer untouched (Note [Nothing crosses the
// ABI edge] in abi_guard.h).
namespace oversub::interpose {
namespace {

template <typename Query>
void* answer_proc_unguarded(const char* self, const char* symbol, int version,
                            cuuint64_t flags, void* p, Query ask_legacy) {
  if (symbol == nullptr || p == nullptr || !intercepting()) return p;
  test_throw_point(self);
  bool per_thread = (flags & CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM) != 0;
  if ((flags & (CU_GET_PROC_ADDRESS_LEGACY_STREAM |
                CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM)) == 0 &&
      answer_query(symbol, version, true).hook != answer_query(symbol, version, false).hook) {
    void* legacy = nullptr;
    per_thread = ask_legacy(&legacy) == CUDA_SUCCESS && legacy != p;
  }
  return answer(symbol, version, per_thread, p);
}

template <typename Query>
void* answer_proc(const char* self, const char* symbol, int version, cuuint64_t flags, void* p,
                  Query ask_legacy) noexcept {
  try {
    return answer_proc_unguarded(self, symbol, version, flags, p, ask_legacy);
  } catch (...) {
    return answer_on_thrown(self, p);
  }
}

}  // namespace
}  // namespace oversub::interpose

#define OVERSUB_EXPORT __attribute__((visibility("default")))

extern "C" OVERSUB_EXPORT CUresult cuGetProcAddress_v2(const char* symbol, void** pfn,
                                                       int cudaVersion, cuuint64_t flags,
                                                       CUdriverProcAddressQueryResult* status) noexcept {
  namespace ip = oversub::interpose;
  using fn = ip::driver_real_type<ip::driver_hook_id::cuGetProcAddress_v2>::type;
  void* p = ip::real_of(ip::driver_hook_id::cuGetProcAddress_v2);
  if (p == nullptr) return ip::missing_driver_real(ip::driver_hook_id::cuGetProcAddress_v2);
  const auto real = reinterpret_cast<fn>(p);
  const CUresult rc = real(symbol, pfn, cudaVersion, flags, status);
  if (rc != CUDA_SUCCESS || pfn == nullptr || *pfn == nullptr) return rc;
  *pfn = ip::answer_proc("cuGetProcAddress_v2", symbol, cudaVersion, flags, *pfn,
                         [&](void** legacy) {
    CUdriverProcAddressQueryResult s{};
    return real(symbol, legacy, cudaVersion, CU_GET_PROC_ADDRESS_LEGACY_STREAM, &s);
  });
  return rc;
}

// The CUDA 11.3 ABI, exported as cuGetProcAddress (cuda.h #defines that name to _v2;
// the declaration in driver_real.h gives the exported name).
extern "C" OVERSUB_EXPORT CUresult oversub_cuGetProcAddress_v1(const char* symbol, void** pfn,
                                                               int cudaVersion,
                                                               cuuint64_t flags) noexcept {
  namespace ip = oversub::interpose;
  using fn = ip::driver_real_type<ip::driver_hook_id::cuGetProcAddress_v1>::type;
  void* p = ip::real_of(ip::driver_hook_id::cuGetProcAddress_v1);
  if (p == nullptr) return ip::missing_driver_real(ip::driver_hook_id::cuGetProcAddress_v1);
  const auto real = reinterpret_cast<fn>(p);
  const CUresult rc = real(symbol, pfn, cudaVersion, flags);
  if (rc != CUDA_SUCCESS || pfn == nullptr || *pfn == nullptr) return rc;
  *pfn = ip::answer_proc("cuGetProcAddress", symbol, cudaVersion, flags, *pfn,
                         [&](void** legacy) {
    return real(symbol, legacy, cudaVersion, CU_GET_PROC_ADDRESS_LEGACY_STREAM);
  });
  return rc;
}
