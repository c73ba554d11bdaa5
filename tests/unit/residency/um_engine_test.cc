// The managed-memory backend (residency/um_engine.h) driven as the learned schedule
// drives it, on simgpu with races aborting: its mover (Note [um's mover] in
// residency/um_mover.cc) enqueues the schedule's prefetches, and every byte is kept.
#include <cuda.h>
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <string_view>
#include <vector>

#include "pool/driver_api.h"
#include "pool/stream_fences.h"
#include "residency/um_engine.h"

namespace oversub::residency {
namespace {

constexpr std::size_t kBuffer = std::size_t{2} << 20;
constexpr std::size_t kBuffers = 8;

class UmEngine : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { ASSERT_EQ(cudaFree(nullptr), cudaSuccess); }
  void SetUp() override {
    ASSERT_EQ(cudaStreamCreateWithFlags(&s_, cudaStreamNonBlocking), cudaSuccess);
  }
  void TearDown() override {
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    cudaStreamDestroy(s_);
  }
  CUstream cu() const { return reinterpret_cast<CUstream>(s_); }
  byte_range range(std::size_t i) const { return byte_range{bufs_[i], kBuffer}; }
  void* ptr(std::size_t i) const { return reinterpret_cast<void*>(bufs_[i]); }
  // Eight buffers on a device with room for four, buffer i filled with fill + i.
  void filled(um_engine& e, int fill) {
    for (std::size_t i = 0; i < kBuffers; ++i) {
      const pool::allocation_result a = e.allocate(kBuffer, cu());
      ASSERT_EQ(a.error, pool::pool_errc::ok);
      bufs_.push_back(reinterpret_cast<std::uintptr_t>(a.ptr));
      const byte_range r = range(i);
      ASSERT_TRUE(e.prepare({&r, 1}, cu()));
      ASSERT_EQ(cudaMemsetAsync(ptr(i), fill + static_cast<int>(i), kBuffer, s_), cudaSuccess);
    }
  }
  // Rounds of the schedule: before buffer i's use, buffer i - 3 goes to the host and
  // buffer i + 1 comes in ahead; each use reads the buffer and writes it with the
  // round's value.
  void rounds(um_engine& e, int fill, int count) {
    for (int round = 0; round < count; ++round) {
      for (std::size_t i = 0; i < kBuffers; ++i) {
        const byte_range old = range((i + kBuffers - 3) % kBuffers);
        ASSERT_TRUE(e.evict({&old, 1}));
        const byte_range next = range((i + 1) % kBuffers);
        std::vector<byte_range> later;
        ASSERT_TRUE(e.prefetch_now({&next, 1}, later));
        const byte_range r = range(i);
        ASSERT_TRUE(e.prepare({&r, 1}, cu()));
        expect_bytes(i, static_cast<unsigned char>(fill + round * 16 + static_cast<int>(i)));
        ASSERT_EQ(cudaMemsetAsync(ptr(i), fill + (round + 1) * 16 + static_cast<int>(i),
                                  kBuffer, s_),
                  cudaSuccess);
      }
    }
  }
  void expect_bytes(std::size_t i, unsigned char value) {
    std::vector<unsigned char> host(kBuffer);
    ASSERT_EQ(cudaMemcpyAsync(host.data(), ptr(i), kBuffer, cudaMemcpyDeviceToHost, s_),
              cudaSuccess);
    ASSERT_EQ(cudaStreamSynchronize(s_), cudaSuccess);
    for (std::size_t k = 0; k < kBuffer; k += 4099) {
      ASSERT_EQ(host[k], value) << "buffer " << i << " byte " << k;
    }
    ASSERT_EQ(host[kBuffer - 1], value);
  }
  // Buffer A of a_bytes (filled with fill) and B sixteen times kBuffer (fill + 1): A out
  // and back alone, then with B's eviction queued after A's, B also fetched (in A's
  // request, asked after A) where ask_b; work on A may run in less than twice the time
  // it took alone. Leaves A and B in bufs_.
  void a_out_and_back(um_engine& e, std::size_t a_bytes, int fill, bool ask_b) {
    const pool::allocation_result a = e.allocate(a_bytes, cu());
    const pool::allocation_result b = e.allocate(16 * kBuffer, cu());
    ASSERT_EQ(a.error, pool::pool_errc::ok);
    ASSERT_EQ(b.error, pool::pool_errc::ok);
    const byte_range ab[2] = {{reinterpret_cast<std::uintptr_t>(a.ptr), a_bytes},
                              {reinterpret_cast<std::uintptr_t>(b.ptr), 16 * kBuffer}};
    bufs_ = {ab[0].addr, ab[1].addr};
    ASSERT_TRUE(e.prepare({&ab[0], 1}, cu()));
    ASSERT_TRUE(e.prepare({&ab[1], 1}, cu()));
    ASSERT_EQ(cudaMemsetAsync(a.ptr, fill, a_bytes, s_), cudaSuccess);
    ASSERT_EQ(cudaMemsetAsync(b.ptr, fill + 1, 16 * kBuffer, s_), cudaSuccess);
    cudaEvent_t marks[4];
    for (cudaEvent_t& m : marks) ASSERT_EQ(cudaEventCreate(&m), cudaSuccess);
    for (int round = 0; round < 2; ++round) {
      ASSERT_EQ(cudaEventRecord(marks[2 * round], s_), cudaSuccess);
      ASSERT_TRUE(e.evict({&ab[0], 1}));
      if (round == 1) ASSERT_TRUE(e.evict({&ab[1], 1}));
      std::vector<byte_range> later;
      ASSERT_TRUE(e.prefetch_now({ab, round == 1 && ask_b ? 2u : 1u}, later));
      ASSERT_TRUE(later.empty());
      ASSERT_TRUE(e.prepare({&ab[0], 1}, cu()));
      ASSERT_EQ(cudaEventRecord(marks[2 * round + 1], s_), cudaSuccess);
      ASSERT_EQ(cudaStreamSynchronize(s_), cudaSuccess);
    }
    float alone = 0, with_b = 0;
    ASSERT_EQ(cudaEventElapsedTime(&alone, marks[0], marks[1]), cudaSuccess);
    ASSERT_EQ(cudaEventElapsedTime(&with_b, marks[2], marks[3]), cudaSuccess);
    for (cudaEvent_t m : marks) cudaEventDestroy(m);
    EXPECT_GT(alone, 0.0f);
    EXPECT_LT(with_b, 2 * alone) << "A alone took " << alone << " ms";
  }
  cudaStream_t s_ = nullptr;
  std::vector<std::uintptr_t> bufs_;
};

// See Note [um's mover] in residency/um_mover.cc: with the mover, the schedule's
// prefetches are enqueued by the engine's thread, each after the buffer's last use,
// and every byte is kept.
TEST_F(UmEngine, TheMoverEnqueuesTheSchedulesPrefetches) {
  um_engine e(0, 4 * kBuffer, false, true);
  ASSERT_NO_FATAL_FAILURE(filled(e, 0x10));
  ASSERT_NO_FATAL_FAILURE(rounds(e, 0x10, 3));
  e.stop_mover();
  const um_stats s = e.stats();
  EXPECT_GT(s.mover_prefetches, 0u);
  EXPECT_LE(s.mover_prefetches, s.prefetches_in + s.prefetches_out);
  EXPECT_LE(s.peak_resident_bytes, 4 * kBuffer);
  EXPECT_GE(s.prefetches_out, 3u * kBuffers);
}

// OVERSUB_MOVER=inline: the same moves, all enqueued by the launching thread.
TEST_F(UmEngine, InlineTheLaunchingThreadEnqueuesThem) {
  um_engine e(0, 4 * kBuffer, false, false);
  ASSERT_NO_FATAL_FAILURE(filled(e, 0x20));
  ASSERT_NO_FATAL_FAILURE(rounds(e, 0x20, 3));
  const um_stats s = e.stats();
  EXPECT_EQ(s.mover_prefetches, 0u);
  EXPECT_GE(s.prefetches_out, 3u * kBuffers);
}

// A buffer the schedule fetched ahead is used, after its fetch, on a second stream:
// the mover's work is waited for on that stream too.
TEST_F(UmEngine, AFetchedBufferUsedOnAnotherStream) {
  um_engine e(0, 4 * kBuffer, false, true);
  ASSERT_NO_FATAL_FAILURE(filled(e, 0x30));
  cudaStream_t other = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&other, cudaStreamNonBlocking), cudaSuccess);
  for (std::size_t i = 0; i < kBuffers; ++i) {
    const byte_range old = range((i + kBuffers - 3) % kBuffers);
    ASSERT_TRUE(e.evict({&old, 1}));
    const byte_range r = range(i);
    std::vector<byte_range> later;
    ASSERT_TRUE(e.prefetch_now({&r, 1}, later));
    ASSERT_TRUE(e.prepare({&r, 1}, reinterpret_cast<CUstream>(other)));
    ASSERT_EQ(cudaMemsetAsync(ptr(i), 0x60 + static_cast<int>(i), kBuffer, other),
              cudaSuccess);
    ASSERT_EQ(cudaStreamSynchronize(other), cudaSuccess);
  }
  for (std::size_t i = 0; i < kBuffers; ++i) {
    const byte_range r = range(i);
    ASSERT_TRUE(e.prepare({&r, 1}, cu()));
    expect_bytes(i, static_cast<unsigned char>(0x60 + i));
  }
  ASSERT_EQ(cudaStreamDestroy(other), cudaSuccess);
}

