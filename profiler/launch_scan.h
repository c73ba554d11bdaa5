// launch_scan: a launch's argument words, and the functions' parameter layouts.
//
// CUDA gives a launch's arguments as an array of pointers, one per parameter
// (kernelParams / args), or as one packed buffer (CU_LAUNCH_PARAM_BUFFER_POINTER);
// the layout (offset and size of each parameter in the packed form) comes from
// cudaFuncGetParamInfo / cuFuncGetParamInfo. Every 8-byte-aligned word of the
// packed form is a candidate pointer (framework kernels pass pointers inside
// structs by value), so the words are taken at every offset o with o % 8 == 0
// that lies wholly inside one parameter.
//
// function_cache keeps one layout, name and recorder id per function handle, so
// the layout query runs once per function. Plain C++, no CUDA.
#ifndef OVERSUB_PROFILER_LAUNCH_SCAN_H
#define OVERSUB_PROFILER_LAUNCH_SCAN_H

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "common/tracker.h"
#include "profiler/recorder.h"

namespace oversub::profiler {

struct param_slot {
  std::uint32_t offset = 0;  // bytes, in the packed form
  std::uint32_t size = 0;
};

struct function_info {
  std::uint32_t id = 0;              // recorder function id
  std::vector<param_slot> params;    // in parameter order
  // The layout could not be read (params empty), or not yet (a runtime error was
  // pending): the launch's buffers are unknown (Note [A launch whose buffers are not
  // known] in profiler/profile_format.h).
  bool unreadable = false;
};

// Most words one launch is scanned for: CUDA 12.1+ allows 32764 bytes of kernel
// parameters (4 KiB before), i.e. 4095 aligned words; a block past 32 KiB cannot be
// launched, so a scan is never cut short.
//
// Note [32 KB parameter blocks]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// Kernels in the style of multi_tensor_apply pass hundreds of tensor pointers by
// value, and a scan that stopped at 4 KiB would miss every buffer past it.
inline constexpr std::size_t max_param_bytes = 32768;
inline constexpr std::size_t max_scan_words = max_param_bytes / 8;

// The aligned words of a launch given per-parameter pointers; returns how many
// (at most max_scan_words) were written to words.
inline std::size_t gather_words(const std::vector<param_slot>& params, void* const* args,
                                std::uint64_t* words) {
  std::size_t n = 0;
  for (std::size_t i = 0; i < params.size(); ++i) {
    const param_slot& p = params[i];
    if (args[i] == nullptr) continue;
    const auto* bytes = static_cast<const unsigned char*>(args[i]);
    if (p.size == 8 && (p.offset & 7u) == 0) {  // a pointer or 64-bit scalar: one word
      if (n == max_scan_words) return n;
      std::memcpy(&words[n++], bytes, 8);
      continue;
    }
    for (std::uint32_t o = (p.offset + 7) & ~7u; o + 8 <= p.offset + p.size; o += 8) {
      if (n == max_scan_words) return n;
      std::memcpy(&words[n++], bytes + (o - p.offset), 8);
    }
  }
  return n;
}

// The same for a packed argument buffer of size bytes.
inline std::size_t gather_packed(const std::vector<param_slot>& params, const void* buffer,
                                 std::size_t size, std::uint64_t* words) {
  std::size_t n = 0;
  const auto* bytes = static_cast<const unsigned char*>(buffer);
  for (const param_slot& p : params) {
    for (std::uint32_t o = (p.offset + 7) & ~7u; o + 8 <= p.offset + p.size && o + 8 <= size;
         o += 8) {
      if (n == max_scan_words) return n;
      std::memcpy(&words[n++], bytes + o, 8);
    }
  }
  return n;
}

// The packed argument buffer of a cuLaunchKernel `extra` array and its size, or
// null (CU_LAUNCH_PARAM_BUFFER_POINTER = 1, CU_LAUNCH_PARAM_BUFFER_SIZE = 2,
// CU_LAUNCH_PARAM_END = 0; at most 32 pairs are read).
inline const void* packed_arguments(void* const* extra, std::size_t* size) {
  const void* buffer = nullptr;
  for (std::size_t i = 0; extra != nullptr && extra[i] != nullptr && i < 64; i += 2) {
    if (extra[i] == reinterpret_cast<void*>(1)) buffer = extra[i + 1];
    if (extra[i] == reinterpret_cast<void*>(2) && extra[i + 1] != nullptr) {
      *size = *static_cast<const std::size_t*>(extra[i + 1]);
    }
  }
  return buffer;
}

// Layouts and ids by handle. lookup() returns null for an unknown handle; the
// caller queries CUDA outside the lock and insert()s.
class function_cache {
 public:
  const function_info* lookup(const void* handle) const {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = by_handle_.find(handle);
    return it == by_handle_.end() ? nullptr : &it->second;
  }
  const function_info* insert(const void* handle, function_info info) {
    std::lock_guard<std::mutex> lock(mutex_);
    return &by_handle_.try_emplace(handle, std::move(info)).first->second;
  }

 private:
  mutable std::mutex mutex_;
  std::unordered_map<const void*, function_info> by_handle_;  // node-based: stable
};

// What one launch costs the profiler once its function is known: the argument
// words (per-parameter pointers args, else the packed buffer of size bytes), the
// live allocations they point into (one tracker lock), one record, marked when the
// function's layout is unreadable.
// The words and bases live per thread (64 KiB together: too much for the stack of a
// callback on an application thread).
inline void record_launch(const function_info& f, void* const* args, const void* packed,
                          std::size_t packed_bytes, const tracker& live, recorder& rec,
                          std::uint32_t correlation_id) {
  thread_local std::uint64_t words[max_scan_words];
  thread_local std::uint64_t bases[max_scan_words];
  std::size_t n = 0;
  if (args != nullptr) {
    n = gather_words(f.params, args, words);
  } else if (packed != nullptr) {
    n = gather_packed(f.params, packed, packed_bytes, words);
  }
  const std::size_t found = live.scan(words, n, bases);
  rec.on_launch(f.id, bases, found, correlation_id, f.unreadable);
}

}  // namespace oversub::profiler

#endif  // OVERSUB_PROFILER_LAUNCH_SCAN_H
