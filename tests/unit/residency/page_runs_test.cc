// remap_grouped (residency/page_runs.h, Note [Calls grouped by family] in
// residency/page_runs.cc) on simgpu: an eviction's run and a fetch's run remapped in
// the same calls, the fetch taking the eviction's device memory; every byte where it
// belongs afterwards, and on a failure every page back on its old memory.
#include <cuda.h>
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <string_view>
#include <vector>

#include "pool/driver_api.h"
#include "residency/page_runs.h"

namespace oversub::residency {
namespace {

using namespace oversub::pool;

constexpr std::size_t kPage = std::size_t{2} << 20;

class PageRuns : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { ASSERT_EQ(cudaFree(nullptr), cudaSuccess); }
  void SetUp() override {
    CUdeviceptr base = 0;
    ASSERT_EQ(driver().cuMemAddressReserve(&base, 8 * kPage, kPage, 0, 0), CUDA_SUCCESS);
    base_ = base;
  }
  void TearDown() override { ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess); }
  std::uintptr_t va(std::size_t i) const { return base_ + i * kPage; }
  CUmemGenericAllocationHandle make(CUmemLocationType where) {
    const CUmemAllocationProp prop = vmm_prop(where, 0);
    CUmemGenericAllocationHandle h = 0;
    EXPECT_EQ(driver().cuMemCreate(&h, kPage, &prop, 0), CUDA_SUCCESS);
    return h;
  }
  void map(std::size_t i, CUmemGenericAllocationHandle h) {
    ASSERT_EQ(driver().cuMemMap(va(i), kPage, 0, h, 0), CUDA_SUCCESS);
    const CUmemAccessDesc access = device_access(0);
    ASSERT_EQ(driver().cuMemSetAccess(va(i), kPage, &access, 1), CUDA_SUCCESS);
  }
  void fill(std::size_t i, int value) {
    ASSERT_EQ(cudaMemset(reinterpret_cast<void*>(va(i)), value, kPage), cudaSuccess);
  }
  unsigned char byte(std::size_t i) {
    unsigned char b = 0;
    EXPECT_EQ(cudaMemcpy(&b, reinterpret_cast<void*>(va(i) + kPage / 2), 1,
                         cudaMemcpyDeviceToHost),
              cudaSuccess);
    return b;
  }
  std::uintptr_t base_ = 0;
};

