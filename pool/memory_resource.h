// The one interface every pool/ resource and adaptor implements (in the manner of
// RMM's device_memory_resource).
//
// Glossary (used across pool/):
//   resource   gets memory (vmm_arena);
//   adaptor    wraps an upstream resource and adds one concern (limiting_adaptor);
//   block      what allocate() hands out: an address and a byte count;
//   chunk      2 MiB of physical memory (the VMM granularity) mapped into a range;
//   range      a reserved stretch of virtual addresses the arena sub-allocates;
//   ticket     "the work stream S had enqueued when block b was freed" (an event on
//              S); a block is reused by other streams only once its tickets are done
//              (stream_fences.h).
//
// Contract: allocate(bytes, stream) returns a block of at least bytes, aligned to
// alignment_bytes, or an error and no memory; it never throws and never aborts.
// deallocate(ptr, bytes, stream) takes back a block from allocate of the same
// resource with the same bytes; stream is where the caller's last use is ordered
// (cudaFreeAsync's stream), or no_stream for a synchronous cudaFree (every stream
// that worked since the allocation may still use it).
#ifndef OVERSUB_POOL_MEMORY_RESOURCE_H
#define OVERSUB_POOL_MEMORY_RESOURCE_H

#include <cuda.h>

#include <cstddef>
#include <cstdint>

namespace oversub::pool {

inline constexpr std::size_t alignment_bytes = 256;  // as cudaMalloc

// The stream argument of a synchronous free (cudaFree): not a stream.
inline const CUstream no_stream = reinterpret_cast<CUstream>(~std::uintptr_t{0});

enum class pool_errc : std::uint8_t {
  ok,
  out_of_memory,    // the device (or upstream) has no room: cudaErrorMemoryAllocation
  over_budget,      // a configured budget (limit, OVERSUB_HOST_LIMIT) would be passed
  driver_missing,   // libcuda or one of its functions is unavailable
};

struct allocation_result {
  void* ptr = nullptr;
  pool_errc error = pool_errc::ok;
  explicit operator bool() const { return ptr != nullptr; }
};

// What a resource holds, in bytes and counts. reserved >= mapped >= used.
struct resource_stats {
  std::uint64_t reserved_bytes = 0;      // virtual address space reserved
  std::uint64_t mapped_bytes = 0;        // physical memory held (device or pinned host)
  std::uint64_t used_bytes = 0;          // handed out (aligned sizes)
  std::uint64_t peak_used_bytes = 0;
  std::uint64_t peak_mapped_bytes = 0;
  std::uint64_t largest_free_bytes = 0;  // largest block allocate() could serve without growing
  std::uint64_t live_blocks = 0;
  std::uint64_t allocations = 0;         // successful allocate() calls
  std::uint64_t failed_allocations = 0;
  std::uint64_t grows = 0;               // times memory was added (ranges, chunks)
  std::uint64_t trims = 0;               // chunks given back
  std::uint64_t syncs = 0;               // last-resort synchronisations
  std::uint64_t cross_stream_waits = 0;  // reuse refused until a ticket completed
};

class memory_resource {
 public:
  virtual ~memory_resource() = default;
  virtual allocation_result allocate(std::size_t bytes, CUstream stream) = 0;
  virtual void deallocate(void* ptr, std::size_t bytes, CUstream stream) = 0;
  virtual resource_stats stats() const = 0;
  // Gives back what is held but unused (chunks, host chunks); returns the bytes.
  virtual std::uint64_t trim() { return 0; }
};

constexpr std::size_t align_up(std::size_t n, std::size_t a) { return (n + a - 1) / a * a; }

}  // namespace oversub::pool

#endif  // OVERSUB_POOL_MEMORY_RESOURCE_H
