// Allocation traces (docs/trace-format.md): reading a trace file into its events,
// and turning events into the planner's buffer lifetimes.
#ifndef OVERSUB_BENCH_FRAGMENTATION_TRACE_H
#define OVERSUB_BENCH_FRAGMENTATION_TRACE_H

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "policy/placement.h"

namespace oversub::bench {

struct trace_event {
  bool alloc;               // false: a free
  std::uint32_t buffer;     // dense index of the allocation (0, 1, ... in order of 'a')
  std::size_t bytes;        // for an allocation: bytes requested
};

struct trace {
  std::string name;    // the file name without folder and extension
  std::string source;  // the header's "# source:" line
  std::vector<trace_event> events;  // allocations and frees in order (time = index)
  std::size_t iterations = 0;       // 'i' records seen
};

// Reads path; on a malformed file returns false and says why in *error.
bool read_trace(const std::string& path, trace* out, std::string* error);

// One lifetime per allocation; a buffer never freed lives to events.size().
std::vector<policy::buffer_lifetime> lifetimes_of(const trace& t);

// The most bytes live at once, each size rounded up to alignment_bytes.
std::size_t max_live_bytes(const trace& t, std::size_t alignment_bytes);

// A synthetic trace of n allocations with random sizes (64 B to 32 MiB) and random
// frees, a few never freed: the planner's worst case, for its run time.
trace random_trace(std::size_t n, std::uint32_t seed);

}  // namespace oversub::bench

#endif  // OVERSUB_BENCH_FRAGMENTATION_TRACE_H
