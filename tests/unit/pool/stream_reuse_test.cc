// Stream-ordered reuse, capture, trim and the host budget, on simgpu.
//
// simgpu runs work eagerly but keeps a virtual clock: an event recorded after a long
// memset is "not ready" until host time passes its end, as on a GPU. The meson test
// runs this with SIMGPU_RACE=abort, so a block handed to another stream before the
// work on it is ordered would abort the process, on top of the direct checks here.
#include <cuda.h>
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include "pool/stream_fences.h"
#include "pool/vmm_arena.h"

namespace oversub::pool {
namespace {

constexpr std::size_t MiB = std::size_t{1} << 20;

class StreamReuse : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { ASSERT_EQ(cudaFree(nullptr), cudaSuccess); }
  void SetUp() override {
    ASSERT_EQ(cudaStreamCreateWithFlags(&a_, cudaStreamNonBlocking), cudaSuccess);
    ASSERT_EQ(cudaStreamCreateWithFlags(&b_, cudaStreamNonBlocking), cudaSuccess);
  }
  void TearDown() override {
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    cudaStreamDestroy(a_);
    cudaStreamDestroy(b_);
  }
  static CUstream cu(cudaStream_t s) { return reinterpret_cast<CUstream>(s); }
  // Long work on s using p (what the launch hooks would report, then the memsets).
  static void busy(cudaStream_t s, void* p, std::size_t bytes) {
    fences().note_work(cu(s));
    for (int i = 0; i < 20; ++i) ASSERT_EQ(cudaMemsetAsync(p, i, bytes, s), cudaSuccess);
  }
  static bool overlaps(void* p, void* q, std::size_t bytes) {
    auto x = reinterpret_cast<std::uintptr_t>(p);
    auto y = reinterpret_cast<std::uintptr_t>(q);
    return x < y + bytes && y < x + bytes;
  }
  cudaStream_t a_ = nullptr;
  cudaStream_t b_ = nullptr;
};

// See Note [One stream needs no events] (pool/stream_fences.h). First in the file: it
// needs the process's fences before any test has used a second stream (meson also
// runs it alone).
TEST_F(StreamReuse, OneStreamRecordsNoEventsAndASecondWaitsForTheFloor) {
  vmm_arena arena(vmm_arena_config{0, 512 * MiB, 256 * MiB});
  const std::size_t bytes = 64 * MiB;
  allocation_result x = arena.allocate(bytes, cu(a_));
  ASSERT_TRUE(x);
  busy(a_, x.ptr, bytes);
  arena.deallocate(x.ptr, bytes, cu(a_));
  allocation_result z = arena.allocate(bytes, cu(a_));  // the same stream: at once
  ASSERT_TRUE(z);
  EXPECT_EQ(z.ptr, x.ptr);
  busy(a_, z.ptr, bytes);
  arena.deallocate(z.ptr, bytes, cu(a_));
  EXPECT_EQ(fences().events_recorded(), 0u) << "frees on the only stream recorded events";
  // A second stream: the floor is recorded on a, and b gets none of a's bytes while
  // a's work runs (with SIMGPU_RACE=abort an unordered overlap would abort).
  allocation_result y = arena.allocate(bytes, cu(b_));
  ASSERT_TRUE(y);
  EXPECT_EQ(fences().events_recorded(), 1u);
  EXPECT_FALSE(overlaps(x.ptr, y.ptr, bytes)) << "reused on b before a's work completed";
  fences().note_work(cu(b_));
  ASSERT_EQ(cudaMemsetAsync(y.ptr, 7, bytes, b_), cudaSuccess);
  // Frees take tickets again from here on.
  arena.deallocate(y.ptr, bytes, cu(b_));
  EXPECT_EQ(fences().events_recorded(), 2u);
  // Once the floor is known complete, b may have a's bytes.
  ASSERT_EQ(cudaStreamSynchronize(a_), cudaSuccess);
  ASSERT_EQ(cudaStreamSynchronize(b_), cudaSuccess);
  allocation_result w = arena.allocate(2 * bytes, cu(b_));
  ASSERT_TRUE(w);
  fences().note_work(cu(b_));
  ASSERT_EQ(cudaMemsetAsync(w.ptr, 1, 2 * bytes, b_), cudaSuccess);
  arena.deallocate(w.ptr, 2 * bytes, cu(b_));
}

TEST_F(StreamReuse, FreedOnAWithPendingWorkIsNotGivenToB) {
  vmm_arena arena(vmm_arena_config{0, 512 * MiB, 256 * MiB});
  const std::size_t bytes = 64 * MiB;
  allocation_result x = arena.allocate(bytes, cu(a_));
  ASSERT_TRUE(x);
  // Live after x, so that x's block stays its own size when freed (a free with no
  // tickets, Note [One stream needs no events] in pool/stream_fences.h, would merge with
  // free neighbours).
  allocation_result guard = arena.allocate(bytes, cu(a_));
  ASSERT_TRUE(guard);
  busy(a_, x.ptr, bytes);                     // ~0.6 ms of virtual work on a
  arena.deallocate(x.ptr, bytes, cu(a_));     // cudaFreeAsync(x, a)
  allocation_result y = arena.allocate(bytes, cu(b_));
  ASSERT_TRUE(y);
  EXPECT_FALSE(overlaps(x.ptr, y.ptr, bytes)) << "reused on b before a's work completed";
  // Touch y on b at once: with SIMGPU_RACE=abort an unordered overlap would abort.
  fences().note_work(cu(b_));
  ASSERT_EQ(cudaMemsetAsync(y.ptr, 7, bytes, b_), cudaSuccess);
  // The same stream reuses at once: stream order makes it safe.
  allocation_result z = arena.allocate(bytes, cu(a_));
  ASSERT_TRUE(z);
  EXPECT_EQ(z.ptr, x.ptr);
  fences().note_work(cu(a_));
  ASSERT_EQ(cudaMemsetAsync(z.ptr, 9, bytes, a_), cudaSuccess);
  arena.deallocate(z.ptr, bytes, cu(a_));
  arena.deallocate(y.ptr, bytes, cu(b_));
  // Once a's work is known complete, b may have the bytes.
  ASSERT_EQ(cudaStreamSynchronize(a_), cudaSuccess);
  allocation_result w = arena.allocate(bytes, cu(b_));
  ASSERT_TRUE(w);
  EXPECT_TRUE(w.ptr == x.ptr || w.ptr == y.ptr);
  fences().note_work(cu(b_));
  ASSERT_EQ(cudaMemsetAsync(w.ptr, 1, bytes, b_), cudaSuccess);
  arena.deallocate(w.ptr, bytes, cu(b_));
  arena.deallocate(guard.ptr, bytes, cu(a_));
  EXPECT_GT(fences().events_recorded(), 0u);
}

TEST_F(StreamReuse, SynchronousFreeFencesEveryStreamThatWorked) {
  vmm_arena arena(vmm_arena_config{0, 512 * MiB, 256 * MiB});
  const std::size_t bytes = 32 * MiB;
  allocation_result x = arena.allocate(bytes, nullptr);  // cudaMalloc: the legacy stream
  ASSERT_TRUE(x);
  busy(a_, x.ptr, bytes);
  arena.deallocate(x.ptr, bytes, no_stream);  // cudaFree: no device synchronisation
  allocation_result y = arena.allocate(bytes, nullptr);
  ASSERT_TRUE(y);
  EXPECT_FALSE(overlaps(x.ptr, y.ptr, bytes));
  fences().note_work(cu(b_));
  ASSERT_EQ(cudaMemsetAsync(y.ptr, 3, bytes, b_), cudaSuccess);
  arena.deallocate(y.ptr, bytes, no_stream);
}

TEST_F(StreamReuse, LastResortWaitsInsteadOfFailing) {
  // A 64 MiB range, and a limit on ranges: the only block is fenced by a's work;
  // b's request must wait for it (one synchronisation), not fail.
  vmm_arena arena(vmm_arena_config{0, 64 * MiB, 256 * MiB});
  allocation_result x = arena.allocate(64 * MiB, cu(a_));
  ASSERT_TRUE(x);
  busy(a_, x.ptr, 64 * MiB);
  arena.deallocate(x.ptr, 64 * MiB, cu(a_));
  allocation_result y = arena.allocate(64 * MiB, cu(b_));
  ASSERT_TRUE(y);  // a second range (address space is plentiful) or the wait
  fences().note_work(cu(b_));
  ASSERT_EQ(cudaMemsetAsync(y.ptr, 3, 64 * MiB, b_), cudaSuccess);
  arena.deallocate(y.ptr, 64 * MiB, cu(b_));
}

TEST_F(StreamReuse, AllocatingDuringCaptureDoesNotBreakIt) {
  vmm_arena arena(vmm_arena_config{0, 256 * MiB, 64 * MiB});
  const std::uint64_t syncs_before = arena.stats().syncs;
  ASSERT_EQ(cudaStreamBeginCapture(a_, cudaStreamCaptureModeGlobal), cudaSuccess);
  // Needs chunks not mapped yet: the arena grows without enqueuing anything.
  allocation_result p = arena.allocate(3 * MiB, cu(a_));
  ASSERT_TRUE(p);
  fences().note_work(cu(a_));
  ASSERT_EQ(cudaMemsetAsync(p.ptr, 5, 3 * MiB, a_), cudaSuccess);
  arena.deallocate(p.ptr, 3 * MiB, cu(a_));           // no event can be recorded here
  allocation_result q = arena.allocate(3 * MiB, cu(a_));  // same stream: reused
  ASSERT_TRUE(q);
  EXPECT_EQ(q.ptr, p.ptr);
  ASSERT_EQ(cudaMemsetAsync(q.ptr, 6, 3 * MiB, a_), cudaSuccess);
  allocation_result big = arena.allocate(80 * MiB, cu(a_));  // a dedicated mapping
  ASSERT_TRUE(big);
  cudaGraph_t graph = nullptr;
  ASSERT_EQ(cudaStreamEndCapture(a_, &graph), cudaSuccess) << "the capture was invalidated";
  cudaGraphExec_t exec = nullptr;
  ASSERT_EQ(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);
  ASSERT_EQ(cudaGraphLaunch(exec, a_), cudaSuccess);
  ASSERT_EQ(cudaStreamSynchronize(a_), cudaSuccess);
  unsigned char host = 0;
  ASSERT_EQ(cudaMemcpy(&host, q.ptr, 1, cudaMemcpyDeviceToHost), cudaSuccess);
  EXPECT_EQ(host, 6);
  EXPECT_EQ(arena.stats().syncs, syncs_before);
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  arena.deallocate(q.ptr, 3 * MiB, cu(a_));
  arena.deallocate(big.ptr, 80 * MiB, cu(a_));
}

TEST_F(StreamReuse, TrimGivesChunksBack) {
  vmm_arena arena(vmm_arena_config{0, 256 * MiB, 16 * MiB});
  std::vector<void*> blocks;
  for (int i = 0; i < 8; ++i) {
    allocation_result r = arena.allocate(3 * MiB, nullptr);
    ASSERT_TRUE(r);
    blocks.push_back(r.ptr);
  }
  allocation_result big = arena.allocate(20 * MiB, nullptr);
  ASSERT_TRUE(big);
  size_t free_held = 0;
  size_t total = 0;
  ASSERT_EQ(cudaMemGetInfo(&free_held, &total), cudaSuccess);
  for (void* p : blocks) arena.deallocate(p, 3 * MiB, no_stream);
  arena.deallocate(big.ptr, 20 * MiB, no_stream);
  const resource_stats cached = arena.stats();
  EXPECT_EQ(cached.used_bytes, 0u);
  EXPECT_GE(cached.mapped_bytes, 44 * MiB);
  EXPECT_EQ(arena.cached_bytes(), cached.mapped_bytes);
  const std::uint64_t given = arena.trim();
  EXPECT_EQ(given, cached.mapped_bytes);
  EXPECT_EQ(arena.stats().mapped_bytes, 0u);
  size_t free_after = 0;
  ASSERT_EQ(cudaMemGetInfo(&free_after, &total), cudaSuccess);
  EXPECT_EQ(free_after, free_held + given) << "the device did not get the chunks back";
}

TEST_F(StreamReuse, ShortDeviceTrimsAndRetries) {
  // SIMGPU_MEMORY is 256 MiB for this test program.
  vmm_arena arena(vmm_arena_config{0, 256 * MiB, 8 * MiB});
  std::vector<void*> blocks;
  for (int i = 0; i < 6; ++i) {
    allocation_result r = arena.allocate(3 * MiB, nullptr);
    ASSERT_TRUE(r);
    blocks.push_back(r.ptr);
  }
  for (void* p : blocks) arena.deallocate(p, 3 * MiB, no_stream);
  ASSERT_GE(arena.cached_bytes(), 18 * MiB);
  // Someone else takes almost all the rest of the device.
  size_t free_bytes = 0;
  size_t total = 0;
  ASSERT_EQ(cudaMemGetInfo(&free_bytes, &total), cudaSuccess);
  void* hog = nullptr;
  ASSERT_EQ(cudaMalloc(&hog, free_bytes - 4 * MiB), cudaSuccess);
  // A dedicated 16 MiB mapping cannot be created until the idle chunks go back.
  allocation_result big = arena.allocate(16 * MiB, nullptr);
  ASSERT_TRUE(big) << "the arena did not give its idle chunks back when the device was short";
  EXPECT_GT(arena.stats().trims, 0u);
  arena.deallocate(big.ptr, 16 * MiB, no_stream);
  ASSERT_EQ(cudaFree(hog), cudaSuccess);
  allocation_result too_big = arena.allocate(512 * MiB, nullptr);
  EXPECT_FALSE(too_big);
  EXPECT_EQ(too_big.error, pool_errc::out_of_memory);
}

}  // namespace
}  // namespace oversub::pool
