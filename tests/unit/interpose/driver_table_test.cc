// The driver version table (interpose/driver_table.h, Note [Answering by version] in
// interpose/driver_table.h).
#include "interpose/driver_table.h"

#include <gtest/gtest.h>

#include <set>
#include <string>
#include <string_view>

namespace oversub::interpose {
namespace {

std::string answer_name(std::string_view query, int version, bool per_thread) {
  const driver_answer a = answer_query(query, version, per_thread);
  if (!a.found) return "<driver's answer: not ours>";
  if (!a.hook) return "<an ABI oversub leaves alone>";
  return driver_hooks[index(*a.hook)].name;
}

TEST(DriverTable, CuMemAllocAtCuda11_12_13IsTheV2Abi) {
  for (int version : {11000, 12000, 12080, 13000}) {
    EXPECT_EQ(answer_name("cuMemAlloc", version, false), "cuMemAlloc_v2") << version;
    // cuMemAlloc has no per-thread flavour: the legacy ABI answers.
    EXPECT_EQ(answer_name("cuMemAlloc", version, true), "cuMemAlloc_v2") << version;
  }
  EXPECT_EQ(answer_name("cuMemAlloc", 3020, false), "cuMemAlloc_v2");
}

TEST(DriverTable, OlderAbisAreLeftAlone) {
  // Before CUDA 3.2 cuMemAlloc took a 32-bit size: never answered with the _v2 hook.
  EXPECT_EQ(answer_name("cuMemAlloc", 2000, false), "<an ABI oversub leaves alone>");
  EXPECT_EQ(answer_name("cuMemAlloc", 3010, false), "<an ABI oversub leaves alone>");
  EXPECT_EQ(answer_name("cuMemcpyDtoDAsync", 3000, false), "<an ABI oversub leaves alone>");
  // Below every row: the driver says VERSION_NOT_SUFFICIENT itself.
  EXPECT_EQ(answer_name("cuMemAlloc", 1000, false), "<driver's answer: not ours>");
  EXPECT_EQ(answer_name("cuMemAllocAsync", 11010, false), "<driver's answer: not ours>");
}

TEST(DriverTable, GetProcAddressHasTwoAbis) {
  EXPECT_EQ(answer_name("cuGetProcAddress", 11030, false), "cuGetProcAddress");
  EXPECT_EQ(answer_name("cuGetProcAddress", 11080, false), "cuGetProcAddress");
  EXPECT_EQ(answer_name("cuGetProcAddress", 12000, false), "cuGetProcAddress_v2");
  EXPECT_EQ(answer_name("cuGetProcAddress", 13000, false), "cuGetProcAddress_v2");
  EXPECT_EQ(answer_name("cuGetProcAddress", 11020, false), "<driver's answer: not ours>");
}

TEST(DriverTable, PerThreadFlavours) {
  EXPECT_EQ(answer_name("cuLaunchKernel", 13000, true), "cuLaunchKernel_ptsz");
  EXPECT_EQ(answer_name("cuLaunchKernel", 13000, false), "cuLaunchKernel");
  // The per-thread export exists from 7.0; before it the legacy one answers.
  EXPECT_EQ(answer_name("cuLaunchKernel", 6050, true), "cuLaunchKernel");
  EXPECT_EQ(answer_name("cuMemcpyHtoD", 13000, true), "cuMemcpyHtoD_v2_ptds");
  EXPECT_EQ(answer_name("cuMemcpyHtoD", 5000, true), "cuMemcpyHtoD_v2");
  EXPECT_EQ(answer_name("cuMemsetD8Async", 12000, true), "cuMemsetD8Async_ptsz");
  EXPECT_EQ(answer_name("cuMemFreeAsync", 11020, true), "cuMemFreeAsync_ptsz");
}

TEST(DriverTable, UnknownAndUnhookedSymbolsAreTheDrivers) {
  EXPECT_EQ(answer_name("cuCtxGetCurrent", 13000, false), "<driver's answer: not ours>");
  EXPECT_EQ(answer_name("cuNoSuchFunction", 13000, false), "<driver's answer: not ours>");
  EXPECT_EQ(answer_name("", 13000, false), "<driver's answer: not ours>");
}

TEST(DriverTable, ExportsByExactAbiName) {
  EXPECT_EQ(find_driver_export("cuMemAlloc_v2"), driver_hook_id::cuMemAlloc_v2);
  EXPECT_EQ(find_driver_export("cuLaunchKernel_ptsz"), driver_hook_id::cuLaunchKernel_ptsz);
  EXPECT_EQ(find_driver_export("cuGetProcAddress"), driver_hook_id::cuGetProcAddress_v1);
  EXPECT_FALSE(find_driver_export("cuMemAlloc"));  // the 32-bit ABI
  EXPECT_FALSE(find_driver_export("cudaMalloc"));
}

TEST(DriverTable, EveryExportIsUniqueAndAnsweredByItsOwnQuery) {
  std::set<std::string_view> names;
  for (std::size_t i = 0; i < driver_hook_count; ++i) {
    const driver_hook_info& h = driver_hooks[i];
    EXPECT_TRUE(names.insert(h.name).second) << h.name;
    // Asking for the hook's query at the hook's own version, in its flavour, answers it.
    const driver_answer a = answer_query(h.query, h.since, h.per_thread);
    ASSERT_TRUE(a.found && a.hook) << h.name;
    EXPECT_EQ(index(*a.hook), i) << h.name;
  }
}

}  // namespace
}  // namespace oversub::interpose
