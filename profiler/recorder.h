// recorder: what the profiler saw during the run, and the profile built from it.
//
// The session (session.h) feeds it plain facts, in the order they happened:
// allocations and frees (with a call site's raw return addresses), launches (a
// function id and the bases of the live allocations its arguments point into),
// copies and memsets, iteration marks, and later the durations CUPTI's activity
// records give by correlation id. At the end (or after the requested number of
// iterations) build() picks one complete iteration and turns the run into a
// profile (profile_format.h):
//
//   - the iteration: between the last two marks when the program marked its
//     iterations (oversub_iteration_begin(), else OVERSUB_ITERATION_MARKER), or
//     else the last complete repetition of the launch period but one (the last is
//     followed by the run's teardown) (period.h), starting at the rotation with
//     the fewest live bytes;
//   - the buffers, each named as Note [Buffer identity] says.
//
// Note [Buffer identity]
// ~~~~~~~~~~~~~~~~~~~~~~
// An allocation made inside the iteration is named by its ordinal among the
// iteration's allocations and its size, which is what the next iteration repeats
// (its address may differ); one made before the iteration (weights, optimizer state,
// a caching allocator's segments) is long-lived and named by its address. Positions
// (allocation, free, copy) are counted in launches of the iteration before the event.
//
// Plain C++, no CUDA. Thread-safe: one mutex around everything.
#ifndef OVERSUB_PROFILER_RECORDER_H
#define OVERSUB_PROFILER_RECORDER_H

#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "profiler/profile_format.h"

namespace oversub::profiler {

// Note [A link rate from large copies only]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// A profile's link rate (h2d_bytes_per_s, d2h_bytes_per_s) is the bytes of the run's
// timed copies over their time. A copy of a few KiB takes its setup time, not its
// bytes' (16 KiB of tokens in 10 us reads as 1.6 GB/s on a 50 GB/s link), and a rate
// that low made OVERSUB_MODE=auto predict GPT-2's iteration ten times too slow in both
// modes. So only copies of at least link_sample_min_bytes (1 MiB: about 20 us at 50
// GB/s) count; a run without one records no rate, and its readers take their
// stand-in.
inline constexpr std::uint64_t link_sample_min_bytes = std::uint64_t{1} << 20;

struct periodic_stretch;

class recorder {
 public:
  // Launches kept for the search; past it launches are counted, not kept.
  static constexpr std::size_t max_launches_kept = std::size_t{1} << 22;

  explicit recorder(std::string marker = {}) : marker_(std::move(marker)) {}

  // A function's id (its demangled name, interned); marks it when its name
  // contains the iteration marker.
  std::uint32_t add_function(const std::string& name);
  const std::string& function_name(std::uint32_t id) const;

  void on_alloc(std::uint64_t base, std::uint64_t bytes, const std::uintptr_t* frames,
                std::size_t frame_count);
  void on_free(std::uint64_t base);
  // bases: the allocations the arguments point into (any order, no duplicates).
  // unreadable: the function's parameter layout could not be read, so bases is not
  // the launch's buffer set (Note [A launch whose buffers are not known] in
  // profiler/profile_format.h); the profile marks the launch.
  void on_launch(std::uint32_t function, const std::uint64_t* bases, std::size_t count,
                 std::uint32_t correlation_id, bool unreadable = false);
  void on_iteration_begin();
  void on_copy(copy_kind kind, std::uint64_t bytes, std::uint64_t device_base,
               std::uint32_t correlation_id);
  void on_kernel_time(std::uint32_t correlation_id, std::uint64_t ns);
  void on_copy_time(std::uint32_t correlation_id, copy_kind kind, std::uint64_t bytes,
                    std::uint64_t ns);

  std::uint64_t launches() const;
  // Complete iterations seen so far, and how they are found. With no marks the
  // period search runs again when the launch count has grown by an eighth.
  std::uint32_t iterations(iteration_source* how = nullptr, std::size_t* period = nullptr);

  // Where a return address lies, for call sites (module path, offset, symbol).
  struct frame_info {
    std::string module;
    std::uint64_t offset = 0;
    std::string symbol;
    bool skip = false;  // one of oversub's own frames
  };
  using frame_resolver = std::function<frame_info(std::uintptr_t)>;

  // The profile of one complete iteration; nullopt and *why when there is none.
  std::optional<profile> build(const device_figures& device, bool cupti,
                               const std::string& program, const frame_resolver& resolve,
                               std::string* why) const;

 private:
  enum class ev : std::uint8_t { alloc, free, copy };
  struct mem_event {
    ev type = ev::alloc;
    copy_kind kind = copy_kind::other;
    std::uint32_t site = no_index;       // alloc: call-site id
    std::uint32_t correlation_id = 0;    // copy
    std::uint64_t base = 0;
    std::uint64_t bytes = 0;
    std::uint64_t launch_pos = 0;        // launches before it
  };
  struct launch_event {
    std::uint32_t function = 0;
    std::uint32_t correlation_id = 0;
    std::uint32_t first_base = 0;
    std::uint32_t base_count : 31 = 0;  // at most max_scan_words
    std::uint32_t unreadable : 1 = 0;
  };
  struct window {
    std::uint64_t begin = 0, end = 0;
    iteration_source how = iteration_source::automatic;
    std::uint32_t iterations = 0;
    // The first launch of the iterations before it that repeat it launch for launch
    // (the periodic stretch; the marked iterations of its length in a row).
    std::uint64_t first = 0;
  };
  std::optional<window> find_iteration_locked(std::string* why) const;
  std::vector<std::uint64_t> live_bytes_before_launches_locked(std::size_t n) const;
  bool steady_locked(const periodic_stretch& s) const;
  // Launch i's kernel time, the shortest at its place in w's iterations (See Note [A
  // kernel's own duration] in recorder.cc); 0 if never timed.
  std::uint64_t own_kernel_ns_locked(std::uint64_t i, const window& w) const;

  mutable std::mutex mutex_;
  std::string marker_;
  std::vector<std::string> functions_;
  std::vector<bool> is_marker_;
  std::unordered_map<std::string, std::uint32_t> function_ids_;
  std::vector<launch_event> launches_;
  std::vector<std::uint64_t> bases_;
  std::uint64_t launch_count_ = 0;
  std::vector<mem_event> mem_;
  std::vector<std::uint64_t> marker_marks_;  // launch positions starting an iteration
  std::vector<std::uint64_t> api_marks_;
  std::map<std::vector<std::uintptr_t>, std::uint32_t> site_ids_;
  std::vector<std::vector<std::uintptr_t>> sites_;
  std::unordered_map<std::uint32_t, std::uint64_t> kernel_ns_;
  std::unordered_map<std::uint32_t, std::uint64_t> copy_ns_;
  // h2d, d2h bytes with a measured duration, copies of link_sample_min_bytes or more
  // (Note [A link rate from large copies only]).
  std::uint64_t link_bytes_[2] = {0, 0};
  std::uint64_t link_ns_[2] = {0, 0};
  // The last automatic search.
  std::uint64_t searched_at_ = 0;
  std::uint32_t auto_iterations_ = 0;
  std::size_t auto_period_ = 0;
  std::uint64_t auto_since_ = 0;
  std::size_t auto_longest_ = 0;  // the longest period that was ever the answer  // launches when auto_period_ became the answer
};

}  // namespace oversub::profiler

#endif  // OVERSUB_PROFILER_RECORDER_H
