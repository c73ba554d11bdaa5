// Swap-mode glue of the hooks (see swap_hooks.h).
#include "interpose/swap_hooks.h"

#include <algorithm>
#include <array>
#include <memory>
#include <new>
#include <span>
#include <vector>

#include "common/log.h"
#include "common/options.h"
#include "common/stats.h"
#include "common/tracker.h"
#include "common/units.h"
#include "interpose/pool_hooks.h"
#include "interpose/profile_hooks.h"
#include "interpose/real.h"
#include "core/schedule.h"
#include "core/device_pool.h"
#include "profiler/launch_scan.h"
#include "profiler/session.h"

namespace oversub::interpose {

std::atomic<int> g_swap_on{-1};

namespace {

profiler::function_cache g_layouts;
profiler::function_cache g_driver_layouts;
std::atomic<bool> g_refusal_logged{false};
std::atomic<bool> g_unreadable_logged{false};
std::atomic<bool> g_oversized_logged{false};

// The parameter layout of func, asked of CUDA once (outside any lock of ours), or
// null while an application error is pending (Note [Probing leaves no error
// behind] in profiler/session.h): the launch is then prepared with no buffers (its
// pages reached where they are) and the function probed at a later launch.
// See Note [A launch that may touch anything] (residency/swap_engine.h): each function whose
// layout cannot be read is named once in the log, at warn level for the first.
void say_unreadable(const char* name) noexcept {
  const bool first = !g_unreadable_logged.exchange(true, std::memory_order_relaxed);
  log::emit(first ? log::level::warn : log::level::info,
            "kernel '{}': its parameter layout cannot be read, so swap mode cannot tell "
            "which buffers it uses; its launches are taken to touch any page (slower; "
            "counted as launches_unreadable)",
            name != nullptr ? name : "<unnamed>");
}

const profiler::function_info* layout_of(const void* func) noexcept {
  if (const profiler::function_info* f = g_layouts.lookup(func)) return f;
  profiler::function_info info;
  if (!profiler::probe_runtime_params(cuda_queries(), func, info.params, &info.unreadable)) {
    return nullptr;
  }
  if (info.unreadable) {
    const char* name = nullptr;
    const profiler::cuda_queries& q = cuda_queries();
    if (q.runtime_name == nullptr || q.runtime_name(&name, func) != 0) name = nullptr;
    if (q.runtime_take_error != nullptr) q.runtime_take_error();  // Note [Probing leaves no error behind] in profiler/session.h
    say_unreadable(name);
  }
  return g_layouts.insert(func, std::move(info));
}

cudaError_t refuse(call_site at, int device, const pool::prepare_result& r) noexcept {
  const bool first = !g_refusal_logged.exchange(true, std::memory_order_relaxed);
  if (r.code == pool::residency_errc::driver_error) {
    log::emit(first ? log::level::error : log::level::info,
              "{}: making its memory resident on device {} failed (CUDA error {}); the call "
              "is not made",
              at.name, device, static_cast<int>(r.driver));
    // The runtime's codes for these driver errors have the same values
    // (CUDA_ERROR_INVALID_VALUE = cudaErrorInvalidValue, ..._OUT_OF_MEMORY =
    // cudaErrorMemoryAllocation, ..._LAUNCH_FAILED = cudaErrorLaunchFailure).
    return static_cast<cudaError_t>(r.driver);
  }
  log::emit(first ? log::level::warn : log::level::info,
            "{} on device {} needs {} resident at once{}; the swap capacity is {}. Returning "
            "cudaErrorMemoryAllocation. Raise OVERSUB_DEVICE_LIMIT or lower the batch size.",
            at.name, device, format_bytes(r.needed_bytes),
            r.code == pool::residency_errc::too_large ? ""
            : r.code == pool::residency_errc::host_budget
                ? " and the host budget (OVERSUB_HOST_LIMIT) is spent"
                : " and no room could be made",
            format_bytes(pool::device_residency_capacity(device)));
  return cudaErrorMemoryAllocation;
}

// Note [Larger than the capacity]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// A call whose own memory exceeds the swap capacity
// (an optimizer's foreach launch over every parameter, a huge batch) cannot have all
// of it resident. Refusing it would end the job; instead it runs with what fits made
// resident and the rest reached where it is, in host memory over the link (Note [An
// unpredicted access is slow, not a crash] in residency/swap_engine.h): every range becomes
// optional, and reachable, so that its stream still counts as a user of each page and
// no page moves under it. Slow, counted (swap_oversized) and said once.
pool::prepare_result prepare_oversized(call_site at, int device, const pool::byte_range* ranges,
                                       std::size_t n, bool writes, CUstream stream,
                                       const pool::prepare_result& refused) noexcept {
  try {
    std::vector<pool::byte_range> relaxed;
    relaxed.reserve(2 * n);
    for (std::size_t i = 0; i < n; ++i) {
      if (ranges[i].reach) {
        relaxed.push_back(ranges[i]);
        continue;
      }
      relaxed.push_back(pool::byte_range{ranges[i].addr, ranges[i].bytes, true, false});
      relaxed.push_back(pool::byte_range{ranges[i].addr, ranges[i].bytes, false, true});
    }
    const pool::prepare_result r = pool::device_prepare(device, relaxed, stream, writes);
    if (r) {
      stats::global().swap_oversized.count();
      const bool first = !g_oversized_logged.exchange(true, std::memory_order_relaxed);
      log::emit(first ? log::level::warn : log::level::info,
                "{} on device {} needs {} resident at once, more than the swap capacity of {}: "
                "it runs with part of its memory read from host memory over the link, which "
                "is slow. Raise OVERSUB_DEVICE_LIMIT or lower the batch size.",
                at.name, device, format_bytes(refused.needed_bytes),
                format_bytes(pool::device_residency_capacity(device)));
    }
    return r;
  } catch (...) {  // out of memory: refused as before
    return refused;
  }
}

cudaError_t prepare(call_site at, int device, const pool::byte_range* ranges, std::size_t n,
                    bool writes, cudaStream_t stream) noexcept {
  const CUstream s = driver_stream(at.per_thread, stream);
  pool::prepare_result r = pool::device_prepare(device, {ranges, n}, s, writes);
  if (r.code == pool::residency_errc::too_large) {
    r = prepare_oversized(at, device, ranges, n, writes, s, r);
  }
  if (r) return cudaSuccess;
  stats::global().swap_refusals.count();
  return refuse(at, device, r);
}

// The parameter layout of driver function f, asked of CUDA once.
const profiler::function_info* driver_layout_of(void* f) noexcept {
  if (const profiler::function_info* info = g_driver_layouts.lookup(f)) return info;
  profiler::function_info info;
  info.unreadable = !profiler::probe_driver_params(cuda_queries(), f, info.params);
  if (info.unreadable) {
    const char* name = nullptr;
    const profiler::cuda_queries& q = cuda_queries();
    if (q.driver_name == nullptr || q.driver_name(&name, f) != 0) {
      if (q.kernel_name == nullptr || q.kernel_name(&name, f) != 0) name = nullptr;
    }
    say_unreadable(name);
  }
  return g_driver_layouts.insert(f, std::move(info));
}

// The launch path's per-thread scratch: a 32 KB parameter block scans to 4096 words,
// and these arrays (about 360 KB) must not live on the application's stack. Null when
// it cannot be allocated: the launch is then taken to touch any page.
struct launch_scratch {
  std::uint64_t words[profiler::max_scan_words];
  std::uint64_t bases[profiler::max_scan_words];
  pool::byte_range ranges[3 * profiler::max_scan_words];
};
launch_scratch* scratch() noexcept {
  thread_local std::unique_ptr<launch_scratch> s;
  if (!s) s.reset(new (std::nothrow) launch_scratch);
  return s.get();
}

// A launch whose n_words argument words are words: the live allocations they point
// into made resident on stream, after the schedule has had its say. unreadable: the
// parameter layout could not be read, so the words are none of the launch's, and it
// may touch any page (Note [A launch that may touch anything] in residency/swap_engine.h).
cudaError_t prepare_launch(call_site at, int device, const std::uint64_t* words,
                           std::size_t n_words, cudaStream_t stream,
                           bool unreadable = false) noexcept {
  if (unreadable) {
    stats::global().launches_unreadable.count();
    pool::device_touch_all(device, driver_stream(at.per_thread, stream));
  }
  launch_scratch* sc = scratch();
  if (sc == nullptr) {
    pool::device_touch_all(device, driver_stream(at.per_thread, stream));
    return prepare(at, device, nullptr, 0, true, stream);
  }
  std::uint64_t* bases = sc->bases;
  const std::size_t found = n_words == 0 ? 0 : core().scan(words, n_words, bases);
  // See Note [Windows into large allocations] (residency/swap_engine.h): an allocation larger
  // than a quarter of the capacity is taken for a segment of a caching allocator; each
  // word pointing into it asks for a window of an eighth of the capacity from the
  // word on, best effort.
  const std::uint64_t capacity = pool::device_residency_capacity(device);
  const std::uint64_t large = capacity / 4;
  const std::uint64_t window = std::max<std::uint64_t>(capacity / 8, 1);
  std::span<pool::byte_range> ranges(sc->ranges);
  std::size_t k = 0;
  for (std::size_t i = 0; i < found; ++i) {
    const std::optional<allocation> a = core().find(bases[i]);
    if (!a) continue;
    if (a->bytes <= large) {
      ranges[k++] = pool::byte_range{a->base, a->bytes};
      continue;
    }
    for (std::size_t w = 0; w < n_words && k + 1 < ranges.size(); ++w) {
      if (words[w] < a->base || words[w] >= a->base + a->bytes) continue;
      const std::uint64_t end = std::min<std::uint64_t>(a->base + a->bytes, words[w] + window);
      ranges[k++] = pool::byte_range{words[w], end - words[w], true};
    }
    // The kernel may reach any byte of it: its stream uses every page of it.
    if (k < ranges.size()) ranges[k++] = pool::byte_range{a->base, a->bytes, false, true};
  }
  schedule_before_launch(device, ranges.first(k));
  return prepare(at, device, ranges.data(), k, true, stream);
}

}  // namespace

bool decide_swap_mode() noexcept {
  const bool on = current_config().mode >= run_mode::swap && pool_mode();
  int expected = -1;
  if (!g_swap_on.compare_exchange_strong(expected, on ? 1 : 0)) return expected == 1;
  return on;
}

cudaError_t swap_launch(hook_id id, const void* func, void** args, cudaStream_t stream) noexcept {
  launch_scratch* sc = scratch();
  std::uint64_t* words = sc != nullptr ? sc->words : nullptr;
  std::size_t n_words = 0;
  bool unreadable = sc == nullptr;
  if (sc != nullptr && func != nullptr && args != nullptr) {
    if (const profiler::function_info* f = layout_of(func)) {
      n_words = profiler::gather_words(f->params, args, words);
      unreadable = f->unreadable;
    } else {
      unreadable = true;  // not probed yet (an application error is pending)
    }
  }
  return prepare_launch(site_of(id), current_device(), words, n_words, stream, unreadable);
}

cudaError_t swap_driver_launch(call_site at, int device, void* f, void** params, void** extra,
                               cudaStream_t stream) noexcept {
  launch_scratch* sc = scratch();
  std::uint64_t* words = sc != nullptr ? sc->words : nullptr;
  std::size_t n_words = 0;
  bool unreadable = sc == nullptr;
  if (sc != nullptr && f != nullptr && (params != nullptr || extra != nullptr)) {
    const profiler::function_info* info = driver_layout_of(f);
    unreadable = info->unreadable;
    if (params != nullptr) {
      n_words = profiler::gather_words(info->params, params, words);
    } else {
      std::size_t packed_bytes = 0;
      if (const void* packed = profiler::packed_arguments(extra, &packed_bytes)) {
        n_words = profiler::gather_packed(info->params, packed, packed_bytes, words);
      }
    }
  }
  return prepare_launch(at, device, words, n_words, stream, unreadable);
}

cudaError_t swap_ranges(call_site at, int device, swap_range a, swap_range b, bool writes,
                        cudaStream_t stream) noexcept {
  const pool::byte_range ranges[2] = {{reinterpret_cast<std::uintptr_t>(a.ptr), a.bytes},
                                      {reinterpret_cast<std::uintptr_t>(b.ptr), b.bytes}};
  return prepare(at, device, ranges, 2, writes, stream);
}

cudaError_t swap_graph_launch(call_site at, int device, cudaStream_t stream) noexcept {
  pool::device_touch_all(device, driver_stream(at.per_thread, stream));
  return prepare(at, device, nullptr, 0, true, stream);
}

cudaError_t swap_graph_launch(hook_id id, cudaStream_t stream) noexcept {
  return swap_graph_launch(site_of(id), current_device(), stream);
}

cudaError_t swap_ranges(hook_id id, swap_range a, swap_range b, bool writes,
                        cudaStream_t stream) noexcept {
  return swap_ranges(site_of(id), current_device(), a, b, writes, stream);
}

}  // namespace oversub::interpose
