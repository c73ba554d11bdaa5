// The residency side of a call (see launch_residency.h).
#include "core/launch_residency.h"

#include <algorithm>
#include <atomic>
#include <memory>
#include <new>
#include <optional>
#include <span>
#include <vector>

#include "common/log.h"
#include "common/options.h"
#include "common/stats.h"
#include "common/units.h"
#include "core/error_codes.h"
#include "core/graph_footprint.h"
#include "core/refusal.h"
#include "core/schedule_internal.h"
#include "core/schedule.h"
#include "profiler/launch_scan.h"

namespace oversub {

namespace {

std::atomic<bool> g_driver_error_logged{false};
std::atomic<bool> g_oversized_logged{false};

// A prepare that failed: a driver error is CUDA's answer, the rest are refusals
// (see Note [One refusal message] in core/refusal.h).
cudaError_t refuse(const resident_call& at, const residency::prepare_result& r) {
  if (r.code == residency::residency_errc::driver_error) {
    const bool first = !g_driver_error_logged.exchange(true, std::memory_order_relaxed);
    log::emit(first ? log::level::error : log::level::info,
              "{}: making its memory resident on device {} failed (CUDA error {}); the call "
              "is not made",
              at.name, at.device, static_cast<int>(r.driver));
    return to_runtime_error(r.driver);
  }
  const refusal_kind kind =
      r.code == residency::residency_errc::too_large   ? refusal_kind::resident_too_large
      : r.code == residency::residency_errc::host_budget
                                ? refusal_kind::host_budget
                                : refusal_kind::resident_no_room;
  return oversub::refuse(refusal{kind, at.name, at.device, r.needed_bytes, !at.runtime});
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
residency::prepare_result prepare_oversized(const resident_call& at, const residency::byte_range* ranges,
                                       std::size_t n, bool writes,
                                       const residency::prepare_result& refused) {
  try {
    std::vector<residency::byte_range> relaxed;
    relaxed.reserve(2 * n);
    for (std::size_t i = 0; i < n; ++i) {
      if (ranges[i].reach) {
        relaxed.push_back(ranges[i]);
        continue;
      }
      // What is resident first: a plan that kept the pages the iteration uses most
      // for it (Note [Launches over the room] in policy/iteration_model.h) has them there.
      relaxed.push_back(residency::byte_range{ranges[i].addr, ranges[i].bytes, true, false, true});
      relaxed.push_back(residency::byte_range{ranges[i].addr, ranges[i].bytes, false, true});
    }
    const residency::prepare_result r = core::device_prepare(at.device, relaxed, at.stream, writes);
    if (r) {
      stats::global().swap_oversized.count();
      const bool first = !g_oversized_logged.exchange(true, std::memory_order_relaxed);
      log::emit(first ? log::level::warn : log::level::info,
                "{} on device {} needs {} resident at once, more than the swap capacity of {}: "
                "it runs with part of its memory read from host memory over the link, which "
                "is slow. Raise OVERSUB_DEVICE_LIMIT or lower the batch size.",
                at.name, at.device, format_bytes(refused.needed_bytes),
                format_bytes(core::device_residency_capacity(at.device)));
    }
    return r;
  } catch (...) {  // out of memory: refused as before
    return refused;
  }
}

// The launch path's per-thread scratch: a 32 KB parameter block scans to 4096 words,
// and these arrays (about 390 KB) must not live on the application's stack. Null when
// it cannot be allocated: the launch is then taken to touch any page.
struct launch_scratch {
  std::uint64_t words[profiler::max_scan_words];
  std::uint64_t bases[profiler::max_scan_words];
  std::uint64_t sizes[profiler::max_scan_words];
  residency::byte_range ranges[3 * profiler::max_scan_words];
};
launch_scratch* scratch() noexcept {
  thread_local std::unique_ptr<launch_scratch> s;
  if (!s) s.reset(new (std::nothrow) launch_scratch);
  return s.get();
}

// What the call gets for a prepare's result: success, or its refusal (counted when a
// driver call failed).
cudaError_t answer(const resident_call& at, const residency::prepare_result& r) {
  if (r) return cudaSuccess;
  if (r.code == residency::residency_errc::driver_error) stats::global().swap_refusals.count();
  return refuse(at, r);
}

}  // namespace

cudaError_t make_resident(const resident_call& at, const residency::byte_range* ranges, std::size_t n,
                          bool writes) {
  residency::prepare_result r = core::device_prepare(at.device, {ranges, n}, at.stream, writes);
  if (r.code == residency::residency_errc::too_large) {
    r = prepare_oversized(at, ranges, n, writes, r);
  }
  // See Note [A graph's footprint] in core/graph_footprint.h.
  if (r.capturing) core::graph_capture_ranges(at.stream, {ranges, n});
  return answer(at, r);
}

// Note [Copies in um mode]
// ~~~~~~~~~~~~~~~~~~~~~~~~
// The driver copies to and from managed memory wherever its pages are, so a copy or a
// memset in um mode needs nothing moved first; its stream only has to count as a user
// of the buffers, so that a later move of them waits for it. Made resident as launches
// are, the copies were the one thing the learned schedule did not know of: a training
// loop reads its loss (a few bytes) each iteration, the schedule had sent that buffer
// to the host, and the prefetch back, queued behind the room the migrations to the
// host were still freeing, held the loop for 20 ms of VGG-16's 200 (1/8 of its
// bytes, 1.5x, the H200's measured model). So they are reachable ranges (Note
// [Windows into large allocations] in residency/swap_engine.h): no move, a user
// recorded. swap mode still makes a copy's pages resident.
cudaError_t make_copy_resident(const resident_call& at, const residency::byte_range* ranges,
                               std::size_t n, bool writes) {
  if (current_config().mode != run_mode::um || n > 2) return make_resident(at, ranges, n, writes);
  residency::byte_range reach[2];
  for (std::size_t i = 0; i < n; ++i) {
    reach[i] = residency::byte_range{ranges[i].addr, ranges[i].bytes, false, true};
  }
  return make_resident(at, reach, n, writes);
}

std::uint64_t* launch_words() noexcept {
  launch_scratch* sc = scratch();
  return sc != nullptr ? sc->words : nullptr;
}

cudaError_t make_launch_resident(const resident_call& at, const tracker& t,
                                 const std::uint64_t* words, std::size_t n_words,
                                 bool unreadable, const void* kernel) {
  const int device = at.device;
  if (unreadable) {
    stats::global().launches_unreadable.count();
    core::device_touch_all(device, at.stream);
  }
  launch_scratch* sc = scratch();
  if (sc == nullptr) {
    core::device_touch_all(device, at.stream);
    return make_resident(at, nullptr, 0, true);
  }
  std::uint64_t* bases = sc->bases;
  std::uint64_t* sizes = sc->sizes;
  // The scan gives each buffer's size under its one lock: no second lookup per buffer.
  const std::size_t found = n_words == 0 ? 0 : t.scan(words, n_words, bases, sizes);
  // See Note [Windows into large allocations] (residency/swap_engine.h): in swap mode,
  // where the launch's allocations together exceed the capacity, and in um mode always,
  // an allocation larger than a quarter of it is taken for a segment of a caching
  // allocator; each word pointing into it asks for a window of an eighth of the capacity
  // from the word on, best effort.
  const std::uint64_t capacity = core::device_residency_capacity(device);
  bool whole = current_config().mode == run_mode::swap;
  if (whole) {
    std::uint64_t total = 0;
    for (std::size_t i = 0; i < found; ++i) total += sizes[i];
    whole = total <= capacity;
  }
  const std::uint64_t large = whole ? ~std::uint64_t{0} : capacity / 4;
  const std::uint64_t window = std::max<std::uint64_t>(capacity / 8, 1);
  std::span<residency::byte_range> ranges(sc->ranges);
  std::size_t k = 0;
  for (std::size_t i = 0; i < found; ++i) {
    const std::uint64_t base = bases[i];
    const std::uint64_t bytes = sizes[i];
    if (bytes <= large) {
      ranges[k++] = residency::byte_range{base, bytes};
      continue;
    }
    for (std::size_t w = 0; w < n_words && k + 1 < ranges.size(); ++w) {
      if (words[w] < base || words[w] >= base + bytes) continue;
      const std::uint64_t end = std::min<std::uint64_t>(base + bytes, words[w] + window);
      ranges[k++] = residency::byte_range{words[w], end - words[w], true};
    }
    // The kernel may reach any byte of it: its stream uses every page of it.
    if (k < ranges.size()) ranges[k++] = residency::byte_range{base, bytes, false, true};
  }
  core::schedule_before_launch(device, ranges.first(k), kernel);
  return make_resident(at, ranges.data(), k, true);
}

cudaError_t make_graph_resident(const resident_call& at, CUgraphExec exec) {
  // See Note [A graph's footprint] in core/graph_footprint.h: a prefetch; the replay
  // may still touch any page.
  core::device_touch_all(at.device, at.stream);
  const core::graph_ranges footprint = core::graph_footprint(exec);
  if (footprint && core::graph_fetch_now(exec, at.stream)) {
    // See Note [Replays come round in turn] in core/graph_footprint.h.
    const residency::prepare_result r =
        core::device_prepare(at.device, *footprint, at.stream, true,
                             core::graph_replay_rank(exec, core::schedule_internal::page_bytes));
    if (r) stats::global().graph_replays_prefetched.count();
    // Larger than the capacity: the replay reaches what is not resident on the host,
    // as one whose footprint is unknown does (the same Note).
    if (r.code != residency::residency_errc::too_large) return answer(at, r);
  }
  return make_resident(at, nullptr, 0, true);
}

}  // namespace oversub