// See Note [Discarding freed buffers] in residency/um_engine.h: the schedule's freed
// buffers leave the device by discard, nothing migrated; the next owner of one sees its
// own bytes, whichever of its streams writes them (and work whose buffers are unknown
// waits for the discard too).
TEST_F(UmEngine, FreedBuffersLeaveByDiscardAndTheirNextOwnersComeAfter) {
  um_engine e(0, 4 * kBuffer, false, true);
  ASSERT_NO_FATAL_FAILURE(filled(e, 0x50));
  ASSERT_TRUE(e.evict({}));  // the schedule drives the moves: freed buffers stay put
  ASSERT_EQ(cudaStreamSynchronize(s_), cudaSuccess);
  // Buffers 4-7 are on the device; free 5 and 6 and have the schedule send them out.
  for (std::size_t i : {5, 6}) ASSERT_TRUE(e.deallocate(ptr(i), pool::no_stream));
  const um_stats before = e.stats();
  for (std::size_t i : {5, 6}) {
    const byte_range r = range(i);
    ASSERT_TRUE(e.evict({&r, 1}));
  }
  e.stop_mover();
  const um_stats after = e.stats();
  EXPECT_EQ(after.discards - before.discards, 2u);
  EXPECT_EQ(after.discarded_bytes - before.discarded_bytes, 2 * kBuffer);
  EXPECT_EQ(after.bytes_out, before.bytes_out) << "nothing migrated";
  EXPECT_EQ(after.resident_bytes, before.resident_bytes - 2 * kBuffer);
  // The same two buffers again (same size, same addresses), written on another stream
  // through work the engine knows only as "anything" (touch_all), and on s_ by a copy
  // (a reachable range: prepare moves nothing for it): both after the discards, or
  // simgpu's race detector aborts.
  cudaStream_t other = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&other, cudaStreamNonBlocking), cudaSuccess);
  const pool::allocation_result a = e.allocate(kBuffer, cu());
  const pool::allocation_result b = e.allocate(kBuffer, cu());
  ASSERT_EQ(a.error, pool::pool_errc::ok);
  ASSERT_EQ(b.error, pool::pool_errc::ok);
  e.touch_all(reinterpret_cast<CUstream>(other));
  ASSERT_EQ(cudaMemsetAsync(a.ptr, 0x71, kBuffer, other), cudaSuccess);
  const byte_range rb{reinterpret_cast<std::uintptr_t>(b.ptr), kBuffer, false, true};
  ASSERT_TRUE(e.prepare({&rb, 1}, cu()));
  ASSERT_EQ(cudaMemsetAsync(b.ptr, 0x72, kBuffer, s_), cudaSuccess);
  ASSERT_EQ(cudaStreamSynchronize(other), cudaSuccess);
  const byte_range ra{reinterpret_cast<std::uintptr_t>(a.ptr), kBuffer};
  ASSERT_TRUE(e.prepare({&ra, 1}, cu()));
  for (std::size_t i = 0; i < kBuffers; ++i) {
    if (bufs_[i] == ra.addr) expect_bytes(i, 0x71);
    else if (bufs_[i] == rb.addr) expect_bytes(i, 0x72);
    else expect_bytes(i, static_cast<unsigned char>(0x50 + i));
  }
  ASSERT_EQ(cudaStreamDestroy(other), cudaSuccess);
}

