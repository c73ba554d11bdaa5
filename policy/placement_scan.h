// The scan at the heart of the planner (placement.cc): the buffers placed so far,
// in offset order, and the search for the gap a new buffer goes into. Internal to
// policy/; split out of placement.cc to keep each file readable in one sitting.
#ifndef OVERSUB_POLICY_PLACEMENT_SCAN_H
#define OVERSUB_POLICY_PLACEMENT_SCAN_H

#include <algorithm>
#include <array>
#include <bit>
#include <cstdint>
#include <limits>
#include <vector>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

namespace oversub::policy::detail {

using offset_t = std::uint64_t;

struct item {
  offset_t size;       // aligned bytes
  std::uint32_t begin; // compressed time, live on [begin, end)
  std::uint32_t end;
};

enum class gap_rule : std::uint8_t { best_fit, first_fit };

// Note [Scanning the placed buffers]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// Finding a gap needs the placed buffers whose lifetimes overlap the new one, in
// offset order. Collecting and sorting them costs more than scanning all placed
// buffers in offset order and skipping the others, so we scan; what makes the scan
// cheap is skipping whole runs. The placed buffers sit in blocks of consecutive
// offsets (at most kBlockMax each, split when full, so an insertion moves few
// entries); each block keeps the union of its buffers' lifetimes as a mask over
// kTimeBuckets buckets of time, and a block whose mask misses the new buffer's
// buckets holds nothing it overlaps. In training traces most buffers live for a
// few steps, so most blocks are skipped.
class placed_set {
 public:
  explicit placed_set(std::uint32_t steps) : steps_(std::max<std::uint32_t>(steps, 1)) {}

  // Where a buffer of size bytes live on [begin, end) goes under rule.
  offset_t find(offset_t size, std::uint32_t begin, std::uint32_t end, gap_rule rule) {
    const time_mask want = mask_of(begin, end);
    offset_t cursor = 0;  // the highest end of the overlapping buffers seen so far
    offset_t best = kNone;
    offset_t best_gap = std::numeric_limits<offset_t>::max();
    work_ += blocks_.size() / 8;
    for (const block& b : blocks_) {
      if (!intersects(b.mask, want)) continue;
      work_ += b.count;
      for (std::uint64_t live = b.overlapping(begin, end); live != 0; live &= live - 1) {
        const int i = std::countr_zero(live);
        if (b.off[i] > cursor) {
          const offset_t gap = b.off[i] - cursor;
          if (gap >= size && gap < best_gap) {
            best = cursor;
            best_gap = gap;
            if (rule == gap_rule::first_fit || gap == size) return best;
          }
        }
        cursor = std::max(cursor, b.top[i]);
      }
    }
    return best == kNone ? cursor : best;
  }

  std::uint64_t work() const { return work_; }

  void insert(offset_t offset, offset_t size, std::uint32_t begin, std::uint32_t end) {
    if (blocks_.empty()) blocks_.emplace_back();
    // The last block whose first offset is <= offset (or the first block).
    auto it = std::upper_bound(blocks_.begin(), blocks_.end(), offset,
                               [](offset_t o, const block& b) { return o < b.off[0]; });
    if (it != blocks_.begin()) --it;
    if (it->count == kBlockMax) {  // split in halves, then insert into the right one
      block upper;
      it->move_upper_half_to(upper);
      it->mask = mask_of(*it);
      upper.mask = mask_of(upper);
      const bool right = offset >= upper.off[0];
      it = blocks_.insert(it + 1, upper) - (right ? 0 : 1);
    }
    it->insert(offset, offset + size, begin, end);
    add(it->mask, mask_of(begin, end));
  }

 private:
  static constexpr offset_t kNone = std::numeric_limits<offset_t>::max();
  static constexpr std::size_t kBlockMax = 64;
  static constexpr std::uint32_t kTimeBuckets = 256;
  using time_mask = std::array<std::uint64_t, kTimeBuckets / 64>;

