// The typed conformance suite: every pool/ resource and adaptor passes the same
// tests (in the manner of RMM's): alignment, no overlap of live blocks under random
// allocate/deallocate sequences (checked against an interval map, and by writing and
// reading the memory), out-of-memory returns the right code and leaves the resource
// usable, statistics add up. Runs on simgpu (the device resources need a driver).
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <random>

#include "pool/host_memory.h"
#include "pool/limiting_adaptor.h"
#include "pool/planned_region.h"
#include "pool/vmm_arena.h"

namespace oversub::pool {
namespace {

constexpr std::size_t MiB = std::size_t{1} << 20;

struct arena_env {
  static constexpr std::uint64_t capacity = 0;  // no limit of its own
  vmm_arena arena{vmm_arena_config{0, 256 * MiB, 8 * MiB}};
  memory_resource& resource() { return arena; }
};

struct limited_env {
  static constexpr std::uint64_t capacity = 48 * MiB;
  vmm_arena arena{vmm_arena_config{0, 256 * MiB, 8 * MiB}};
  limiting_adaptor limited{arena, capacity};
  memory_resource& resource() { return limited; }
};

struct planned_env {
  static constexpr std::uint64_t capacity = 0;
  vmm_arena arena{vmm_arena_config{0, 256 * MiB, 8 * MiB}};
  planned_region planned{arena};
  memory_resource& resource() { return planned; }
};

template <typename Env>
class ResourceConformance : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { ASSERT_EQ(cudaFree(nullptr), cudaSuccess); }
  void TearDown() override { ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess); }

  // Fills the block with value and reads its first and last byte back.
  void write_and_check(void* p, std::size_t bytes, unsigned char value) {
    unsigned char first = 0;
    unsigned char last = 0;
    ASSERT_EQ(cudaMemset(p, value, bytes), cudaSuccess);
    ASSERT_EQ(cudaMemcpy(&first, p, 1, cudaMemcpyDeviceToHost), cudaSuccess);
    ASSERT_EQ(cudaMemcpy(&last, static_cast<char*>(p) + bytes - 1, 1, cudaMemcpyDeviceToHost),
              cudaSuccess);
    EXPECT_EQ(first, value);
    EXPECT_EQ(last, value);
  }

  std::unique_ptr<Env> env_ = std::make_unique<Env>();
};

using resource_types = ::testing::Types<arena_env, limited_env, planned_env>;
TYPED_TEST_SUITE(ResourceConformance, resource_types);

TYPED_TEST(ResourceConformance, AlignedAndUsable) {
  memory_resource& r = this->env_->resource();
  std::vector<std::pair<void*, std::size_t>> blocks;
  for (std::size_t bytes : {std::size_t{1}, std::size_t{100}, std::size_t{256}, std::size_t{257},
                            std::size_t{4099}, MiB + 3, 3 * MiB, 9 * MiB}) {
    allocation_result a = r.allocate(bytes, nullptr);
    ASSERT_TRUE(a) << bytes;
    EXPECT_EQ(reinterpret_cast<std::uintptr_t>(a.ptr) % alignment_bytes, 0u) << bytes;
    this->write_and_check(a.ptr, bytes, static_cast<unsigned char>(bytes));
    blocks.emplace_back(a.ptr, bytes);
  }
  for (auto [p, bytes] : blocks) r.deallocate(p, bytes, nullptr);
}

