// The swap engine tests' fixture (swap_engine_test.cc, swap_mover_test.cc): a stream,
// an address range of kPages pages, and helpers to use, fill and read back its pages.
// In an unnamed namespace, as each test file's own: the members not defined inline are
// defined in swap_engine_test.cc, the only file that calls them.
#ifndef OVERSUB_TESTS_UNIT_RESIDENCY_RESIDENCY_FIXTURE_H
#define OVERSUB_TESTS_UNIT_RESIDENCY_RESIDENCY_FIXTURE_H

#include <cuda.h>
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>
#include <vector>

#include "pool/driver_api.h"
#include "residency/swap_engine.h"

namespace oversub::residency {
namespace {

inline constexpr std::size_t kPage = std::size_t{2} << 20;

class Residency : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { ASSERT_EQ(cudaFree(nullptr), cudaSuccess); }
  void SetUp() override {
    ASSERT_EQ(cudaStreamCreateWithFlags(&s_, cudaStreamNonBlocking), cudaSuccess);
    CUdeviceptr base = 0;
    ASSERT_EQ(pool::driver().cuMemAddressReserve(&base, kPages * kPage, kPage, 0, 0), CUDA_SUCCESS);
    base_ = base;
  }
  void TearDown() override {
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    cudaStreamDestroy(s_);
  }
  std::uintptr_t va(std::size_t i) const { return base_ + i * kPage; }
  void* ptr(std::size_t i) const { return reinterpret_cast<void*>(va(i)); }
  CUstream cu() const { return reinterpret_cast<CUstream>(s_); }
  prepare_result use(swap_engine& e, std::size_t i, bool writes = true) {
    const byte_range r{va(i), kPage};
    return e.prepare({&r, 1}, cu(), writes);
  }
  // Every byte of page i read back equals value.
  void expect_bytes(std::size_t i, unsigned char value) {
    std::vector<unsigned char> host(kPage);
    ASSERT_EQ(cudaMemcpyAsync(host.data(), ptr(i), kPage, cudaMemcpyDeviceToHost, s_), cudaSuccess);
    ASSERT_EQ(cudaStreamSynchronize(s_), cudaSuccess);
    for (std::size_t k = 0; k < kPage; k += 4099) {
      ASSERT_EQ(host[k], value) << "page " << i << " byte " << k;
    }
    ASSERT_EQ(host[kPage - 1], value);
  }
  void five_pages(swap_engine& e, int fill);
  // Pages 0-7 created and used in turn, page i filled with fill + i (on a device of
  // four, so the first four are evicted).
  void eight_filled_pages(swap_engine& e, int fill) {
    for (std::size_t i = 0; i < 8; ++i) {
      ASSERT_TRUE(e.create_page(va(i)));
      ASSERT_TRUE(use(e, i));
      ASSERT_EQ(cudaMemsetAsync(ptr(i), fill + static_cast<int>(i), kPage, s_), cudaSuccess);
    }
    ASSERT_EQ(cudaStreamSynchronize(s_), cudaSuccess);
  }
  // Pages 0-3 and 4-7 created and written as two groups, each filled with fill plus
  // its first page's index.
  void two_groups_of_four(swap_engine& e, int fill);
  void remapped_as_runs(swap_engine& e);
  void evict_page_1_at_1gbps(swap_engine& e, bool rates_measured);
  void expect_both_pages_back(swap_engine& e);
  void expect_only_page_3_left(swap_engine& e, int fill);
  static inline constexpr std::size_t kPages = 16;
  cudaStream_t s_ = nullptr;
  std::uintptr_t base_ = 0;
};

swap_config config(std::size_t capacity_pages, std::size_t host_pages) {
  swap_config c;
  c.page_bytes = kPage;
  c.capacity_bytes = capacity_pages * kPage;
  c.host_budget_bytes = host_pages * kPage;
  return c;
}

}  // namespace
}  // namespace oversub::residency

#endif  // OVERSUB_TESTS_UNIT_RESIDENCY_RESIDENCY_FIXTURE_H
