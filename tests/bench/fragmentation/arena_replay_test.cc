// The fragmentation table's "online" column comes from a model of the arena
// (online_arena_model.cc). This test replays every recorded trace through the real
// pool::vmm_arena on simgpu and checks that its peak of mapped device memory is the
// model's figure, so the table describes the arena that serves cudaMalloc.
//
// One stream and no queued work, as in the model: every freed block is reusable at
// once. simgpu backs VMM memory with sparse files, so a 25 GiB trace costs no RAM
// (nothing here writes the memory).
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <vector>

#include "allocator_models.h"
#include "pool/vmm_arena.h"
#include "trace.h"

namespace oversub::bench {
namespace {

std::vector<std::string> recorded_traces() {
  std::vector<std::string> out;
  for (const auto& e : std::filesystem::directory_iterator(OVERSUB_TRACE_DIR)) {
    if (e.path().extension() == ".trace") out.push_back(e.path().string());
  }
  return out;
}

class ArenaReplay : public ::testing::TestWithParam<std::string> {
 protected:
  static void SetUpTestSuite() { ASSERT_EQ(cudaFree(nullptr), cudaSuccess); }
};

TEST_P(ArenaReplay, PeakMappedEqualsTheModel) {
  trace t;
  std::string error;
  ASSERT_TRUE(read_trace(GetParam(), &t, &error)) << error;
  // A 32 GiB range (the largest trace peaks at 25 GiB): simgpu's address space is
  // 1 TiB, and each test case reserves its own range.
  online_arena_config model_cfg;
  model_cfg.range_bytes = std::size_t{32} << 30;
  const online_arena_peaks model = online_arena_peak(t, model_cfg);

  pool::vmm_arena arena(pool::vmm_arena_config{0, model_cfg.range_bytes,
                                               model_cfg.dedicated_threshold_bytes});
  std::vector<void*> live(t.events.size(), nullptr);
  std::vector<std::size_t> bytes(t.events.size(), 0);
  for (const trace_event& e : t.events) {
    if (e.alloc) {
      pool::allocation_result r = arena.allocate(e.bytes, nullptr);
      ASSERT_TRUE(r) << t.name << ": allocation of " << e.bytes << " bytes failed";
      live[e.buffer] = r.ptr;
      bytes[e.buffer] = e.bytes;
    } else {
      arena.deallocate(live[e.buffer], bytes[e.buffer], pool::no_stream);
      live[e.buffer] = nullptr;
    }
  }
  const pool::resource_stats s = arena.stats();
  EXPECT_EQ(s.peak_mapped_bytes, model.plentiful) << t.name;
  EXPECT_EQ(s.failed_allocations, 0u);
  EXPECT_EQ(s.syncs, 0u);
}

INSTANTIATE_TEST_SUITE_P(Traces, ArenaReplay, ::testing::ValuesIn(recorded_traces()),
                         [](const auto& info) {
                           std::string n = std::filesystem::path(info.param).stem().string();
                           for (char& c : n) {
                             if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
                           }
                           return n;
                         });

}  // namespace
}  // namespace oversub::bench
