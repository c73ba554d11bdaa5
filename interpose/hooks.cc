// The exported hooks: one extern "C" function per symbol of hooks.def.
//
// Each is thin: when hooks are not active (Note [When hooks pass through] in real.h)
// it calls the real function and nothing else; otherwise it raises the re-entrancy
// guard, counts the call and hands it to its handler. The whole body runs under the
// guard of Note [Nothing crosses the ABI edge] (abi_guard.h): the function is noexcept
// to its caller, the handlers below it are not.
//
// Note [Redeclaring CUDA's functions]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// Each definition redeclares CUDA's own
// declaration with the same parameters, so a wrong line in hooks.def is a compile
// error, not a silent ABI mismatch. Adding noexcept to a declaration CUDA made
// without it is accepted because CUDA's headers come in as system headers
// (-isystem, meson's cuda_headers); the exported symbol is the same either way.
#include <cuda_runtime_api.h>

#include "interpose/abi_guard.h"
#include "interpose/handlers.h"
#include "interpose/hook_table.h"
#include "interpose/real.h"

#define OVERSUB_EXPORT __attribute__((visibility("default")))
#define OVERSUB_COMMA_ARGS(...) __VA_OPT__(, ) __VA_ARGS__

using oversub::interpose::hook_id;
using oversub::interpose::hook_tag;

#define OVERSUB_EMIT(family, ret, symbol, base, params, args)                          \
  extern "C" OVERSUB_EXPORT ret symbol params noexcept {                               \
    namespace ip = oversub::interpose;                                                 \
    constexpr hook_id id = hook_id::symbol;                                            \
    try {                                                                              \
      if (!ip::hooks_active()) return ip::call_real<hook_id::base>(id OVERSUB_COMMA_ARGS args); \
      ip::reentrancy_guard guard;                                                      \
      ip::count_call(id);                                                              \
      const ip::call_clock clock(ip::index(id));                                       \
      ip::test_throw_point(#symbol);                                                   \
      return ip::handle(hook_tag<hook_id::base>{}, id OVERSUB_COMMA_ARGS args);        \
    } catch (...) {                                                                    \
      return ip::runtime_code_of_thrown(#symbol);                                      \
    }                                                                                  \
  }
#include "interpose/hook_list.h"