// A freed buffer read on two streams, the earlier read the longer: its discard waits
// for both, not only for the stream that used it last, or simgpu's race detector
// aborts (the discard writes the whole buffer for it).
TEST_F(UmEngine, ADiscardWaitsForEveryStreamThatMayStillReadTheBuffer) {
  um_engine e(0, 4 * kBuffer, false, true);
  ASSERT_NO_FATAL_FAILURE(filled(e, 0x60));
  ASSERT_TRUE(e.evict({}));
  ASSERT_EQ(cudaStreamSynchronize(s_), cudaSuccess);
  cudaStream_t slow = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&slow, cudaStreamNonBlocking), cudaSuccess);
  // Pinned host memory: a copy to or from pageable memory returns only once done.
  constexpr std::size_t kBig = std::size_t{128} << 20;
  unsigned char *big = nullptr, *host = nullptr, *host2 = nullptr;
  ASSERT_EQ(cudaMallocHost(reinterpret_cast<void**>(&big), kBig), cudaSuccess);
  ASSERT_EQ(cudaMallocHost(reinterpret_cast<void**>(&host), kBuffer), cudaSuccess);
  ASSERT_EQ(cudaMallocHost(reinterpret_cast<void**>(&host2), kBuffer), cudaSuccess);
  void* scratch = nullptr;
  ASSERT_EQ(cudaMalloc(&scratch, kBig), cudaSuccess);
  // On `slow`: a long copy, then a read of buffer 7; on s_, a quick read of it after.
  // The fences hear of both streams' work, as interpose/'s hooks tell them.
  pool::fences().note_work(reinterpret_cast<CUstream>(slow));
  pool::fences().note_work(cu());
  const byte_range r = range(7);
  ASSERT_TRUE(e.prepare({&r, 1}, reinterpret_cast<CUstream>(slow)));
  ASSERT_EQ(cudaMemcpyAsync(scratch, big, kBig, cudaMemcpyHostToDevice, slow), cudaSuccess);
  ASSERT_EQ(cudaMemcpyAsync(host, ptr(7), kBuffer, cudaMemcpyDeviceToHost, slow),
            cudaSuccess);
  ASSERT_TRUE(e.prepare({&r, 1}, cu()));
  ASSERT_EQ(cudaMemcpyAsync(host2, ptr(7), kBuffer, cudaMemcpyDeviceToHost, s_),
            cudaSuccess);
  ASSERT_TRUE(e.deallocate(ptr(7), pool::no_stream));
  ASSERT_TRUE(e.evict({&r, 1}));
  e.stop_mover();
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  EXPECT_EQ(e.stats().discards, 1u);
  EXPECT_EQ(host[kBuffer - 1], 0x67);
  EXPECT_EQ(host2[kBuffer - 1], 0x67);
  ASSERT_EQ(cudaFree(scratch), cudaSuccess);
  for (unsigned char* p : {big, host, host2}) ASSERT_EQ(cudaFreeHost(p), cudaSuccess);
  ASSERT_EQ(cudaStreamDestroy(slow), cudaSuccess);
}

