// launch_timing: measured kernel durations and host-link bandwidth for the swap and
// um learners (core/schedule.h), from CUPTI's activity records.
//
// Note [Tagging launches]
// ~~~~~~~~~~~~~~~~~~~~~~~
// The learner numbers the launches it sees (its own
// counter, a "tag") before it lets each one through to CUDA. It names the tag with
// tag_next_launch() on the launching thread; CUPTI's callback at that launch's API
// enter runs on the same thread, inside the real launch, and binds CUPTI's
// correlation id to the tag (and clears it: a tag names one launch). The kernel's
// activity record carries the correlation id, so its duration lands on the tag.
// Records reach us when CUPTI hands a buffer back, late and in batches: durations()
// forces a flush first, and a kernel still running then (a real GPU; simgpu writes
// records at enqueue) has no record yet, which is why the learner takes the median
// over every iteration it has seen rather than the last one.
//
// Note [Link figures from the engine's copies]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// Every h2d or d2h MEMCPY record whose
// host side is not pageable memory is the residency engine's (its host copies are
// host-located VMM memory or pinned) or a program's pinned copy, which crosses the
// same link at the same rate. Per direction, the durations are fitted as setup + bytes / bandwidth
// by least squares when the copies come in different sizes; with one size only
// (2 MiB pages) the fit is singular and the figure is the effective rate, total
// bytes over total time, with the setup folded into it (setup_ns is then 0 for that
// direction) -- if the copies average 1 MiB or more; small copies of one size (a
// program reading back a loss) measure the setup alone, and the direction is then
// unknown (bytes_per_s 0). Where the other direction was fitted, its setup is taken
// as this one's (the copy engines' setup, either way) and the rate is what the copies
// took beyond it: the cost model has one setup for both ways, and the swap engine
// copies out page by page (one size) but in by runs (many), so an effective rate out
// beside the setup fitted in would count the setup twice. Pageable copies (staged by
// the CPU) would understate the link and are left out.
//
// Nothing here calls CUDA but through cupti_source; nothing throws.
#ifndef OVERSUB_PROFILER_LAUNCH_TIMING_H
#define OVERSUB_PROFILER_LAUNCH_TIMING_H

#include <cstddef>
#include <cstdint>
#include <string>

namespace oversub::profiler::timing {

enum class source : std::uint8_t { off, cupti, held, unavailable };
const char* to_string(source s) noexcept;

// Subscribes once (Note [More than one sink] in profiler/cupti_source.h);
// later calls return the first one's answer. detail: who holds CUPTI or why it is
// unavailable.
source start(std::string* detail) noexcept;
source current() noexcept;

// See Note [Tagging launches]: the next launch on this thread is the caller's launch
// `tag`; no_tag: the next launch is not to be timed.
constexpr std::uint64_t no_tag = ~std::uint64_t{0};
void tag_next_launch(std::uint64_t tag) noexcept;

// Forces a flush of CUPTI's buffers (never from inside a CUPTI callback), then
// fills out[i] with the measured duration of tag first + i (ns; a kernel can take
// 0), unknown where none is known. Returns how many were known.
constexpr std::uint64_t unknown = ~std::uint64_t{0};
std::size_t durations(std::uint64_t first, std::size_t n, std::uint64_t* out) noexcept;

// Forces a flush like durations(), then fills out[i] with when the kernel of launch
// tags[i] started on the device, on CUPTI's clock (ns; only differences mean
// anything), unknown where no record has come yet (a kernel still queued or running
// on a real GPU) or none will. Returns how many were known. Note [Timing on the
// device] in core/tuning.cc.
std::size_t kernel_starts(const std::uint64_t* tags, std::size_t n, std::uint64_t* out) noexcept;

// See Note [CUPTI at rest] in profiler/cupti_source.h: the learner needs no duration
// or record for now (resting), or needs them again. Returns whether CUPTI rests.
bool rest(bool resting) noexcept;

// Forgets the durations of tags below `first` (the learner no longer needs them).
void forget_before(std::uint64_t first) noexcept;

// See Note [Link figures from the engine's copies].
struct direction_estimate {
  std::uint64_t copies = 0;          // copies measured
  double bytes_per_s = 0;            // 0: none measured
  std::uint64_t setup_ns = 0;        // per copy, from the fit (0 when not fitted)
  bool fitted = false;               // bytes_per_s and setup_ns apart
  double mean_bytes = 0;             // an effective rate's copy size
};
struct link_estimate {
  direction_estimate h2d;
  direction_estimate d2h;
};
link_estimate link() noexcept;

}  // namespace oversub::profiler::timing

#endif  // OVERSUB_PROFILER_LAUNCH_TIMING_H
