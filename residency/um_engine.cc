// The managed-memory backend (see um_engine.h).
#include "residency/um_engine.h"

#include <algorithm>
#include <vector>

#include <fmt/format.h>

#include "common/log.h"
#include "pool/driver_api.h"

namespace oversub::residency {

namespace {

CUmemLocation device_location(int device) {
  CUmemLocation l{};
  l.type = CU_MEM_LOCATION_TYPE_DEVICE;
  l.id = device;
  return l;
}

CUmemLocation host_location() {
  CUmemLocation l{};
  l.type = CU_MEM_LOCATION_TYPE_HOST;
  l.id = 0;
  return l;
}

}  // namespace

um_engine::um_engine(int device, std::uint64_t capacity_bytes, bool naive)
    : backend_with_stats(capacity_bytes), device_(device), naive_(naive) {}

void um_engine::detect_locked() {
  if (detected_) return;
  detected_ = true;
  int concurrent = 0;
  CUdevice dev = 0;
  const pool::driver_table& d = pool::driver();
  if (d.cuDeviceGet(&dev, device_) == CUDA_SUCCESS &&
      d.cuDeviceGetAttribute(&concurrent, CU_DEVICE_ATTRIBUTE_CONCURRENT_MANAGED_ACCESS, dev) ==
          CUDA_SUCCESS &&
      concurrent == 0) {
    stats_.concurrent_access = false;
    log::warn("OVERSUB_MODE=um: device {} has no concurrent managed access (a GPU before "
              "Pascal, or the platform does not allow it): no demand paging and no prefetch "
              "to the device; each launch migrates the managed allocations it uses. "
              "OVERSUB_MODE=swap moves memory on such devices.",
              device_);
  }
}

pool::allocation_result um_engine::allocate(std::size_t bytes) {
  std::lock_guard<std::mutex> lock(mutex_);
  const pool::driver_table& d = pool::driver();
  if (!d.complete) return {nullptr, pool::pool_errc::driver_missing};
  detect_locked();
  CUdeviceptr p = 0;
  if (auto c = cached_.find(bytes); c != cached_.end() && !c->second.empty()) {
    // See Note [Reused managed buffers] in residency/um_engine.h: the lowest address of
    // this size.
    p = *c->second.begin();
    c->second.erase(c->second.begin());
    cached_bytes_ -= bytes;
    buffers_.emplace(p, buffer{bytes, false, ++tick_, 0, nullptr});
    ++stats_.buffers;
    return {reinterpret_cast<void*>(p), pool::pool_errc::ok};
  }
  if (d.cuMemAllocManaged(&p, bytes, CU_MEM_ATTACH_GLOBAL) != CUDA_SUCCESS) {
    return {nullptr, pool::pool_errc::out_of_memory};
  }
  // The device keeps a mapping of the pages wherever they are, so an access we did
  // not prefetch for needs no new mapping.
  if (!naive_) d.cuMemAdvise(p, bytes, CU_MEM_ADVISE_SET_ACCESSED_BY, device_location(device_));
  buffers_.emplace(p, buffer{bytes, false, ++tick_, 0, nullptr});
  ++stats_.buffers;
  return {reinterpret_cast<void*>(p), pool::pool_errc::ok};
}

bool um_engine::deallocate(void* ptr) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = buffers_.find(reinterpret_cast<std::uintptr_t>(ptr));
  if (it == buffers_.end()) return false;
  if (it->second.on_device) stats_.resident_bytes -= it->second.bytes;
  // As cuMemFree of managed memory would, wait until no queued work can still use
  // it; then keep it for the next allocation of its size (Note [Reused managed
  // buffers] in residency/um_engine.h). Its bytes are dead: where its pages are no longer
  // matters.
  const pool::driver_table& d = pool::driver();
  d.cuCtxSynchronize();
  if (naive_) {
    d.cuMemFree(it->first);
  } else {
    cached_[it->second.bytes].insert(it->first);
    cached_bytes_ += it->second.bytes;
  }
  buffers_.erase(it);
  --stats_.buffers;
  return true;
}

