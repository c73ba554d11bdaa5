// tracker: the core behind the hooks in track mode. Plain C++ types, no CUDA.
//
// It owns the allocation_map of live allocations and the virtual capacity per
// device (OVERSUB_DEVICE_LIMIT). The interposer calls it around each real call:
//
//   - reserve(device, bytes) before a device allocation: false means the
//     allocation would pass the limit, and the hook returns
//     cudaErrorMemoryAllocation without calling CUDA;
//   - record(allocation) once the real call succeeded, release() if it failed;
//   - forget(base) before a real free: the bytes are released and the entry gone;
//     nullopt means "not ours" and the free is forwarded untouched;
//   - virtual_info() turns the real cudaMemGetInfo answer into the virtual one.
//
// Note [Reserve before allocate]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// The bytes are taken from the budget before the
// real call, with a compare-and-swap on the device's used counter, so two threads
// cannot both pass the check and together exceed the limit; a failed real call
// gives them back. The map itself is under one mutex, never held across a CUDA
// call, so a fork can never find it held by a thread that is inside CUDA.
//
// Managed allocations are tracked (argument scanning needs them) but not counted
// against the device limit: the driver pages them, they can exceed the device.
#ifndef OVERSUB_COMMON_TRACKER_H
#define OVERSUB_COMMON_TRACKER_H

#include <atomic>
#include <cstdint>
#include <mutex>
#include <optional>

#include "common/allocation_map.h"
#include "common/options.h"

namespace oversub {

class tracker {
 public:
  static constexpr int max_devices = 64;
  static constexpr std::uint64_t no_limit = ~std::uint64_t{0};

  explicit tracker(device_limit limit);

  // True while the limit of device is a fraction not yet resolved against the
  // device's real total memory.
  bool needs_device_total(int device) const;
  void set_device_total(int device, std::uint64_t total_bytes);

  // Takes bytes of device's virtual capacity. False (and a limit_refusals count)
  // when that would pass the limit; nothing is taken then.
  bool reserve(int device, std::uint64_t bytes);
  void release(int device, std::uint64_t bytes);

  // Records a successful allocation. For kinds counted against the limit its bytes
  // must have been reserved. Stale entries it overlaps are dropped.
  void record(const allocation& a);

  // Removes the allocation based exactly at base and gives its bytes back.
  std::optional<allocation> forget(std::uintptr_t base);

  // The allocation containing address.
  std::optional<allocation> find(std::uintptr_t address) const;

  // The bases of the live allocations the words point into, under one lock, and with
  // sizes their sizes (allocation_map::scan: Note [Scanning argument words] in
  // common/allocation_map.h; the argument scanning of profiling and swap modes).
  std::size_t scan(const std::uint64_t* words, std::size_t count, std::uint64_t* bases,
                   std::uint64_t* sizes = nullptr) const;

  struct memory_info {
    std::uint64_t free_bytes = 0;
    std::uint64_t total_bytes = 0;
  };
  // What cudaMemGetInfo reports on device given the real answer: with a limit,
  // total = limit and free = min(limit - used, real free); else the real answer.
  memory_info virtual_info(int device, memory_info real) const;

  std::uint64_t used(int device) const;
  // The device's limit in bytes; no_limit when none is set or not yet resolved.
  std::uint64_t limit(int device) const;
  std::size_t live_count() const;

  static bool counts_against_limit(alloc_kind k) { return k != alloc_kind::managed; }

 private:
  static bool valid(int device) { return device >= 0 && device < max_devices; }
  void drop_gauges(const allocation& a);

  device_limit configured_;
  std::atomic<std::uint64_t> limit_[max_devices];  // 0: unresolved fraction
  std::atomic<std::uint64_t> used_[max_devices];   // bytes counted against the limit
  mutable std::mutex mutex_;
  allocation_map live_;
};

}  // namespace oversub

#endif  // OVERSUB_COMMON_TRACKER_H