TYPED_TEST(ResourceConformance, RandomSequenceNeverOverlaps) {
  memory_resource& r = this->env_->resource();
  std::mt19937_64 rng(1234);
  std::map<std::uintptr_t, std::size_t> live;  // interval map: base -> bytes
  const std::size_t sizes[] = {256, 512, 3000, 65536, 200000, MiB, 2 * MiB + 256, 10 * MiB};
  std::size_t live_bytes = 0;  // kept under 64 MiB: the test device has 256 MiB
  for (int step = 0; step < 1500; ++step) {
    if (live.empty() || (rng() % 5 < 3 && live_bytes < 64 * MiB)) {
      const std::size_t bytes = sizes[rng() % std::size(sizes)] + rng() % 4 * 256;
      allocation_result a = r.allocate(bytes, nullptr);
      if (!a) {
        ASSERT_NE(TypeParam::capacity, 0u) << "a resource without a limit ran out at step " << step;
        continue;
      }
      const auto base = reinterpret_cast<std::uintptr_t>(a.ptr);
      auto next = live.lower_bound(base);
      ASSERT_TRUE(next == live.end() || next->first >= base + bytes) << "overlap at " << step;
      if (next != live.begin()) {
        auto prev = std::prev(next);
        ASSERT_LE(prev->first + prev->second, base) << "overlap at " << step;
      }
      live[base] = bytes;
      live_bytes += bytes;
      if (step % 97 == 0) this->write_and_check(a.ptr, bytes, static_cast<unsigned char>(step));
    } else {
      auto it = live.begin();
      std::advance(it, static_cast<long>(rng() % live.size()));
      r.deallocate(reinterpret_cast<void*>(it->first), it->second, nullptr);
      live_bytes -= it->second;
      live.erase(it);
    }
  }
  const resource_stats s = r.stats();
  EXPECT_EQ(s.live_blocks, live.size());
  for (auto [base, bytes] : live) r.deallocate(reinterpret_cast<void*>(base), bytes, nullptr);
}

TYPED_TEST(ResourceConformance, OutOfMemoryIsACleanError) {
  memory_resource& r = this->env_->resource();
  allocation_result big = r.allocate(std::size_t{1} << 42, nullptr);  // 4 TiB
  EXPECT_FALSE(big);
  EXPECT_TRUE(big.error == pool_errc::out_of_memory || big.error == pool_errc::over_budget)
      << static_cast<int>(big.error);
  if (TypeParam::capacity != 0) {
    // Fill up to the limit: the refusal comes at the limit, not before.
    std::vector<void*> blocks;
    for (;;) {
      allocation_result a = r.allocate(4 * MiB, nullptr);
      if (!a) {
        EXPECT_TRUE(a.error == pool_errc::out_of_memory || a.error == pool_errc::over_budget);
        break;
      }
      blocks.push_back(a.ptr);
      ASSERT_LE(blocks.size() * 4 * MiB, TypeParam::capacity);
    }
    EXPECT_GE((blocks.size() + 1) * 4 * MiB, TypeParam::capacity - 16 * MiB);
    for (void* p : blocks) r.deallocate(p, 4 * MiB, nullptr);
  }
  allocation_result after = r.allocate(MiB, nullptr);
  ASSERT_TRUE(after) << "the resource is unusable after an out-of-memory";
  r.deallocate(after.ptr, MiB, nullptr);
}

TYPED_TEST(ResourceConformance, StatisticsAddUp) {
  memory_resource& r = this->env_->resource();
  const resource_stats before = r.stats();
  std::vector<std::pair<void*, std::size_t>> blocks;
  std::uint64_t aligned = 0;
  for (std::size_t bytes : {std::size_t{1000}, std::size_t{70000}, 5 * MiB, std::size_t{256}}) {
    allocation_result a = r.allocate(bytes, nullptr);
    ASSERT_TRUE(a);
    blocks.emplace_back(a.ptr, bytes);
    aligned += align_up(bytes, alignment_bytes);
  }
  const resource_stats during = r.stats();
  EXPECT_EQ(during.live_blocks, before.live_blocks + blocks.size());
  EXPECT_GE(during.used_bytes, before.used_bytes + aligned);
  EXPECT_GE(during.mapped_bytes, during.used_bytes);
  EXPECT_GE(during.reserved_bytes, during.mapped_bytes);
  EXPECT_GE(during.peak_used_bytes, during.used_bytes);
  EXPECT_GE(during.allocations, before.allocations + blocks.size());
  for (auto [p, bytes] : blocks) r.deallocate(p, bytes, nullptr);
  const resource_stats after = r.stats();
  EXPECT_EQ(after.live_blocks, before.live_blocks);
  EXPECT_EQ(after.used_bytes, before.used_bytes);
  EXPECT_GE(after.largest_free_bytes, 5 * MiB);  // what was just freed is mapped still
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  const std::uint64_t given = r.trim();
  EXPECT_EQ(r.stats().mapped_bytes + given, after.mapped_bytes);
}

// What a fraction in OVERSUB_HOST_LIMIT is a fraction of (Note [Host budget] in
// pool/host_memory.h).
TEST(HostMemory, PhysicalMemoryIsKnown) { EXPECT_GT(physical_memory_bytes(), 0u); }

}  // namespace
}  // namespace oversub::pool