  // Up to kBlockMax placed buffers with consecutive offsets, as parallel arrays so
  // that the lifetime test over a whole block compiles to a few vector compares.
  struct block {
    offset_t off[kBlockMax]{};
    offset_t top[kBlockMax]{};
    std::uint32_t begin[kBlockMax]{};
    std::uint32_t end[kBlockMax]{};
    std::uint32_t count = 0;
    time_mask mask{};

    // Bit i set when buffer i is live somewhere in [b, e). Compressed times are
    // below 2^31, so the signed SSE2 compares are exact.
    std::uint64_t overlapping(std::uint32_t b, std::uint32_t e) const {
      std::uint64_t bits = 0;
#if defined(__SSE2__)
      const __m128i vb = _mm_set1_epi32(static_cast<int>(b));
      const __m128i ve = _mm_set1_epi32(static_cast<int>(e));
      for (std::uint32_t i = 0; i < count; i += 4) {
        const __m128i bs = _mm_loadu_si128(reinterpret_cast<const __m128i*>(begin + i));
        const __m128i es = _mm_loadu_si128(reinterpret_cast<const __m128i*>(end + i));
        const __m128i hit = _mm_and_si128(_mm_cmplt_epi32(bs, ve), _mm_cmpgt_epi32(es, vb));
        bits |= static_cast<std::uint64_t>(_mm_movemask_ps(_mm_castsi128_ps(hit))) << i;
      }
#else
      for (std::uint32_t i = 0; i < count; ++i) {
        bits |= std::uint64_t{begin[i] < e && end[i] > b} << i;
      }
#endif
      return count == kBlockMax ? bits : bits & ((std::uint64_t{1} << count) - 1);
    }
    void insert(offset_t o, offset_t t, std::uint32_t b, std::uint32_t e) {
      const std::size_t pos = static_cast<std::size_t>(std::upper_bound(off, off + count, o) - off);
      std::copy_backward(off + pos, off + count, off + count + 1);
      std::copy_backward(top + pos, top + count, top + count + 1);
      std::copy_backward(begin + pos, begin + count, begin + count + 1);
      std::copy_backward(end + pos, end + count, end + count + 1);
      off[pos] = o;
      top[pos] = t;
      begin[pos] = b;
      end[pos] = e;
      ++count;
    }
    void move_upper_half_to(block& upper) {
      const std::uint32_t keep = count / 2;
      upper.count = count - keep;
      std::copy(off + keep, off + count, upper.off);
      std::copy(top + keep, top + count, upper.top);
      std::copy(begin + keep, begin + count, upper.begin);
      std::copy(end + keep, end + count, upper.end);
      count = keep;
    }
  };

  time_mask mask_of(std::uint32_t begin, std::uint32_t end) const {
    const std::uint64_t first = std::uint64_t{begin} * kTimeBuckets / steps_;
    const std::uint64_t last = std::uint64_t{end - 1} * kTimeBuckets / steps_;
    time_mask m{};
    for (std::size_t w = 0; w < m.size(); ++w) {
      const std::uint64_t lo = std::max<std::uint64_t>(first, w * 64);
      const std::uint64_t hi = std::min<std::uint64_t>(last, w * 64 + 63);
      if (lo > hi) continue;
      const std::uint64_t bits = hi - lo + 1;
      const std::uint64_t ones = bits == 64 ? ~std::uint64_t{0} : (std::uint64_t{1} << bits) - 1;
      m[w] = ones << (lo - w * 64);
    }
    return m;
  }
  time_mask mask_of(const block& b) const {
    time_mask m{};
    for (std::uint32_t i = 0; i < b.count; ++i) add(m, mask_of(b.begin[i], b.end[i]));
    return m;
  }
  static void add(time_mask& m, const time_mask& x) {
    for (std::size_t w = 0; w < m.size(); ++w) m[w] |= x[w];
  }
  static bool intersects(const time_mask& a, const time_mask& b) {
    std::uint64_t any = 0;
    for (std::size_t w = 0; w < a.size(); ++w) any |= a[w] & b[w];
    return any != 0;
  }

  std::uint32_t steps_;
  std::vector<block> blocks_;
  std::uint64_t work_ = 0;
};

}  // namespace oversub::policy::detail

#endif  // OVERSUB_POLICY_PLACEMENT_SCAN_H
