// Launch durations and link figures from CUPTI (see launch_timing.h).
#include "profiler/launch_timing.h"

#include <algorithm>
#include <atomic>
#include <iterator>
#include <map>
#include <mutex>
#include <unordered_map>

#include "profiler/cupti_source.h"

namespace oversub::profiler::timing {

namespace {

constexpr std::size_t max_pending = std::size_t{1} << 17;    // bound ids awaiting a record
constexpr std::size_t max_durations = std::size_t{1} << 18;  // durations kept
// Mean copy size below which an unfitted direction gives no rate (a 4-byte readback
// takes the setup time alone).
constexpr std::uint64_t min_effective_copy_bytes = std::uint64_t{1} << 20;

// Least-squares sums of one direction's copies (x: bytes, y: ns).
struct fit_sums {
  std::uint64_t n = 0;
  double sx = 0, sy = 0, sxx = 0, sxy = 0;
  void add(double x, double y) {
    ++n;
    sx += x;
    sy += y;
    sxx += x * x;
    sxy += x * y;
  }
  direction_estimate estimate() const {
    direction_estimate e;
    e.copies = n;
    if (n == 0 || sy <= 0) return e;
    const double mx = sx / static_cast<double>(n);
    const double my = sy / static_cast<double>(n);
    const double var = sxx / static_cast<double>(n) - mx * mx;
    const double cov = sxy / static_cast<double>(n) - mx * my;
    // Sizes that differ by less than 10% cannot separate setup from rate.
    if (n >= 2 && var > (0.1 * mx) * (0.1 * mx)) {
      const double ns_per_byte = cov / var;
      const double setup = my - ns_per_byte * mx;
      if (ns_per_byte > 0 && setup >= 0) {
        e.bytes_per_s = 1e9 / ns_per_byte;
        e.setup_ns = static_cast<std::uint64_t>(setup);
        e.fitted = true;
        return e;
      }
    }
    // One size: the effective rate, if the copies are large enough for the setup
    // not to dominate; otherwise nothing is known of the rate.
    if (mx >= static_cast<double>(min_effective_copy_bytes)) {
      e.bytes_per_s = sx / sy * 1e9;
      e.mean_bytes = mx;
    }
    return e;
  }
};

thread_local std::uint64_t t_tag = no_tag;

class collector final : public cupti::sink {
 public:
  void runtime_launch(const void*, void**, std::uint32_t corr) override { bind(corr); }
  void driver_launch(void*, void**, void**, const char*, std::uint32_t corr) override {
    bind(corr);
  }
  void copy(copy_kind, std::uint64_t, const void*, const void*, std::uint32_t) override {}
  // The callbacks below run inside CUPTI: a failure to allocate drops the record.
  void kernel_time(std::uint32_t corr, std::uint64_t start_ns, std::uint64_t ns) override try {
    std::lock_guard<std::mutex> lock(mutex_);
    const auto it = pending_.find(corr);
    if (it == pending_.end()) return;
    if (durations_.size() >= max_durations) {
      durations_.erase(durations_.begin(), std::next(durations_.begin(),
                                                     static_cast<std::ptrdiff_t>(max_durations / 2)));
    }
    if (it->second >= floor_) durations_[it->second] = kernel{start_ns, ns};
    pending_.erase(it);
  } catch (...) {
  }
  void copy_time(std::uint32_t, copy_kind kind, std::uint64_t bytes, std::uint64_t ns,
                 bool host_pageable) override {
    if (host_pageable || bytes == 0 || ns == 0) return;
    if (kind != copy_kind::h2d && kind != copy_kind::d2h) return;
    std::lock_guard<std::mutex> lock(mutex_);
    (kind == copy_kind::h2d ? h2d_ : d2h_).add(static_cast<double>(bytes), static_cast<double>(ns));
  }

