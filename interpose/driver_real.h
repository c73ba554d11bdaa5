// Between the two halves of the driver side (interpose/driver_hooks.h): driver_real.cc
// finds the real driver functions and answers cuGetProcAddress, dlsym and
// cudaGetDriverEntryPoint with our hooks; driver_hooks.cc holds the handlers and the
// exported hooks, which call the real functions through what is declared here.
#ifndef OVERSUB_INTERPOSE_DRIVER_REAL_H
#define OVERSUB_INTERPOSE_DRIVER_REAL_H

#include <cuda.h>

#include "interpose/driver_table.h"

namespace oversub::interpose {

// The real functions' types, taken from cuda.h's declarations (this header comes
// before the hooks' own definitions, in driver_hooks.cc and driver_real.cc, redeclare
// them).
template <driver_hook_id id>
struct driver_real_type;
#define OVERSUB_DRIVER_EMIT(family, symbol, base, query, since, per_thread, params, args) \
  template <>                                                                            \
  struct driver_real_type<driver_hook_id::symbol> {                                      \
    using type = decltype(&::base);                                                      \
  };
#include "interpose/driver_hook_list.h"
template <>
struct driver_real_type<driver_hook_id::cuGetProcAddress_v1> {
  using type = CUresult (*)(const char*, void**, int, cuuint64_t);
};
template <>
struct driver_real_type<driver_hook_id::cuGetProcAddress_v2> {
  using type = decltype(&::cuGetProcAddress_v2);
};

// A driver function by exact name: the first definition after liboversub, else a
// libcuda.so.1 already loaded privately (RTLD_LOCAL). Never one of ours.
void* lookup_driver(const char* name) noexcept;

// The real function id forwards to (See Note [One real function per ABI] in
// interpose/driver_real.cc), looked up by name when none is held yet; null when no
// driver defines it.
void* real_of(driver_hook_id id) noexcept;

// What a call answers when no driver defines its real function (logged once per id).
CUresult missing_driver_real(driver_hook_id id) noexcept;

// Calls the real function of the symbol that was called (id: the twin or the plain
// ABI) with the type of its plain ABI Base.
template <driver_hook_id Base>
struct real_driver {
  driver_hook_id id;
  template <typename... A>
  CUresult operator()(A... args) const noexcept {
    void* p = real_of(id);
    if (p == nullptr) return missing_driver_real(id);
    return reinterpret_cast<typename driver_real_type<Base>::type>(p)(args...);
  }
};

// A driver function oversub does not hook, for its own questions.
template <typename F>
F plain_driver(const char* name) noexcept {
  return reinterpret_cast<F>(lookup_driver(name));
}

// Our exported hook for id (driver_hooks.cc; the two cuGetProcAddress ABIs are
// defined in driver_real.cc).
void* hook_address(driver_hook_id id) noexcept;

}  // namespace oversub::interpose

// The CUDA 11.3 ABI of cuGetProcAddress, exported under that name (driver_real.cc).
extern "C" CUresult oversub_cuGetProcAddress_v1(const char* symbol, void** pfn,
                                                int cudaVersion, cuuint64_t flags) noexcept
    __asm__("cuGetProcAddress");

#endif  // OVERSUB_INTERPOSE_DRIVER_REAL_H
