// The track-mode core (see tracker.h).
#include "common/tracker.h"

#include <algorithm>
#include <vector>

#include "common/log.h"
#include "common/stats.h"
#include "common/units.h"

namespace oversub {

tracker::tracker(device_limit limit) : configured_(limit) {
  std::uint64_t initial = 0;
  switch (limit.how) {
    case device_limit::kind::none: initial = no_limit; break;
    case device_limit::kind::bytes: initial = limit.bytes; break;
    case device_limit::kind::fraction: initial = 0; break;
  }
  for (int d = 0; d < max_devices; ++d) {
    limit_[d].store(initial, std::memory_order_relaxed);
    used_[d].store(0, std::memory_order_relaxed);
  }
}

bool tracker::needs_device_total(int device) const {
  return valid(device) && limit_[device].load(std::memory_order_acquire) == 0;
}

void tracker::set_device_total(int device, std::uint64_t total_bytes) {
  if (!needs_device_total(device)) return;
  std::uint64_t resolved = std::max<std::uint64_t>(1, configured_.resolve(total_bytes));
  std::uint64_t expected = 0;
  if (limit_[device].compare_exchange_strong(expected, resolved, std::memory_order_acq_rel)) {
    log::info("device {}: OVERSUB_DEVICE_LIMIT={} of {} is {}", device, configured_.fraction,
              format_bytes(total_bytes), format_bytes(resolved));
  }
}

std::uint64_t tracker::limit(int device) const {
  if (!valid(device)) return no_limit;
  std::uint64_t l = limit_[device].load(std::memory_order_acquire);
  return l == 0 ? no_limit : l;
}

std::uint64_t tracker::used(int device) const {
  return valid(device) ? used_[device].load(std::memory_order_relaxed) : 0;
}

bool tracker::reserve(int device, std::uint64_t bytes) {
  if (!valid(device)) return true;
  const std::uint64_t cap = limit(device);
  std::uint64_t now = used_[device].load(std::memory_order_relaxed);
  do {
    if (bytes > cap || now > cap - bytes) {
      stats::global().limit_refusals.count();
      return false;
    }
  } while (!used_[device].compare_exchange_weak(now, now + bytes, std::memory_order_relaxed));
  return true;
}

void tracker::release(int device, std::uint64_t bytes) {
  if (valid(device)) used_[device].fetch_sub(bytes, std::memory_order_relaxed);
}

void tracker::drop_gauges(const allocation& a) {
  stats::counters& s = stats::global();
  s.allocations.sub(1);
  if (a.kind == alloc_kind::managed) {
    s.managed_bytes.sub(a.bytes);
  } else {
    s.device_bytes.sub(a.bytes);
    release(a.device, a.bytes);
  }
}

void tracker::record(const allocation& a) {
  std::vector<allocation> displaced;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    live_.insert(a, &displaced);
  }
  stats::counters& s = stats::global();
  s.allocations.add(1);
  if (a.kind == alloc_kind::managed) {
    s.managed_bytes.add(a.bytes);
  } else {
    s.device_bytes.add(a.bytes);
  }
  for (const allocation& stale : displaced) {
    log::debug("dropping stale {} allocation at {:#x} ({} bytes): freed behind oversub",
               to_string(stale.kind), stale.base, stale.bytes);
    drop_gauges(stale);
  }
}

std::optional<allocation> tracker::forget(std::uintptr_t base) {
  std::optional<allocation> a;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    a = live_.erase(base);
  }
  if (a) {
    drop_gauges(*a);
    stats::global().frees.count();
  }
  return a;
}

std::optional<allocation> tracker::find(std::uintptr_t address) const {
  std::lock_guard<std::mutex> lock(mutex_);
  const allocation* a = live_.find(address);
  if (a == nullptr) return std::nullopt;
  return *a;
}

tracker::memory_info tracker::virtual_info(int device, memory_info real) const {
  const std::uint64_t cap = limit(device);
  if (cap == no_limit) return real;
  const std::uint64_t in_use = used(device);
  const std::uint64_t left = in_use >= cap ? 0 : cap - in_use;
  return memory_info{std::min(left, real.free_bytes), cap};
}

std::size_t tracker::live_count() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return live_.size();
}

std::size_t tracker::scan(const std::uint64_t* words, std::size_t count, std::uint64_t* bases,
                          std::uint64_t* sizes) const {
  std::lock_guard<std::mutex> lock(mutex_);
  return live_.scan(words, count, bases, sizes);
}

}  // namespace oversub
