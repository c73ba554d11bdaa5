// The launch-period search (see Note [Finding the launch period] in period.h).
#include "profiler/period.h"

#include <limits>

namespace oversub::profiler {

namespace {

// Longest prefix of the sequence at(0..n) that is at least two copies of its
// smallest period: (period, length), or (0, 0).
template <typename At>
std::pair<std::size_t, std::size_t> longest_repeating_prefix(std::size_t n, At at) {
  std::vector<std::uint32_t> pi(n, 0);
  std::size_t best_p = 0;
  std::size_t best_len = 0;
  for (std::size_t i = 1; i < n; ++i) {
    std::uint32_t k = pi[i - 1];
    while (k > 0 && at(i) != at(k)) k = pi[k - 1];
    if (at(i) == at(k)) ++k;
    pi[i] = k;
    const std::size_t len = i + 1;
    const std::size_t p = len - k;
    if (2 * p <= len) {
      best_p = p;
      best_len = len;
    }
  }
  return {best_p, best_len};
}

}  // namespace

std::optional<periodic_stretch> find_period(const std::vector<std::uint32_t>& tokens) {
  const std::size_t n = tokens.size();
  if (n < 2) return std::nullopt;
  auto [fp, flen] = longest_repeating_prefix(n, [&](std::size_t i) { return tokens[i]; });
  auto [rp, rlen] =
      longest_repeating_prefix(n, [&](std::size_t i) { return tokens[n - 1 - i]; });
  if (flen == 0 && rlen == 0) return std::nullopt;
  if (flen >= rlen) return periodic_stretch{fp, 0, flen};
  return periodic_stretch{rp, n - rlen, n};
}

std::size_t choose_phase(const periodic_stretch& s, const std::vector<std::uint64_t>& cost) {
  std::size_t best = s.begin;
  std::uint64_t best_cost = std::numeric_limits<std::uint64_t>::max();
  bool tie_run = false;
  for (std::size_t start = s.begin; start < s.begin + s.period; ++start) {
    std::uint64_t total = 0;
    // Every start in [begin, begin + period) has exactly repetitions() positions.
    for (std::size_t k = 0, i = start; k < s.repetitions() && i < cost.size(); ++k, i += s.period) {
      total += cost[i];
    }
    // On a tie run (nothing allocated between), the last start of the first run:
    // the point just before the step starts allocating again.
    if (total < best_cost || (total == best_cost && start == best + 1 && tie_run)) {
      tie_run = true;
      best_cost = total;
      best = start;
    } else {
      tie_run = false;
    }
  }
  return best;
}

}  // namespace oversub::profiler
