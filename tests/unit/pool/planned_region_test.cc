// Planned placement served by pool/planned_region on simgpu: after two identical
// iterations the k-th allocation of each later iteration comes from its planned
// offset, blocks that are live together never overlap, the memory holds what was
// written, and an iteration that deviates (a different size) falls back to the
// online arena and the next one is planned again.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <map>
#include <random>

#include "pool/planned_region.h"
#include "pool/vmm_arena.h"

namespace oversub::pool {
namespace {

constexpr std::size_t MiB = std::size_t{1} << 20;

// One synthetic training iteration: activations kept for "backward", temporaries
// freed at once. Checks that live blocks never overlap and returns how many of its
// allocations were inside [region, region + region_bytes).
class iteration_runner {
 public:
  explicit iteration_runner(planned_region& r) : r_(r) {}

  int run(const std::vector<std::size_t>& sizes, std::uintptr_t region, std::size_t region_bytes) {
    int inside = 0;
    std::vector<std::pair<void*, std::size_t>> acts;
    for (std::size_t s : sizes) {
      void* a = take(s, region, region_bytes, inside);
      acts.emplace_back(a, s);
      void* tmp = take(s / 3 + 256, region, region_bytes, inside);
      give(tmp, s / 3 + 256);
    }
    while (!acts.empty()) {
      give(acts.back().first, acts.back().second);
      acts.pop_back();
    }
    return inside;
  }

 private:
  void* take(std::size_t bytes, std::uintptr_t region, std::size_t region_bytes, int& inside) {
    allocation_result a = r_.allocate(bytes, nullptr);
    EXPECT_TRUE(a);
    const auto base = reinterpret_cast<std::uintptr_t>(a.ptr);
    auto next = live_.lower_bound(base);
    EXPECT_TRUE(next == live_.end() || next->first >= base + bytes) << "live blocks overlap";
    if (next != live_.begin()) {
      EXPECT_LE(std::prev(next)->first + std::prev(next)->second, base) << "live blocks overlap";
    }
    live_[base] = bytes;
    EXPECT_EQ(cudaMemset(a.ptr, static_cast<int>(bytes & 0xff), bytes), cudaSuccess);
    if (region != 0 && base >= region && base < region + region_bytes) ++inside;
    return a.ptr;
  }
  void give(void* p, std::size_t bytes) {
    unsigned char last = 0;
    EXPECT_EQ(cudaMemcpy(&last, static_cast<char*>(p) + bytes - 1, 1, cudaMemcpyDeviceToHost),
              cudaSuccess);
    EXPECT_EQ(last, bytes & 0xff) << "a block's bytes were overwritten while it was live";
    live_.erase(reinterpret_cast<std::uintptr_t>(p));
    r_.deallocate(p, bytes, no_stream);
  }
  planned_region& r_;
  std::map<std::uintptr_t, std::size_t> live_;
};

TEST(PlannedRegion, ServesLaterIterationsFromThePlan) {
  ASSERT_EQ(cudaFree(nullptr), cudaSuccess);
  vmm_arena online(vmm_arena_config{0, 512 * MiB, 32 * MiB});
  planned_region planned(online);
  iteration_runner runner(planned);
  std::mt19937 rng(5);
  std::vector<std::size_t> sizes;
  for (int i = 0; i < 24; ++i) sizes.push_back((rng() % 8192 + 1) * 256 + rng() % 256);
  // Weights first: long-lived.
  allocation_result weights = planned.allocate(3 * MiB, nullptr);
  ASSERT_TRUE(weights);
  runner.run(sizes, 0, 0);
  runner.run(sizes, 0, 0);
  EXPECT_EQ(planned.plan_stats().served, 0u);
  // The plan is made at the next allocation; check it independently.
  for (int iter = 0; iter < 3; ++iter) {
    const int inside = runner.run(sizes, planned.region_base() != 0 ? planned.region_base() : 1,
                                  planned.plan_stats().region_bytes);
    if (iter > 0) {
      EXPECT_EQ(inside, 48);
    }
  }
  const planned_stats st = planned.plan_stats();
  ASSERT_TRUE(st.planned) << "no iteration learned";
  EXPECT_EQ(st.iteration_allocations, 48u);
  EXPECT_EQ(st.served, 3u * 48u);
  EXPECT_EQ(st.deviations, 0u);
  EXPECT_LE(st.region_bytes, st.lower_bound_bytes * 103 / 100 + 256)
      << "planned region more than 3% above the lower bound";
  const std::optional<policy::placement> plan = planned.current_plan();
  ASSERT_TRUE(plan.has_value());
  planned.deallocate(weights.ptr, 3 * MiB, no_stream);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
}

TEST(PlannedRegion, DeviationFallsBackThenReplans) {
  ASSERT_EQ(cudaFree(nullptr), cudaSuccess);
  vmm_arena online(vmm_arena_config{0, 512 * MiB, 32 * MiB});
  planned_region planned(online);
  iteration_runner runner(planned);
  const std::vector<std::size_t> sizes = {4096, 70000, 1 << 20, 256, 300000, 8192};
  runner.run(sizes, 0, 0);
  runner.run(sizes, 0, 0);
  runner.run(sizes, 0, 0);  // the plan is made and served from here on
  const std::uint64_t served = planned.plan_stats().served;
  ASSERT_GT(served, 0u);
  std::vector<std::size_t> odd = sizes;
  odd[2] = 1 << 19;  // one size differs
  const std::uintptr_t region = planned.region_base();
  const std::size_t region_bytes = planned.plan_stats().region_bytes;
  const int inside = runner.run(odd, region, region_bytes);
  EXPECT_EQ(inside, 4) << "allocations 0..3 planned, the rest (from the deviating one) online";
  EXPECT_EQ(planned.plan_stats().deviations, 1u);
  EXPECT_EQ(runner.run(sizes, region, region_bytes), 12) << "the next iteration is planned again";
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
}

}  // namespace
}  // namespace oversub::pool
