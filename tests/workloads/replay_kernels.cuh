// replay_kernels.cuh: the generic kernel of oversub-replay (replay.cu) and the data
// pattern it checks, written once in CUDA C++ for nvcc and for simgpu.
//
// Note [The replay data check]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// Every buffer carries, at sample words spread evenly over its length (the first,
// the last, and at least one in every MiB, up to replay_max_samples), values the
// host can predict. What a buffer holds is a small state the host keeps and passes
// with every launch (replay_buffer):
//   - a base: every sample j holds replay_word(base_seed, j), written by the last
//     launch that used the buffer; or unknown (a fresh cudaMalloc holds garbage);
//   - up to replay_layers copies since, oldest first, each over a prefix of the
//     buffer: an H2D copy from a staging area holding replay_word(replay_staging_seed,
//     i) at word i, or a memset with a byte of the replay's choosing. A sample holds
//     the newest copy that covers it, else the base. (A third copy makes the base
//     unknown: fewer words checked, never a false alarm.)
// The kernel derives each sample's expected value from that state, compares every
// known one with the word, folds what it read into a running checksum, and writes
// replay_word(seed, j) back; the host's state becomes "base = seed". So a page of a
// buffer that comes back from host memory with old contents, one never fetched, or
// a word written by anyone else shows up as a mismatch at the buffer's next use,
// whichever launch that is. Every argument word other than the buffer pointers and
// byte counts has its top bit set, so none can look like a device address to
// oversub's argument scan.
//
// The kernel runs in one thread and touches only the samples, so replaying a big
// trace on simgpu takes seconds. The duration is modeled, not computed: on simgpu
// the footprint declares every buffer
// whole (the residency engine must move all of it, and simgpu checks every byte is
// accessible) and flops worth the recorded duration at the device's rate
// (calibrated by replay.cu), so the kernel takes max(recorded duration, its
// buffers' bytes / memory bandwidth). On a GPU the thread spins on %globaltimer for
// the recorded duration.
//
// Note [Footprint modes]
// ~~~~~~~~~~~~~~~~~~~~~~
// The buffers are declared read by default, so each byte counts once and a trace
// whose durations came from the same device model replays at its recorded times;
// with `writes` they are declared read and written, so simgpu's race detector sees
// the kernel's writes (stricter for testing oversub), and the bytes count twice.
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
// Copies a buffer's state remembers (Note [The replay data check]).
constexpr int replay_layers = 2;
// Sample words per buffer: at least 8 (or every word of a smaller buffer), one more
// per MiB, at most this many.
constexpr unsigned long long replay_max_samples = 4096;
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
REPLAY_HD inline unsigned long long replay_sample_count(unsigned long long words) {
  unsigned long long n = words / (1ULL << 18) + 8;  // 2^18 words: one MiB
  if (n > replay_max_samples) n = replay_max_samples;
  return n < words ? n : words;
}
REPLAY_HD inline unsigned long long replay_sample_word(unsigned long long words,
                                                       unsigned long long j) {
  const unsigned long long n = replay_sample_count(words);
  if (n == words) return j;
  return (words - 1) * j / (n - 1);
}

REPLAY_HD inline unsigned long long replay_fold(unsigned long long sum, unsigned int v) {
  return (sum ^ v) * 0x100000001b3ULL;
}

enum : unsigned int { replay_copy_staging = 1, replay_copy_memset = 2 };

// A copy over the first `bytes` of a buffer: words from the staging area, or the
// memset word `value`. (kind, value) has its top bit set.
struct replay_layer {
  unsigned long long bytes = 0;
  unsigned int kind = 0;
  unsigned int value = replay_guard;
};

// One buffer of a launch and what it holds (Note [The replay data check]).
struct replay_buffer {
  unsigned int* words = nullptr;       // the buffer's device address
  unsigned long long bytes = 0;
  unsigned int id = 0;                 // index in the profile's allocations
  unsigned int state = replay_guard;   // bit 0: the base is known; bits 1-2: layers
  unsigned int base_seed = replay_guard;
  unsigned int seed = replay_guard;    // what to write: replay_word(seed, j)
  replay_layer layers[replay_layers];
};

// The expected value of word w of a buffer in state r, false when unknown.
REPLAY_HD inline bool replay_expected(const replay_buffer& r, unsigned long long w,
                                      unsigned long long j, unsigned int* value) {
  const unsigned int layers = (r.state >> 1) & 3u;
  for (unsigned int l = layers; l-- > 0;) {
    const replay_layer& c = r.layers[l];
    if ((w + 1) * 4 > c.bytes) continue;
    *value = c.kind == replay_copy_memset
                 ? c.value
                 : replay_word(replay_staging_seed, static_cast<unsigned int>(w));
    return true;
  }
  if ((r.state & 1u) == 0) return false;
  *value = replay_word(r.base_seed, static_cast<unsigned int>(j));
  return true;
}

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
    const unsigned long long n = replay_sample_count(words);
    for (unsigned long long j = 0; j < n; ++j) {
      const unsigned long long w = replay_sample_word(words, j);
      const unsigned int v = r.words[w];
      unsigned int want = 0;
      if (replay_expected(r, w, j, &want)) {
        ++st->words_checked;
        sum = replay_fold(sum, v);
        if (v != want) {
          if (st->mismatches == 0) {
            st->launch = a.launch;
            st->iteration = a.iteration;
            st->buffer = r.id;
            st->sample = static_cast<unsigned int>(j);
            st->word = w;
            st->expected = want;
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