// Run with SIMGPU_FAIL=prefetch:20 (one of the schedule's prefetches, enqueued by
// the mover, fails): the error reaches the application at its next prepare(), once,
// and no byte is lost (Note [um's mover] in residency/um_mover.cc).
// See Note [A move waits for its buffer's last move only] in residency/um_mover.cc: a
// fetch waits for the eviction of its own buffer, not for one queued after it (a
// sixteen times larger buffer's, which alone takes longer than the fetch and its own
// eviction together).
TEST_F(UmEngine, AFetchWaitsForItsOwnBuffersEvictionOnly) {
  um_engine e(0, 64 * kBuffer, false, true);
  ASSERT_NO_FATAL_FAILURE(a_out_and_back(e, kBuffer, 0x51, false));
  expect_bytes(0, 0x51);
  e.stop_mover();
}

// See Note [A fetch's own event] in residency/um_engine.cc: two buffers fetched in one
// request, the one used first asked first and as large as a job holds, so the second
// starts a job of its own: the work waits for the first one's fetch, not for the
// second's, which waits for its own eviction (an eight times larger buffer's, longer
// than the first's eviction and fetch together).
TEST_F(UmEngine, AFetchIsWaitedForWithoutTheFetchesAskedAfterIt) {
  um_engine e(0, 64 * kBuffer, false, true);
  ASSERT_NO_FATAL_FAILURE(a_out_and_back(e, kFetchJobBytes, 0x61, true));
  const byte_range b{bufs_[1], 16 * kBuffer};
  ASSERT_TRUE(e.prepare({&b, 1}, cu()));
  expect_bytes(0, 0x61);
  std::vector<unsigned char> host(16 * kBuffer);
  ASSERT_EQ(cudaMemcpy(host.data(), reinterpret_cast<void*>(bufs_[1]), host.size(),
                       cudaMemcpyDeviceToHost),
            cudaSuccess);
  EXPECT_EQ(host.front(), 0x62);
  EXPECT_EQ(host.back(), 0x62);
  e.stop_mover();
}

