// limiting_adaptor: an upstream resource with at most limit_bytes handed out at once
// (sizes counted aligned to 256). Past the limit, allocate returns out_of_memory
// without asking the upstream — the way the tests force an out-of-memory, and the
// shape of a per-job budget.
#ifndef OVERSUB_POOL_LIMITING_ADAPTOR_H
#define OVERSUB_POOL_LIMITING_ADAPTOR_H

#include <atomic>

#include "pool/memory_resource.h"

namespace oversub::pool {

class limiting_adaptor final : public memory_resource {
 public:
  limiting_adaptor(memory_resource& upstream, std::uint64_t limit_bytes)
      : upstream_(upstream), limit_(limit_bytes) {}

  allocation_result allocate(std::size_t bytes, CUstream stream) override {
    const std::uint64_t size = align_up(bytes == 0 ? 1 : bytes, alignment_bytes);
    std::uint64_t used = used_.load(std::memory_order_relaxed);
    do {
      if (used + size > limit_) {
        refused_.fetch_add(1, std::memory_order_relaxed);
        return {nullptr, pool_errc::out_of_memory};
      }
    } while (!used_.compare_exchange_weak(used, used + size, std::memory_order_relaxed));
    allocation_result r = upstream_.allocate(bytes, stream);
    if (!r) used_.fetch_sub(size, std::memory_order_relaxed);
    return r;
  }

  void deallocate(void* ptr, std::size_t bytes, CUstream stream) override {
    upstream_.deallocate(ptr, bytes, stream);
    used_.fetch_sub(align_up(bytes == 0 ? 1 : bytes, alignment_bytes), std::memory_order_relaxed);
  }

  resource_stats stats() const override {
    resource_stats s = upstream_.stats();
    s.failed_allocations += refused_.load(std::memory_order_relaxed);
    return s;
  }

  std::uint64_t trim() override { return upstream_.trim(); }

  std::uint64_t limit_bytes() const { return limit_; }
  std::uint64_t used_bytes() const { return used_.load(std::memory_order_relaxed); }

 private:
  memory_resource& upstream_;
  const std::uint64_t limit_;
  std::atomic<std::uint64_t> used_{0};
  std::atomic<std::uint64_t> refused_{0};
};

}  // namespace oversub::pool

#endif  // OVERSUB_POOL_LIMITING_ADAPTOR_H
