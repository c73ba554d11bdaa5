// Vector-clock race detection (see the Notes in race_detector.h).
#include "race_detector.h"

#include <algorithm>

namespace simgpu {

void vclock_join(vclock& a, const vclock& b) {
  if (a.size() < b.size()) a.resize(b.size(), 0);
  for (size_t i = 0; i < b.size(); ++i) a[i] = std::max(a[i], b[i]);
}

race_detector::race_detector() { clocks_.emplace_back(1, 0); }

int race_detector::add_timeline() {
  int t = static_cast<int>(clocks_.size());
  clocks_.emplace_back(static_cast<size_t>(t) + 1, 0);
  return t;
}

void race_detector::begin_op(int t) {
  vclock& c = clocks_[t];
  if (c.size() <= static_cast<size_t>(t)) c.resize(t + 1, 0);
  ++c[t];
}

void race_detector::join(int dst, int src) {
  if (dst == src) return;
  vclock_join(clocks_[dst], clocks_[src]);
}

void race_detector::join_clock(int dst, const vclock& c) { vclock_join(clocks_[dst], c); }

bool race_detector::ordered_before(const record& r, int t) const {
  const vclock& c = clocks_[t];
  return static_cast<size_t>(r.timeline) < c.size() && c[r.timeline] >= r.epoch;
}

std::string race_detector::describe(const record& r) {
  return std::string(r.write ? "write by " : "read by ") + *r.what;
}

void race_detector::access(int t, uint64_t key, uintptr_t lo, uintptr_t hi, bool write,
                           const std::shared_ptr<const std::string>& what,
                           std::vector<race_report>& out) {
  if (hi <= lo) return;
  auto& recs = history_[key];
  record mine{lo, hi, t, clocks_[t].size() > static_cast<size_t>(t) ? clocks_[t][t] : 0u,
              write, what};
  size_t keep = 0;
  for (size_t i = 0; i < recs.size(); ++i) {
    record& r = recs[i];
    if (ordered_before(r, kHost)) continue;  // see Note [Compact history] in tests/simgpu/driver/race_detector.h
    bool overlaps = r.lo < hi && lo < r.hi;
    if (overlaps && r.timeline != t && (r.write || write) && !ordered_before(r, t)) {
      out.push_back(race_report{std::max(lo, r.lo), std::min(hi, r.hi), describe(r),
                                describe(mine)});
    }
    bool superseded = r.timeline == t && lo <= r.lo && r.hi <= hi && (write || !r.write);
    if (superseded) continue;
    if (keep != i) recs[keep] = std::move(r);
    ++keep;
  }
  recs.resize(keep);
  recs.push_back(std::move(mine));
}

void race_detector::host_release(uint64_t key, uintptr_t lo, uintptr_t hi,
                                 const std::string& what, std::vector<race_report>& out) {
  auto it = history_.find(key);
  if (it == history_.end()) return;
  auto& recs = it->second;
  size_t keep = 0;
  for (size_t i = 0; i < recs.size(); ++i) {
    record& r = recs[i];
    if (r.lo < hi && lo < r.hi) {
      if (!ordered_before(r, kHost))
        out.push_back(race_report{std::max(lo, r.lo), std::min(hi, r.hi), describe(r), what});
      continue;  // the bytes are released: their history ends here
    }
    if (keep != i) recs[keep] = std::move(r);
    ++keep;
  }
  recs.resize(keep);
}

void race_detector::host_restrict(uint64_t key, uintptr_t lo, uintptr_t hi, bool forbid_reads,
                                  const std::string& what, std::vector<race_report>& out) {
  auto it = history_.find(key);
  if (it == history_.end()) return;
  auto& recs = it->second;
  size_t keep = 0;
  for (size_t i = 0; i < recs.size(); ++i) {
    record& r = recs[i];
    if (r.lo < hi && lo < r.hi && (r.write || forbid_reads) && !ordered_before(r, kHost)) {
      out.push_back(race_report{std::max(lo, r.lo), std::min(hi, r.hi), describe(r), what});
      continue;  // reported once
    }
    if (keep != i) recs[keep] = std::move(r);
    ++keep;
  }
  recs.resize(keep);
}

void race_detector::forget(uint64_t key) { history_.erase(key); }

size_t race_detector::records() const {
  size_t n = 0;
  for (const auto& [k, v] : history_) n += v.size();
  return n;
}

}  // namespace simgpu