std::vector<std::uintptr_t> um_engine::buffers_of_locked(
    std::span<const byte_range> ranges) const {
  std::vector<std::uintptr_t> out;
  for (const byte_range& r : ranges) {
    if (r.bytes == 0 || r.optional || buffers_.empty()) continue;
    auto it = buffers_.upper_bound(r.addr);
    if (it != buffers_.begin()) --it;
    for (; it != buffers_.end() && it->first < r.addr + r.bytes; ++it) {
      if (it->first + it->second.bytes > r.addr) out.push_back(it->first);
    }
  }
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

// waiter's later work after everything producer has queued so far.
CUresult um_engine::order_after_locked(CUstream waiter, CUstream producer) {
  const pool::driver_table& d = pool::driver();
  // See Note [No moves while a user captures] in residency/swap_engine.h: waiting on an
  // event recorded in a capture would make the waiter join it.
  if (pool::stream_is_capturing(producer)) return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
  CUevent& e = stream_events_[producer];
  if (e == nullptr && d.cuEventCreate(&e, CU_EVENT_DISABLE_TIMING) != CUDA_SUCCESS) {
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  if (CUresult r = d.cuEventRecord(e, producer); r != CUDA_SUCCESS) return r;
  return d.cuStreamWaitEvent(waiter, e, 0);
}

// One prefetch of a whole buffer on stream, after the stream that used it last.
CUresult um_engine::move_locked(std::uintptr_t base, buffer& b, bool to_device,
                                        CUstream stream) {
  const pool::driver_table& d = pool::driver();
  if (b.used && b.last_stream != stream) {
    if (CUresult r = order_after_locked(stream, b.last_stream); r != CUDA_SUCCESS) return r;
  }
  const CUmemLocation where = to_device ? device_location(device_) : host_location();
  if (CUresult r = d.cuMemPrefetchAsync(base, b.bytes, where, 0, stream); r != CUDA_SUCCESS) {
    return r;
  }
  b.on_device = to_device;
  b.last_stream = stream;
  b.used = true;
  if (to_device) {
    stats_.resident_bytes += b.bytes;
    stats_.peak_resident_bytes = std::max(stats_.peak_resident_bytes, stats_.resident_bytes);
    ++stats_.prefetches_in;
    stats_.bytes_in += b.bytes;
  } else {
    stats_.resident_bytes -= b.bytes;
    ++stats_.prefetches_out;
    stats_.bytes_out += b.bytes;
  }
  return CUDA_SUCCESS;
}

prepare_result um_engine::prepare(std::span<const byte_range> ranges, CUstream stream,
                                          bool) {
  std::lock_guard<std::mutex> lock(mutex_);
  prepare_result result;
  if (naive_ || buffers_.empty() || !stats_.concurrent_access) return result;
  // A capturing stream's work runs at replay: nothing is enqueued for it now (a wait
  // on another stream's work would break the capture's isolation); the driver pages
  // its memory on demand when the graph runs.
  if (pool::stream_is_capturing(stream)) return result;
  // Note [Large managed buffers]
  // ~~~~~~~~~~~~~~~~~~~~~~~~~~~~
  // The driver pages managed memory on demand, so
  // nothing has to be refused here. A buffer larger than a quarter of the capacity (a
  // caching allocator's segment) is left to demand paging rather than prefetched
  // whole, and so are the best-effort windows; what remains is prefetched while it
  // fits.
  std::vector<std::uintptr_t> wanted;
  for (std::uintptr_t base : buffers_of_locked(ranges)) {
    if (buffers_[base].bytes > capacity_bytes() / 4) continue;
    if (result.needed_bytes + buffers_[base].bytes > capacity_bytes()) break;
    result.needed_bytes += buffers_[base].bytes;
    wanted.push_back(base);
  }
  const std::uint64_t epoch = ++epoch_;
  for (std::uintptr_t base : wanted) buffers_[base].pinned = epoch;
  for (std::uintptr_t base : wanted) {
    buffer& b = buffers_[base];
    b.last_use = ++tick_;
    if (b.on_device && b.used && b.last_stream == to_device_ && to_device_ != nullptr &&
        stream != to_device_) {
      // Fetched ahead by the schedule (Note [um follows the schedule] in
      // residency/um_engine.h): the work waits for that prefetch, not for the driver to
      // page it in under the kernel.
      if (CUresult r = order_after_locked(stream, to_device_); r != CUDA_SUCCESS) {
        result.code = residency_errc::driver_error;
        result.driver = r;
        return result;
      }
    }
    if (!b.on_device) {
      // Room first: the least recently used unpinned buffers go to the host.
      while (stats_.resident_bytes + b.bytes > capacity_bytes()) {
        std::uintptr_t victim = 0;
        buffer* vb = nullptr;
        for (auto& [vbase, x] : buffers_) {
          if (!x.on_device || x.pinned == epoch) continue;
          if (vb == nullptr || x.last_use < vb->last_use) {
            victim = vbase;
            vb = &x;
          }
        }
        if (vb == nullptr) break;  // the driver pages the rest on demand
        if (CUresult r = move_locked(victim, *vb, false, stream); r != CUDA_SUCCESS) {
          result.code = residency_errc::driver_error;
          result.driver = r;
          return result;
        }
      }
      if (CUresult r = move_locked(base, b, true, stream); r != CUDA_SUCCESS) {
        result.code = residency_errc::driver_error;
        result.driver = r;
        return result;
      }
    }
    b.last_stream = stream;
    b.used = true;
  }
  ++epoch_;  // nothing stays pinned
  return result;
}

bool um_engine::ensure_streams_locked() {
  if (to_host_ != nullptr) return true;
  if (streams_broken_) return false;
  const pool::driver_table& d = pool::driver();
  if (!d.complete || d.cuStreamCreate(&to_host_, CU_STREAM_NON_BLOCKING) != CUDA_SUCCESS ||
      d.cuStreamCreate(&to_device_, CU_STREAM_NON_BLOCKING) != CUDA_SUCCESS) {
    streams_broken_ = true;
    to_host_ = to_device_ = nullptr;
    return false;
  }
  return true;
}

bool um_engine::evict(std::span<const byte_range> ranges) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (naive_ || buffers_.empty() || !stats_.concurrent_access) return true;
  if (!ensure_streams_locked()) return false;
  for (std::uintptr_t base : buffers_of_locked(ranges)) {
    buffer& b = buffers_[base];
    if (!b.on_device || b.bytes > capacity_bytes() / 4) continue;
    if (move_locked(base, b, false, to_host_) != CUDA_SUCCESS) return false;
  }
  return true;
}

bool um_engine::prefetch_now(std::span<const byte_range> ranges,
                                     std::vector<byte_range>& later, const victim_rank&) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (naive_ || buffers_.empty() || !stats_.concurrent_access) return true;
  if (!ensure_streams_locked()) return false;
  for (std::uintptr_t base : buffers_of_locked(ranges)) {
    buffer& b = buffers_[base];
    if (b.on_device || b.bytes > capacity_bytes() / 4) continue;
    if (stats_.resident_bytes + b.bytes > capacity_bytes()) {
      later.push_back(byte_range{base, b.bytes});
      continue;
    }
    if (move_locked(base, b, true, to_device_) != CUDA_SUCCESS) return false;
  }
  return true;
}

void write_report(int device, std::uint64_t capacity_bytes, const um_stats& m,
                  stats::section& out) {
  // concurrent_access no: the device has no concurrent managed access, so nothing is
  // prefetched.
  out.begin(fmt::format("um device {}", device), {fmt::format("device{}", device), "um"})
      .bytes("capacity_bytes", capacity_bytes)
      .count("buffers", m.buffers)
      .bytes("resident_bytes", m.resident_bytes)
      .bytes("peak_resident_bytes", m.peak_resident_bytes)
      .count("prefetches_in", m.prefetches_in)
      .count("prefetches_out", m.prefetches_out)
      .bytes("bytes_in", m.bytes_in)
      .bytes("bytes_out", m.bytes_out)
      .flag("concurrent_access", m.concurrent_access);
}

}  // namespace oversub::residency
