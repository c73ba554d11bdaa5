// The hook table in C++ form: ids, names, families and real-function types of every
// symbol listed in hooks.def (expanded by hook_list.h).
//
// hook_id has one enumerator per exported symbol (cudaMemcpy and cudaMemcpy_ptds are
// two ids); real_t<id> is the type of the real function, taken from CUDA's own
// declaration of the plain name, before hooks.cc redeclares it.
#ifndef OVERSUB_INTERPOSE_HOOK_TABLE_H
#define OVERSUB_INTERPOSE_HOOK_TABLE_H

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <string_view>

#include "interpose/cuda_decls.h"

namespace oversub::interpose {

enum class hook_family : std::uint8_t {
  alloc, free, info, launch, copy, memset, sync, graph, graph_build, lookup
};

enum class hook_id : std::uint16_t {
#define OVERSUB_EMIT(family, ret, symbol, base, params, args) symbol,
#include "interpose/hook_list.h"
  count_
};

inline constexpr std::size_t hook_count = static_cast<std::size_t>(hook_id::count_);

constexpr std::size_t index(hook_id id) { return static_cast<std::size_t>(id); }

inline constexpr const char* hook_names[hook_count] = {
#define OVERSUB_EMIT(family, ret, symbol, base, params, args) #symbol,
#include "interpose/hook_list.h"
};

inline constexpr hook_family hook_families[hook_count] = {
#define OVERSUB_EMIT(family, ret, symbol, base, params, args) hook_family::family,
#include "interpose/hook_list.h"
};

// True for the _ptsz / _ptds twins: there a null stream means the calling thread's
// default stream (cudaStreamPerThread), not the legacy stream.
inline constexpr bool hook_per_thread[hook_count] = {
#define OVERSUB_EMIT(family, ret, symbol, base, params, args) \
  std::string_view(#symbol) != std::string_view(#base),
#include "interpose/hook_list.h"
};

// cudaGetDriverEntryPoint is deprecated in CUDA 13 but still exported, and hooked.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
template <hook_id id>
struct real_type;
#define OVERSUB_EMIT(family, ret, symbol, base, params, args) \
  template <>                                                 \
  struct real_type<hook_id::symbol> {                         \
    using type = decltype(&::base);                           \
  };
#include "interpose/hook_list.h"
#pragma GCC diagnostic pop

template <hook_id id>
using real_t = typename real_type<id>::type;

// Tag type selecting a handler overload by the plain (base) hook.
template <hook_id id>
struct hook_tag {};

// Who is asking, in the terms the core needs: the entry point's name (for
// messages), whether it is a _ptsz/_ptds twin (a null stream is then the calling
// thread's), and whether it is a runtime entry point (the runtime makes its context
// current on first use; a driver caller has made one current itself).
struct call_site {
  const char* name;
  bool per_thread;
  bool runtime;
};

constexpr call_site site_of(hook_id id) {
  return call_site{hook_names[index(id)], hook_per_thread[index(id)], true};
}

}  // namespace oversub::interpose

#endif  // OVERSUB_INTERPOSE_HOOK_TABLE_H
