// The driver hook table in C++ form (interpose/driver_hooks.def through
// driver_hook_list.h), and the version table a cuGetProcAddress query is answered
// from.
//
// driver_hook_id has one enumerator per exported driver symbol, plus the two ABIs of
// cuGetProcAddress itself (written by hand in driver_real.cc: cuda.h #defines the
// plain name to _v2). Plain C++ over CUDA's headers; no CUDA call.
//
// Note [Answering by version]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~
// A cuGetProcAddress caller names the base symbol
// ("cuMemAlloc"), the CUDA version it was built for and whether it wants the
// per-thread-default-stream flavour. The answer is the ABI of the newest row for that
// name whose version is not above the request: cuMemAlloc at 3020 or later is
// cuMemAlloc_v2; at 2000 it is the 32-bit cuMemAlloc, which oversub does not
// intercept (an OVERSUB_DRIVER_OLD row), so the driver's own function is returned
// untouched; below every row, the driver's answer (VERSION_NOT_SUFFICIENT) stands.
// The per-thread flavour is the newest per-thread row not above the request, if
// there is one, else the legacy answer. Handing out the newest _vN whatever was asked
// broke older runtimes in tools before us: an old caller then calls a new ABI with
// the old arguments.
#ifndef OVERSUB_INTERPOSE_DRIVER_TABLE_H
#define OVERSUB_INTERPOSE_DRIVER_TABLE_H

#include <cuda.h>

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

namespace oversub::interpose {

enum class driver_family : std::uint8_t {
  alloc, free, info, vmm, launch, copy, memset, graph, graph_build, lookup
};

enum class driver_hook_id : std::uint16_t {
#define OVERSUB_DRIVER_EMIT(family, symbol, base, query, since, per_thread, params, args) symbol,
#include "interpose/driver_hook_list.h"
  cuGetProcAddress_v1,  // exported as cuGetProcAddress (the CUDA 11.3 ABI)
  cuGetProcAddress_v2,
  count_
};

inline constexpr std::size_t driver_hook_count = static_cast<std::size_t>(driver_hook_id::count_);

constexpr std::size_t index(driver_hook_id id) { return static_cast<std::size_t>(id); }

struct driver_hook_info {
  const char* name;   // the exported symbol
  const char* query;  // the base name cuGetProcAddress is asked for
  int since;          // CUDA version from which a query answers this ABI
  bool per_thread;    // a _ptsz/_ptds twin
  driver_family family;
};

inline constexpr driver_hook_info driver_hooks[driver_hook_count] = {
#define OVERSUB_DRIVER_EMIT(family, symbol, base, query, since, per_thread, params, args) \
  {#symbol, query, since, per_thread != 0, driver_family::family},
#include "interpose/driver_hook_list.h"
    {"cuGetProcAddress", "cuGetProcAddress", 11030, false, driver_family::lookup},
    {"cuGetProcAddress_v2", "cuGetProcAddress", 12000, false, driver_family::lookup},
};

// A row of the version table: a query's ABI from `since` on; hook none for an ABI
// oversub leaves alone.
struct driver_version_row {
  const char* query;
  int since;
  bool per_thread;
  std::optional<driver_hook_id> hook;
};

inline constexpr driver_version_row driver_version_rows[] = {
#define OVERSUB_DRIVER_EMIT(family, symbol, base, query, since, per_thread, params, args) \
  {query, since, per_thread != 0, driver_hook_id::symbol},
#define OVERSUB_DRIVER_OLD_EMIT(query, since) {query, since, false, std::nullopt},
#include "interpose/driver_hook_list.h"
    {"cuGetProcAddress", 11030, false, driver_hook_id::cuGetProcAddress_v1},
    {"cuGetProcAddress", 12000, false, driver_hook_id::cuGetProcAddress_v2},
};

// What a query for `query` at `version` (with the per-thread flavour or not)
// answers, by Note [Answering by version]. found is false when no row of ours names
// the query or the version is below all of them: the driver's answer stands.
struct driver_answer {
  bool found = false;
  std::optional<driver_hook_id> hook;  // empty: an ABI oversub does not intercept
};

constexpr driver_answer answer_query(std::string_view query, int version, bool per_thread) {
  const driver_version_row* legacy = nullptr;
  const driver_version_row* twin = nullptr;
  for (const driver_version_row& row : driver_version_rows) {
    if (query != row.query || row.since > version) continue;
    const driver_version_row*& best = row.per_thread ? twin : legacy;
    if (best == nullptr || row.since > best->since) best = &row;
  }
  if (per_thread && twin != nullptr) return {true, twin->hook};
  if (legacy != nullptr) return {true, legacy->hook};
  return {};
}

// The hook exported under `name` (dlsym's view: the exact ABI name), if any.
constexpr std::optional<driver_hook_id> find_driver_export(std::string_view name) {
  for (std::size_t i = 0; i < driver_hook_count; ++i) {
    if (name == driver_hooks[i].name) return static_cast<driver_hook_id>(i);
  }
  return std::nullopt;
}

}  // namespace oversub::interpose

#endif  // OVERSUB_INTERPOSE_DRIVER_TABLE_H