// See Note [A fetch's own event] in residency/um_engine.cc: a buffer fetched long
// before its use, some hundreds of the mover's jobs earlier, is still waited for by its
// own job's event, not by all that the fetch stream has queued since.
TEST_F(UmEngine, AFetchLongBeforeItsUseIsWaitedForByItsOwnJob) {
  um_engine e(0, 4 * kBuffer, false, true);
  ASSERT_NO_FATAL_FAILURE(filled(e, 0x70));
  // Buffer 7 out and fetched, then 600 jobs of buffers 5 and 6 going out and in (the
  // last four filled are the ones on the device).
  const byte_range first = range(7);
  const byte_range spare[2] = {range(5), range(6)};
  ASSERT_TRUE(e.evict({&first, 1}));
  std::vector<byte_range> later;
  ASSERT_TRUE(e.prefetch_now({&first, 1}, later));
  ASSERT_TRUE(later.empty());
  for (int k = 0; k < 300; ++k) {
    ASSERT_TRUE(e.evict({&spare[k % 2], 1}));
    ASSERT_TRUE(e.prefetch_now({&spare[k % 2], 1}, later));
    ASSERT_TRUE(later.empty());
  }
  ASSERT_TRUE(e.prepare({&first, 1}, cu()));
  expect_bytes(7, 0x77);
  e.stop_mover();
  EXPECT_EQ(e.stats().whole_stream_waits, 0u);
}

TEST_F(UmEngine, AFailedPrefetchReachesTheNextPrepare) {
  const char* fail = std::getenv("SIMGPU_FAIL");
  if (fail == nullptr || std::string_view(fail) != "prefetch:20") {
    GTEST_SKIP() << "run by the residency_um_engine_prefetch_fails test";
  }
  um_engine e(0, 4 * kBuffer, false, true);
  ASSERT_NO_FATAL_FAILURE(filled(e, 0x40));
  int failures = 0;
  for (int round = 0; round < 3; ++round) {
    for (std::size_t i = 0; i < kBuffers; ++i) {
      const byte_range old = range((i + kBuffers - 3) % kBuffers);
      (void)e.evict({&old, 1});
      const byte_range next = range((i + 1) % kBuffers);
      std::vector<byte_range> later;
      (void)e.prefetch_now({&next, 1}, later);
      const byte_range r = range(i);
      prepare_result p = e.prepare({&r, 1}, cu());
      if (!p) {
        ++failures;
        EXPECT_EQ(p.code, residency_errc::driver_error);
        EXPECT_EQ(p.driver, CUDA_ERROR_INVALID_VALUE);
        p = e.prepare({&r, 1}, cu());  // the error is reported once
        ASSERT_TRUE(p);
      }
      expect_bytes(i, static_cast<unsigned char>(0x40 + round * 16 + static_cast<int>(i)));
      ASSERT_EQ(cudaMemsetAsync(ptr(i), 0x40 + (round + 1) * 16 + static_cast<int>(i),
                                kBuffer, s_),
                cudaSuccess);
    }
  }
  e.stop_mover();
  EXPECT_EQ(failures, 1);
  EXPECT_GT(e.stats().mover_prefetches, 0u);
}

}  // namespace
}  // namespace oversub::residency
