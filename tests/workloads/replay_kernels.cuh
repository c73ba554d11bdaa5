// replay_kernels.cuh: the generic kernel of oversub-replay (replay.cu) and the data
// pattern it checks, written once in CUDA C++ for nvcc and for simgpu.
//
// Note [The replay data check]
// Every buffer carries, at up to replay_samples 32-bit words spread over its length
// (the first, the last and evenly between), values the host can predict. A
// replayed launch passes, for each of its buffers, the values the host expects
// there (and which of them are known: a fresh cudaMalloc holds garbage) and a
// seed; the kernel compares every known word with its expectation, folds what it
// read into a running checksum, and writes replay_word(seed, j) back. The host
// then expects those. Copies write predictable values too (an H2D copy from a
// staging area of replay_word(replay_staging_seed, i), a memset one repeated byte).
// So a buffer that comes back from host memory with old contents, or one never
// fetched, or written by anyone else, shows up as a mismatch at its next use,
// whichever launch that is. Every pattern word has its top bit set, so no 8-byte
// word of the arguments other than the buffer pointers can look like a device
// address to oversub's argument scan.
//
// The kernel runs in one thread: it touches at most replay_samples words per buffer
// however large the buffer, so replaying a big trace on simgpu takes seconds. The
// duration is modeled, not computed: on simgpu the footprint declares every buffer
// whole (the residency engine must move all of it, and simgpu checks every byte is
// accessible) and flops worth the recorded duration at the device's rate
// (calibrated by replay.cu), so the kernel takes max(recorded duration, its
// buffers' bytes / memory bandwidth). Note [Footprint modes]: the buffers are
// declared read by default, so each byte counts once and a trace whose durations
// came from the same device model replays at its recorded times; with
// `writes` they are declared read and written, so simgpu's race detector sees the
// kernel's writes (stricter for testing oversub), and the bytes count twice. On a
// GPU the thread spins on %globaltimer for the recorded duration.
//
// A mismatch is written to a replay_status in mapped pinned host memory, which the
// host reads after each iteration: not a device allocation, so the launches use
// exactly the trace's buffers.
#ifndef REPLAY_KERNELS_CUH
#define REPLAY_KERNELS_CUH

#include <cstddef>
#include <cstdint>

#include "gpu_compat.h"

#ifdef __CUDACC__
#define REPLAY_HD __host__ __device__
#else
#define REPLAY_HD
#endif

// Most buffers one replayed launch takes: simgpu's footprint holds 32 ranges
// (SIMGPU_MAX_ACCESSES). A trace launch with more is replayed as several.
constexpr int replay_max_buffers = 32;
// Words checked and rewritten per buffer.
constexpr int replay_samples = 8;
constexpr unsigned int replay_staging_seed = 0x5eed5eedu;
constexpr unsigned int replay_guard = 0x80000000u;

// The value sample `sample` gets from `seed`: a 32-bit mix with the top bit set.
REPLAY_HD inline unsigned int replay_word(unsigned int seed, unsigned int sample) {
  unsigned int x = seed * 0x9E3779B1u + sample * 0x85EBCA77u + 0x165667B1u;
  x ^= x >> 15;
  x *= 0x2C1B3C6Du;
  x ^= x >> 12;
  x *= 0x297A2D39u;
  x ^= x >> 15;
  return x | replay_guard;
}

// Samples of a buffer of `words` 32-bit words, and the word index of sample j.
REPLAY_HD inline int replay_sample_count(unsigned long long words) {
  return words < static_cast<unsigned long long>(replay_samples) ? static_cast<int>(words)
                                                                 : replay_samples;
}
REPLAY_HD inline unsigned long long replay_sample_word(unsigned long long words, int j) {
  if (words <= static_cast<unsigned long long>(replay_samples)) {
    return static_cast<unsigned long long>(j);
  }
  return (words - 1) * static_cast<unsigned long long>(j) / (replay_samples - 1);
}

