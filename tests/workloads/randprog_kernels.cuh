// randprog_kernels.cuh: the kernels of randprog (randprog.cu), written once in CUDA
// C++ for nvcc and for simgpu, in the style of simtrain's kernels.cuh.
//
// Every kernel computes one output element per thread (the sum, one scalar in one
// thread) with fixed-order arithmetic: no shared memory, atomics or __syncthreads,
// so results are bit-identical from run to run. Values stay bounded: each output
// goes through softsign(v) = v / (1 + |v|), which lies in (-1, 1), and weights stay
// in [-2, 2]. Buffers of different sizes are combined by indexing the smaller one
// modulo its length. Each kernel is registered with its exact footprint for
// simgpu's race detector and virtual clock (empty under nvcc).
#ifndef RANDPROG_KERNELS_CUH
#define RANDPROG_KERNELS_CUH

#include <cmath>
#include <cstddef>

#include "gpu_compat.h"

#ifdef __CUDACC__
#define RANDPROG_HD __host__ __device__
#else
#define RANDPROG_HD
#endif

RANDPROG_HD inline float rp_softsign(float v) { return v / (1.0f + fabsf(v)); }

// A forward layer: out[i] = softsign(w[i % wn] * prev[i % np] + 0.5 * skip[(3i+1) % ns]
// + 0.125); skip may be null (ns = 0).
__global__ void rp_forward(const float* prev, int np, const float* skip, int ns,
                           const float* w, int wn, float* out, int n) {
  int i = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x);
  if (i >= n) return;
  std::size_t k = static_cast<std::size_t>(i);
  float v = w[k % static_cast<std::size_t>(wn)] * prev[k % static_cast<std::size_t>(np)];
  if (skip != nullptr) v += 0.5f * skip[(3 * k + 1) % static_cast<std::size_t>(ns)];
  out[i] = rp_softsign(v + 0.125f);
}
KERNEL_FOOTPRINT(rp_forward, [](simgpu::footprint& fp, const float* prev, int np,
                                const float* skip, int ns, const float* w, int wn,
                                float* out, int n) {
  fp.read(prev, static_cast<std::size_t>(np));
  if (skip != nullptr) fp.read(skip, static_cast<std::size_t>(ns));
  fp.read(w, static_cast<std::size_t>(wn));
  fp.write(out, static_cast<std::size_t>(n));
  fp.flops(5.0 * n);
});

// A backward step: out[j] = softsign(g[j % ng] * w[j % wn] + 0.25 * act[j % na]);
// act may be null (the activation was not kept), then its term is left out.
__global__ void rp_backward(const float* g, int ng, const float* w, int wn,
                            const float* act, int na, float* out, int n) {
  int j = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x);
  if (j >= n) return;
  std::size_t k = static_cast<std::size_t>(j);
  float v = g[k % static_cast<std::size_t>(ng)] * w[k % static_cast<std::size_t>(wn)];
  if (act != nullptr) v += 0.25f * act[k % static_cast<std::size_t>(na)];
  out[j] = rp_softsign(v);
}
KERNEL_FOOTPRINT(rp_backward, [](simgpu::footprint& fp, const float* g, int ng,
                                 const float* w, int wn, const float* act, int na,
                                 float* out, int n) {
  fp.read(g, static_cast<std::size_t>(ng));
  fp.read(w, static_cast<std::size_t>(wn));
  if (act != nullptr) fp.read(act, static_cast<std::size_t>(na));
  fp.write(out, static_cast<std::size_t>(n));
  fp.flops(5.0 * n);
});

// dst[i] = softsign(dst[i] + 0.5 * src[i % ns])   (a skip's gradient joining)
__global__ void rp_accumulate(float* dst, int n, const float* src, int ns) {
  int i = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x);
  if (i >= n) return;
  std::size_t k = static_cast<std::size_t>(i);
  dst[i] = rp_softsign(dst[i] + 0.5f * src[k % static_cast<std::size_t>(ns)]);
}
KERNEL_FOOTPRINT(rp_accumulate, [](simgpu::footprint& fp, float* dst, int n,
                                   const float* src, int ns) {
  fp.readwrite(dst, static_cast<std::size_t>(n));
  fp.read(src, static_cast<std::size_t>(ns));
  fp.flops(4.0 * n);
});

// The weight update: w[i] = 0.875 * w[i] + 0.125 * softsign(g[i % ng]); keeps w in
// [-2, 2] when it starts there.
__global__ void rp_update(float* w, int wn, const float* g, int ng) {
  int i = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x);
  if (i >= wn) return;
  std::size_t k = static_cast<std::size_t>(i);
  w[i] = 0.875f * w[i] + 0.125f * rp_softsign(g[k % static_cast<std::size_t>(ng)]);
}
KERNEL_FOOTPRINT(rp_update, [](simgpu::footprint& fp, float* w, int wn, const float* g,
                               int ng) {
  fp.readwrite(w, static_cast<std::size_t>(wn));
  fp.read(g, static_cast<std::size_t>(ng));
  fp.flops(6.0 * wn);
});

// The same update with the weights found at table[slot] (--pointer-arrays 1), as a
// kernel chasing a device array of pointers does. The footprint names the table and
// g, not the weights (Note [Footprints that hide the chased buffers] in
// tests/workloads/kernels.cuh): only real-access tracking finds them; each thread
// declares the element it updates through the loaded pointer (REACH_READWRITE).
__global__ void rp_update_indirect(float* const* table, int slot, int wn, const float* g,
                                   int ng) {
  int i = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x);
  if (i >= wn) return;
  float* w = table[slot];
  REACH_READWRITE(w + i, 1);
  std::size_t k = static_cast<std::size_t>(i);
  w[i] = 0.875f * w[i] + 0.125f * rp_softsign(g[k % static_cast<std::size_t>(ng)]);
}
KERNEL_FOOTPRINT(rp_update_indirect, [](simgpu::footprint& fp, float* const* table, int slot,
                                        int wn, const float* g, int ng) {
  fp.read(table + slot, 1);
  fp.read(g, static_cast<std::size_t>(ng));
  fp.flops(6.0 * wn);
});

// out[slot] = v[0] + v[1] + ... + v[n-1], in that order; one thread.
__global__ void rp_sum(const float* v, int n, float* out, int slot) {
  if (blockIdx.x * blockDim.x + threadIdx.x != 0) return;
  float acc = 0.0f;
  for (int i = 0; i < n; ++i) acc += v[i];
  out[slot] = acc;
}
KERNEL_FOOTPRINT(rp_sum, [](simgpu::footprint& fp, const float* v, int n, float* out,
                            int slot) {
  fp.read(v, static_cast<std::size_t>(n));
  fp.write(out + slot, 1);
  fp.flops(n);
});

#endif  // RANDPROG_KERNELS_CUH
