// Tests of the track-mode core: the virtual capacity (reserve/release, refusal
// count, fraction resolved from the device total), the virtual cudaMemGetInfo
// answer, managed memory kept out of the limit, and no lost update under threads.
#include "common/tracker.h"

#include <gtest/gtest.h>

#include <atomic>
#include <thread>
#include <vector>

#include "common/stats.h"

namespace oversub {
namespace {

constexpr std::uint64_t MiB = 1ull << 20;

class TrackerTest : public ::testing::Test {
 protected:
  void SetUp() override { stats::reset_all(); }
  void TearDown() override { stats::reset_all(); }
};

device_limit bytes_limit(std::uint64_t b) { return {device_limit::kind::bytes, b, 0.0}; }

TEST_F(TrackerTest, LimitRefusesPastCapacity) {
  tracker t(bytes_limit(100 * MiB));
  EXPECT_TRUE(t.reserve(0, 60 * MiB));
  EXPECT_FALSE(t.reserve(0, 41 * MiB));
  EXPECT_TRUE(t.reserve(0, 40 * MiB));
  EXPECT_EQ(t.used(0), 100 * MiB);
  EXPECT_FALSE(t.reserve(0, 1));
  EXPECT_TRUE(t.reserve(1, 100 * MiB));  // per device
  EXPECT_EQ(stats::global().limit_refusals.total(), 2u);
  t.release(0, 60 * MiB);
  EXPECT_TRUE(t.reserve(0, 60 * MiB));
}

TEST_F(TrackerTest, NoLimitAcceptsEverything) {
  tracker t(device_limit{});
  EXPECT_FALSE(t.needs_device_total(0));
  EXPECT_TRUE(t.reserve(0, 1ull << 60));
  EXPECT_EQ(t.limit(0), tracker::no_limit);
  tracker::memory_info real{10 * MiB, 80 * MiB};
  tracker::memory_info v = t.virtual_info(0, real);
  EXPECT_EQ(v.free_bytes, real.free_bytes);
  EXPECT_EQ(v.total_bytes, real.total_bytes);
}

TEST_F(TrackerTest, FractionResolvedOnFirstTotal) {
  tracker t(device_limit{device_limit::kind::fraction, 0, 0.5});
  EXPECT_TRUE(t.needs_device_total(0));
  EXPECT_TRUE(t.reserve(0, 1ull << 40));  // unresolved: not enforced
  t.release(0, 1ull << 40);
  t.set_device_total(0, 256 * MiB);
  EXPECT_FALSE(t.needs_device_total(0));
  EXPECT_EQ(t.limit(0), 128 * MiB);
  t.set_device_total(0, 1024 * MiB);  // first answer sticks
  EXPECT_EQ(t.limit(0), 128 * MiB);
  EXPECT_FALSE(t.reserve(0, 129 * MiB));
  EXPECT_TRUE(t.needs_device_total(1));
}

TEST_F(TrackerTest, VirtualMemGetInfo) {
  tracker t(bytes_limit(64 * MiB));
  ASSERT_TRUE(t.reserve(0, 16 * MiB));
  t.record({0x10000, 16 * MiB, alloc_kind::device, nullptr, 0});
  tracker::memory_info v = t.virtual_info(0, {200 * MiB, 256 * MiB});
  EXPECT_EQ(v.total_bytes, 64 * MiB);
  EXPECT_EQ(v.free_bytes, 48 * MiB);
  v = t.virtual_info(0, {10 * MiB, 256 * MiB});  // the real device is fuller
  EXPECT_EQ(v.free_bytes, 10 * MiB);
}

TEST_F(TrackerTest, RecordForgetAndCounters) {
  tracker t(bytes_limit(64 * MiB));
  ASSERT_TRUE(t.reserve(0, 4 * MiB));
  t.record({0x10000, 4 * MiB, alloc_kind::device, nullptr, 0});
  t.record({0x900000, 8 * MiB, alloc_kind::managed, nullptr, 0});
  EXPECT_EQ(t.used(0), 4 * MiB);  // managed not counted
  ASSERT_TRUE(t.find(0x10000 + 100).has_value());
  EXPECT_FALSE(t.forget(0x10000 + 100).has_value());
  EXPECT_TRUE(t.forget(0x10000).has_value());
  EXPECT_FALSE(t.forget(0x10000).has_value());
  EXPECT_EQ(t.used(0), 0u);
  EXPECT_TRUE(t.forget(0x900000).has_value());
  const stats::counters& s = stats::global();
  EXPECT_EQ(s.allocations.total(), 2u);
  EXPECT_EQ(s.allocations.current(), 0u);
  EXPECT_EQ(s.frees.total(), 2u);
  EXPECT_EQ(s.device_bytes.peak(), 4 * MiB);
  EXPECT_EQ(s.managed_bytes.total(), 8 * MiB);
}

TEST_F(TrackerTest, StaleEntryGivesBytesBack) {
  tracker t(bytes_limit(64 * MiB));
  ASSERT_TRUE(t.reserve(0, 4 * MiB));
  t.record({0x10000, 4 * MiB, alloc_kind::device, nullptr, 0});
  ASSERT_TRUE(t.reserve(0, 2 * MiB));
  t.record({0x10000, 2 * MiB, alloc_kind::device, nullptr, 0});  // freed behind our back
  EXPECT_EQ(t.used(0), 2 * MiB);
  EXPECT_EQ(t.live_count(), 1u);
  EXPECT_EQ(stats::global().allocations.current(), 1u);
}

TEST_F(TrackerTest, ConcurrentReserveNeverExceeds) {
  tracker t(bytes_limit(100 * MiB));
  std::atomic<int> granted{0};
  std::vector<std::thread> threads;
  for (int i = 0; i < 8; ++i) {
    threads.emplace_back([&] {
      for (int k = 0; k < 50; ++k) {
        if (t.reserve(0, MiB)) granted.fetch_add(1);
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(granted.load(), 100);
  EXPECT_EQ(t.used(0), 100 * MiB);
}

TEST_F(TrackerTest, ConcurrentRecordForgetLosesNothing) {
  tracker t(device_limit{});
  std::vector<std::thread> threads;
  for (int i = 0; i < 8; ++i) {
    threads.emplace_back([&, i] {
      for (std::uintptr_t k = 0; k < 2000; ++k) {
        std::uintptr_t base = (std::uintptr_t(i) << 32) + k * 0x1000;
        ASSERT_TRUE(t.reserve(0, 0x1000));
        t.record({base, 0x1000, alloc_kind::device, nullptr, 0});
        ASSERT_TRUE(t.forget(base).has_value());
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(t.live_count(), 0u);
  EXPECT_EQ(t.used(0), 0u);
  EXPECT_EQ(stats::global().allocations.total(), 16000u);
  EXPECT_EQ(stats::global().frees.total(), 16000u);
}

// Scans on one thread while another allocates and frees around the scanned
// allocations: every scan finds exactly the allocations that stay live, whatever
// the other thread did to the cache and the flat index in between.
TEST_F(TrackerTest, ScanWhileAnotherThreadAllocates) {
  tracker t(device_limit{});
  constexpr int kept = 64;
  std::vector<std::uint64_t> words;
  for (int k = 0; k < kept; ++k) {
    const std::uintptr_t base = 0x7f0000000000 + std::uintptr_t(k) * 0x200000;
    t.record({base, 0x100000, alloc_kind::device, nullptr, 0});
    words.push_back(base + 0x800 * std::uintptr_t(k));
    words.push_back(base + 0x100000);  // the gap after it, below the other thread's
  }
  std::atomic<bool> stop{false};
  std::thread churn([&] {
    for (std::uintptr_t i = 0; !stop.load(); ++i) {
      const std::uintptr_t k = i % kept;
      const std::uintptr_t base = 0x7f0000000000 + k * 0x200000 + 0x180000 + (i % 7) * 0x1000;
      t.record({base, 0x1000, alloc_kind::device, nullptr, 0});
      ASSERT_TRUE(t.forget(base).has_value());
    }
  });
  std::vector<std::uint64_t> bases(words.size());
  std::vector<std::uint64_t> sizes(words.size());
  for (int scan = 0; scan < 20000; ++scan) {
    ASSERT_EQ(t.scan(words.data(), words.size(), bases.data(), sizes.data()),
              static_cast<std::size_t>(kept));
    for (int k = 0; k < kept; ++k) {
      ASSERT_EQ(bases[k], 0x7f0000000000 + std::uint64_t(k) * 0x200000);
      ASSERT_EQ(sizes[k], 0x100000u);
    }
  }
  stop = true;
  churn.join();
  EXPECT_EQ(t.live_count(), static_cast<std::size_t>(kept));
}

}  // namespace
}  // namespace oversub
