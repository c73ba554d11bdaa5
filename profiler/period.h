// period: finds the training iteration in the sequence of launched functions.
//
// Note [Finding the launch period]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// A training loop launches the same functions in
// the same order every iteration, after some warm-up (initialisation kernels, a
// first iteration that differs) and before some tail (evaluation, shutdown). The
// iteration is the smallest period p of the longest stretch of the sequence that
// repeats at least twice. With the prefix function (Knuth-Morris-Pratt) of the
// sequence, the smallest period of its first L tokens is L - pi[L-1]; the longest
// prefix with 2p <= L is the stretch that starts at the beginning; the same on the
// reversed sequence gives the stretch that ends at the end. The longer wins (the
// forward one on a tie). O(n) time and memory, so it can run again as the run
// grows. policy/allocation_iteration.h finds a period in the allocation stream
// online, token by token, in O(max_period) per token: too slow to pay on every
// launch, which is why this is a separate, batch search over the launch sequence.
//
// The period fixes the iteration's length, not where it starts: every rotation of
// an iteration repeats too. choose_phase() picks the rotation whose boundary has
// the fewest per-iteration bytes live (a training step starts when the previous
// one has freed its activations).
//
// Pure computation, no CUDA.
#ifndef OVERSUB_PROFILER_PERIOD_H
#define OVERSUB_PROFILER_PERIOD_H

#include <cstddef>
#include <cstdint>
#include <optional>
#include <vector>

namespace oversub::profiler {

struct periodic_stretch {
  std::size_t period = 0;  // tokens per iteration
  std::size_t begin = 0;   // [begin, end) repeats with that period
  std::size_t end = 0;
  std::size_t repetitions() const { return period == 0 ? 0 : (end - begin) / period; }
  bool operator==(const periodic_stretch&) const = default;
};

// The longest stretch of tokens that repeats at least twice, with its smallest
// period; nullopt when nothing repeats.
std::optional<periodic_stretch> find_period(const std::vector<std::uint32_t>& tokens);

// The iteration start in [s.begin, s.begin + s.period) whose position has the
// least cost[position] summed over the stretch's repetitions (cost[i]: bytes of
// per-iteration buffers live before token i; cost.size() >= s.end). Ties: the last start of the earliest run of
// equal starts (just before the step allocates again).
std::size_t choose_phase(const periodic_stretch& s, const std::vector<std::uint64_t>& cost);

}  // namespace oversub::profiler

#endif  // OVERSUB_PROFILER_PERIOD_H