// Pages 0-2 evicted (device memory -> host copies, which hold their bytes), pages 4-5
// fetched (host copies -> pages 0 and 1's device memory): every page reads its own
// bytes afterwards, and the fetch reads what its host copy held.
// With SIMGPU_FAIL=map:N (the test's other runs), a map fails part way: the eviction's
// run or the fetch's goes back to its old memory, and still every page reads its bytes.
// With access:N the fetch's grant (the first: Note [A fetch's copies before the
// evictions' grants] in residency/page_runs.cc) or the eviction's fails: a fetch page
// that kept an eviction page's device memory keeps that page on its host copy.
TEST_F(PageRuns, AnEvictionAndAFetchRemappedTogether) {
  const char* fail = std::getenv("SIMGPU_FAIL");
  const bool failing = fail != nullptr && (std::string_view(fail).starts_with("map:") ||
                                           std::string_view(fail).starts_with("access:"));
  std::vector<CUmemGenericAllocationHandle> dev, host;
  for (std::size_t i = 0; i < 3; ++i) dev.push_back(make(CU_MEM_LOCATION_TYPE_DEVICE));
  for (std::size_t i = 0; i < 5; ++i) host.push_back(make(CU_MEM_LOCATION_TYPE_HOST));
  // Evicting pages 0-2: their device memory mapped, their bytes copied to their host
  // copies (host[0..2], mapped at pages 6.. as shadows would be: here filled directly).
  for (std::size_t i = 0; i < 3; ++i) {
    map(i, dev[i]);
    fill(i, 0x10 + static_cast<int>(i));
  }
  // Their host copies hold the same bytes: fill them through a temporary mapping.
  for (std::size_t i = 0; i < 3; ++i) {
    map(6, host[i]);
    fill(6, 0x10 + static_cast<int>(i));
    ASSERT_EQ(driver().cuMemUnmap(va(6), kPage), CUDA_SUCCESS);
  }
  // Pages 4 and 5 on the host, holding 0x44 and 0x55.
  map(4, host[3]);
  fill(4, 0x44);
  map(5, host[4]);
  fill(5, 0x55);
  // A run of two unmapped in one call first, as runs_may_group asks.
  std::vector<char> ok;
  std::uint64_t calls = 0;
  const std::vector<std::uintptr_t> two{va(4), va(5)};
  ASSERT_EQ(remap_runs(two, std::vector{host[3], host[4]}, std::vector{host[3], host[4]}, kPage,
                       0, ok, calls),
            CUDA_SUCCESS);
  ASSERT_TRUE(runs_may_group());

  const std::vector<std::uintptr_t> evas{va(0), va(1), va(2)};
  const std::vector<CUmemGenericAllocationHandle> efrom = dev, eto{host[0], host[1], host[2]};
  const std::vector<std::uintptr_t> fvas{va(4), va(5)};
  const std::vector<CUmemGenericAllocationHandle> ffrom{host[3], host[4]}, fto{dev[0], dev[1]};
  const std::vector<int> borrow{0, 1};
  std::vector<char> eok, fok;
  CUresult ferror = CUDA_SUCCESS;
  calls = 0;
  // The fetch's copies in are queued where its runs are granted, before the
  // evictions' grants: here its bytes are written then (the host copies' bytes).
  bool copied = false;
  const fetched_fn copy_in = [&](const std::vector<char>& granted, CUresult e) {
    copied = true;
    // No eviction's page has its access yet; a fetch page granted has.
    const CUmemLocation dev0{CU_MEM_LOCATION_TYPE_DEVICE, 0};
    unsigned long long flags = 0;
    void* entry = nullptr;
    cudaDriverEntryPointQueryResult found{};
    EXPECT_EQ(cudaGetDriverEntryPointByVersion("cuMemGetAccess", &entry, 12000, cudaEnableDefault,
                                               &found),
              cudaSuccess);
    const auto cuMemGetAccess = reinterpret_cast<decltype(&::cuMemGetAccess)>(entry);
    if (cuMemGetAccess == nullptr) return e;
    for (std::size_t i = 0; i < 3; ++i) {
      if (cuMemGetAccess(&flags, &dev0, va(i)) == CUDA_SUCCESS) {
        EXPECT_EQ(flags, CU_MEM_ACCESS_FLAGS_PROT_NONE) << "eviction page " << i;
      }
    }
    for (std::size_t k = 0; k < 2; ++k) {
      if (!granted[k]) continue;
      EXPECT_EQ(cuMemGetAccess(&flags, &dev0, va(4 + k)), CUDA_SUCCESS);
      EXPECT_EQ(flags, CU_MEM_ACCESS_FLAGS_PROT_READWRITE) << "fetch page " << k;
    }
    for (std::size_t k = 0; k < 2; ++k) {
      if (granted[k]) fill(4 + k, k == 0 ? 0x44 : 0x55);
    }
    return e;
  };
  const CUresult eerror = remap_grouped(evas, efrom, eto, fvas, ffrom, fto, borrow, kPage, 0,
                                        eok, fok, ferror, calls, nullptr, nullptr, copy_in);
  if (!failing) {
    EXPECT_EQ(eerror, CUDA_SUCCESS);
    EXPECT_EQ(ferror, CUDA_SUCCESS);
    EXPECT_EQ(eok, (std::vector<char>{1, 1, 1}));
    EXPECT_EQ(fok, (std::vector<char>{1, 1}));
    EXPECT_EQ(calls, 2u + 5u + 2u);  // two unmaps, five maps, two grants
    EXPECT_TRUE(copied);
  } else {
    EXPECT_TRUE(eerror != CUDA_SUCCESS || ferror != CUDA_SUCCESS);
    for (std::size_t k = 0; k < 2; ++k) {
      // A fetch page that maps its eviction's device memory only where that page moved.
      if (fok[k]) {
        EXPECT_TRUE(eok[k]);
      }
    }
    // A fetch page that did not move is on its host copy; one that did got its bytes
    // where its runs were granted (or here, where none was: a map failed).
    for (std::size_t k = 0; k < 2 && !copied; ++k) {
      if (fok[k]) fill(4 + k, k == 0 ? 0x44 : 0x55);
    }
  }
  for (std::size_t i = 0; i < 3; ++i) EXPECT_EQ(byte(i), 0x10 + i) << "page " << i;
  EXPECT_EQ(byte(4), 0x44);
  EXPECT_EQ(byte(5), 0x55);
  for (std::size_t i : {0, 1, 2, 4, 5}) ASSERT_EQ(driver().cuMemUnmap(va(i), kPage), CUDA_SUCCESS);
  for (auto h : dev) ASSERT_EQ(driver().cuMemRelease(h), CUDA_SUCCESS);
  for (auto h : host) ASSERT_EQ(driver().cuMemRelease(h), CUDA_SUCCESS);
}

}  // namespace
}  // namespace oversub::residency