REPLAY_HD inline unsigned long long replay_fold(unsigned long long sum, unsigned int v) {
  return (sum ^ v) * 0x100000001b3ULL;
}

// One buffer of a launch. Every 8-byte word is the pointer, the byte count, or has
// its top bit set (Note [The replay data check]).
struct replay_buffer {
  unsigned int* words = nullptr;       // the buffer's device address
  unsigned long long bytes = 0;
  unsigned int id = 0;                 // index in the profile's allocations
  unsigned int known = replay_guard;   // bit j: expect[j] holds; bit 31 always set
  unsigned int expect[replay_samples] = {};
  unsigned int seed = 0;               // what to write: replay_word(seed, j)
  unsigned int guard = replay_guard;
};

// The first mismatch and the running totals, in mapped pinned host memory.
struct replay_status {
  unsigned long long checksum = 0xcbf29ce484222325ULL;  // over every known word read
  unsigned long long words_checked = 0;
  unsigned long long mismatches = 0;
  unsigned int launch = 0;      // the first mismatch: trace launch index,
  unsigned int iteration = 0;   // iteration,
  unsigned int buffer = 0;      // allocation index,
  unsigned int sample = 0;      // sample and
  unsigned long long word = 0;  // word index in the buffer,
  unsigned int expected = 0;    // and the values
  unsigned int found = 0;
};

struct replay_args {
  replay_status* status = nullptr;  // device view of the mapped status
  unsigned long long duration_ns = 0;
  double flops_per_ns = 0;          // simgpu's compute rate (the footprint's flops)
  unsigned int launch = 0;          // trace launch index, for reports
  unsigned int iteration = 0;
  unsigned int count = 0;           // buffers used
  unsigned int writes = 0;          // simgpu: 1 declares the buffers written as well
  replay_buffer buffers[replay_max_buffers];
};

__global__ void replay_kernel(replay_args a) {
  if (blockIdx.x != 0 || threadIdx.x != 0) return;
#ifdef __CUDACC__
  unsigned long long start = 0;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
#endif
  replay_status* st = a.status;
  unsigned long long sum = st->checksum;
  for (unsigned int b = 0; b < a.count; ++b) {
    const replay_buffer& r = a.buffers[b];
    const unsigned long long words = r.bytes / 4;
    const int n = replay_sample_count(words);
    for (int j = 0; j < n; ++j) {
      const unsigned long long w = replay_sample_word(words, j);
      const unsigned int v = r.words[w];
      if ((r.known >> j) & 1u) {
        ++st->words_checked;
        sum = replay_fold(sum, v);
        if (v != r.expect[j]) {
          if (st->mismatches == 0) {
            st->launch = a.launch;
            st->iteration = a.iteration;
            st->buffer = r.id;
            st->sample = static_cast<unsigned int>(j);
            st->word = w;
            st->expected = r.expect[j];
            st->found = v;
          }
          ++st->mismatches;
        }
      }
      r.words[w] = replay_word(r.seed, static_cast<unsigned int>(j));
    }
  }
  st->checksum = sum;
#ifdef __CUDACC__
  unsigned long long now = start;
  while (now - start < a.duration_ns) asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
#endif
}
KERNEL_FOOTPRINT(replay_kernel, [](simgpu::footprint& fp, replay_args a) {
  for (unsigned int b = 0; b < a.count; ++b) {
    auto* p = reinterpret_cast<unsigned char*>(a.buffers[b].words);
    const auto bytes = static_cast<std::size_t>(a.buffers[b].bytes);
    if (a.writes != 0) fp.readwrite(p, bytes);
    else fp.read(p, bytes);
  }
  fp.flops(static_cast<double>(a.duration_ns) * a.flops_per_ns);
});

// Does nothing for `flops` worth of time: measures simgpu's compute rate.
__global__ void replay_calibrate(double flops) { (void)flops; }
KERNEL_FOOTPRINT(replay_calibrate, [](simgpu::footprint& fp, double flops) {
  fp.flops(flops);
});

#endif  // REPLAY_KERNELS_CUH