  std::size_t fill(std::uint64_t first, std::size_t n, std::uint64_t* out) {
    std::lock_guard<std::mutex> lock(mutex_);
    std::size_t known = 0;
    auto it = durations_.lower_bound(first);
    for (std::size_t i = 0; i < n; ++i) {
      while (it != durations_.end() && it->first < first + i) ++it;
      out[i] = it != durations_.end() && it->first == first + i ? it->second.ns : unknown;
      if (out[i] != unknown) ++known;
    }
    return known;
  }
  std::size_t starts(const std::uint64_t* tags, std::size_t n, std::uint64_t* out) {
    std::lock_guard<std::mutex> lock(mutex_);
    std::size_t known = 0;
    for (std::size_t i = 0; i < n; ++i) {
      const auto it = durations_.find(tags[i]);
      out[i] = it != durations_.end() ? it->second.start_ns : unknown;
      if (out[i] != unknown) ++known;
    }
    return known;
  }
  void forget_before(std::uint64_t first) {
    std::lock_guard<std::mutex> lock(mutex_);
    floor_ = std::max(floor_, first);
    durations_.erase(durations_.begin(), durations_.lower_bound(first));
  }
  link_estimate link() {
    std::lock_guard<std::mutex> lock(mutex_);
    link_estimate e{h2d_.estimate(), d2h_.estimate()};
    // One direction fitted, the other an effective rate: the other takes the fitted
    // setup and its rate is what is left (Note [Link figures from the engine's copies] in
    // profiler/launch_timing.h).
    const auto take_setup = [](direction_estimate& eff, const direction_estimate& fit) {
      if (eff.fitted || !fit.fitted || eff.bytes_per_s <= 0 || eff.mean_bytes <= 0) return;
      const double copy_ns = eff.mean_bytes / eff.bytes_per_s * 1e9;
      const auto setup = static_cast<double>(fit.setup_ns);
      if (copy_ns <= 2 * setup) return;  // the setup would be most of the copy: keep the rate
      eff.bytes_per_s = eff.mean_bytes / (copy_ns - setup) * 1e9;
      eff.setup_ns = fit.setup_ns;
      eff.fitted = true;
    };
    take_setup(e.h2d, e.d2h);
    take_setup(e.d2h, e.h2d);
    return e;
  }

 private:
  // See Note [Tagging launches] in profiler/launch_timing.h: CUPTI calls this at the
  // launch's API enter, on the thread that named the tag.
  void bind(std::uint32_t corr) try {
    const std::uint64_t tag = t_tag;
    if (tag == no_tag) return;
    t_tag = no_tag;
    std::lock_guard<std::mutex> lock(mutex_);
    if (pending_.size() >= max_pending) pending_.clear();  // records that never came
    pending_[corr] = tag;
  } catch (...) {
  }

  std::mutex mutex_;
  std::unordered_map<std::uint32_t, std::uint64_t> pending_;  // correlation id -> tag
  struct kernel {
    std::uint64_t start_ns = 0;  // CUPTI's clock
    std::uint64_t ns = 0;
  };
  std::map<std::uint64_t, kernel> durations_;                 // tag -> its kernel
  std::uint64_t floor_ = 0;
  fit_sums h2d_, d2h_;
};

collector& the_collector() {
  static collector* c = new collector;  // never destroyed: records may come during exit
  return *c;
}

std::mutex g_start_mutex;
std::atomic<source> g_source{source::off};
std::string g_detail;  // under g_start_mutex

}  // namespace

const char* to_string(source s) noexcept {
  switch (s) {
    case source::off: return "off";
    case source::cupti: return "cupti";
    case source::held: return "held";
    case source::unavailable: return "unavailable";
  }
  return "off";
}

source start(std::string* detail) noexcept {
  try {
    std::lock_guard<std::mutex> lock(g_start_mutex);
    if (g_source.load(std::memory_order_relaxed) == source::off) {
      source s = source::unavailable;
      switch (cupti::subscribe(&the_collector(), &g_detail)) {
        case cupti::outcome::subscribed: s = source::cupti; break;
        case cupti::outcome::held: s = source::held; break;
        case cupti::outcome::unavailable: s = source::unavailable; break;
      }
      g_source.store(s, std::memory_order_release);
    }
    *detail = g_detail;
  } catch (...) {
    g_source.store(source::unavailable, std::memory_order_release);
  }
  return g_source.load(std::memory_order_acquire);
}

source current() noexcept { return g_source.load(std::memory_order_acquire); }

void tag_next_launch(std::uint64_t tag) noexcept { t_tag = tag; }

std::size_t durations(std::uint64_t first, std::size_t n, std::uint64_t* out) noexcept {
  if (current() != source::cupti) {
    for (std::size_t i = 0; i < n; ++i) out[i] = unknown;
    return 0;
  }
  cupti::flush();
  return the_collector().fill(first, n, out);
}

std::size_t kernel_starts(const std::uint64_t* tags, std::size_t n, std::uint64_t* out) noexcept {
  if (current() != source::cupti) {
    for (std::size_t i = 0; i < n; ++i) out[i] = unknown;
    return 0;
  }
  cupti::flush();
  return the_collector().starts(tags, n, out);
}

bool rest(bool resting) noexcept {
  if (current() != source::cupti) return false;
  return cupti::rest(&the_collector(), resting);
}

void forget_before(std::uint64_t first) noexcept {
  if (current() != source::cupti) return;
  the_collector().forget_before(first);
}

link_estimate link() noexcept {
  if (current() != source::cupti) return {};
  return the_collector().link();
}

}  // namespace oversub::profiler::timing
