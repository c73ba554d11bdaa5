// kernels.cuh: simtrain's kernels, written once in CUDA C++ for nvcc and for
// simgpu (which runs them on the host, one CUDA thread at a time).
//
// Every kernel computes one output element (or one row, one column, one scalar) per
// thread with a fixed-order inner loop, so results are bit-identical from run to run
// on a GPU as well: no shared memory, no atomics, no __syncthreads, no reduction
// whose order depends on scheduling. Matrices are row-major float. Each kernel is
// registered with its exact footprint (the bytes it reads and writes, its flops) for
// simgpu's race detector and virtual clock; under nvcc KERNEL_FOOTPRINT is empty.
#ifndef SIMTRAIN_KERNELS_CUH
#define SIMTRAIN_KERNELS_CUH

#include <cmath>
#include <cstddef>

#include "gpu_compat.h"

// c[m x n] = a[m x k] * b[n x k]^T   (forward: activations times weights^T)
__global__ void matmul_nt(const float* a, const float* b, float* c, int m, int n, int k) {
  int i = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x);
  if (i >= m * n) return;
  const float* ar = a + static_cast<std::size_t>(i / n) * k;
  const float* br = b + static_cast<std::size_t>(i % n) * k;
  float acc = 0.0f;
  for (int p = 0; p < k; ++p) acc += ar[p] * br[p];
  c[i] = acc;
}
KERNEL_FOOTPRINT(matmul_nt, [](simgpu::footprint& fp, const float* a, const float* b,
                               float* c, int m, int n, int k) {
  fp.read(a, static_cast<std::size_t>(m) * k);
  fp.read(b, static_cast<std::size_t>(n) * k);
  fp.write(c, static_cast<std::size_t>(m) * n);
  fp.flops(2.0 * m * n * k);
});

// c[m x n] = a[m x k] * b[k x n]   (input gradient: output gradient times weights)
__global__ void matmul_nn(const float* a, const float* b, float* c, int m, int n, int k) {
  int i = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x);
  if (i >= m * n) return;
  int row = i / n;
  int col = i % n;
  const float* ar = a + static_cast<std::size_t>(row) * k;
  float acc = 0.0f;
  for (int p = 0; p < k; ++p) acc += ar[p] * b[static_cast<std::size_t>(p) * n + col];
  c[i] = acc;
}
KERNEL_FOOTPRINT(matmul_nn, [](simgpu::footprint& fp, const float* a, const float* b,
                               float* c, int m, int n, int k) {
  fp.read(a, static_cast<std::size_t>(m) * k);
  fp.read(b, static_cast<std::size_t>(k) * n);
  fp.write(c, static_cast<std::size_t>(m) * n);
  fp.flops(2.0 * m * n * k);
});

// c[m x n] = a[k x m]^T * b[k x n]   (weight gradient: output gradient^T times input)
__global__ void matmul_tn(const float* a, const float* b, float* c, int m, int n, int k) {
  int i = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x);
  if (i >= m * n) return;
  int row = i / n;
  int col = i % n;
  float acc = 0.0f;
  for (int p = 0; p < k; ++p) {
    acc += a[static_cast<std::size_t>(p) * m + row] * b[static_cast<std::size_t>(p) * n + col];
  }
  c[i] = acc;
}
KERNEL_FOOTPRINT(matmul_tn, [](simgpu::footprint& fp, const float* a, const float* b,
                               float* c, int m, int n, int k) {
  fp.read(a, static_cast<std::size_t>(k) * m);
  fp.read(b, static_cast<std::size_t>(k) * n);
  fp.write(c, static_cast<std::size_t>(m) * n);
  fp.flops(2.0 * m * n * k);
});

// z[rows x cols] += bias (per column), then ReLU when relu != 0; in place.
__global__ void bias_act(float* z, const float* bias, int rows, int cols, int relu) {
  int i = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x);
  if (i >= rows * cols) return;
  float v = z[i] + bias[i % cols];
  z[i] = (relu != 0 && v < 0.0f) ? 0.0f : v;
}
KERNEL_FOOTPRINT(bias_act, [](simgpu::footprint& fp, float* z, const float* bias, int rows,
                              int cols, int) {
  fp.readwrite(z, static_cast<std::size_t>(rows) * cols);
  fp.read(bias, static_cast<std::size_t>(cols));
  fp.flops(2.0 * rows * cols);
});

// out = grad where the ReLU output act was positive, else 0.
__global__ void relu_backward(const float* grad, const float* act, float* out, int n) {
  int i = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x);
  if (i >= n) return;
  out[i] = act[i] > 0.0f ? grad[i] : 0.0f;
}
KERNEL_FOOTPRINT(relu_backward, [](simgpu::footprint& fp, const float* grad,
                                   const float* act, float* out, int n) {
  fp.read(grad, static_cast<std::size_t>(n));
  fp.read(act, static_cast<std::size_t>(n));
  fp.write(out, static_cast<std::size_t>(n));
  fp.flops(n);
});

// out = a + b   (the residual connection)
__global__ void residual_add(const float* a, const float* b, float* out, int n) {
  int i = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x);
  if (i >= n) return;
  out[i] = a[i] + b[i];
}
KERNEL_FOOTPRINT(residual_add, [](simgpu::footprint& fp, const float* a, const float* b,
                                  float* out, int n) {
  fp.read(a, static_cast<std::size_t>(n));
  fp.read(b, static_cast<std::size_t>(n));
  fp.write(out, static_cast<std::size_t>(n));
  fp.flops(n);
});

// dst += src   (the skip connection's gradient joining the branch's)
__global__ void accumulate(float* dst, const float* src, int n) {
  int i = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x);
  if (i >= n) return;
  dst[i] += src[i];
}
KERNEL_FOOTPRINT(accumulate, [](simgpu::footprint& fp, float* dst, const float* src,
                                int n) {
  fp.readwrite(dst, static_cast<std::size_t>(n));
  fp.read(src, static_cast<std::size_t>(n));
  fp.flops(n);
});

// out[c] = sum over rows of g[r][c], rows in order   (bias gradient)
__global__ void column_sum(const float* g, float* out, int rows, int cols) {
  int c = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x);
  if (c >= cols) return;
  float acc = 0.0f;
  for (int r = 0; r < rows; ++r) acc += g[static_cast<std::size_t>(r) * cols + c];
  out[c] = acc;
}
KERNEL_FOOTPRINT(column_sum, [](simgpu::footprint& fp, const float* g, float* out,
                                int rows, int cols) {
  fp.read(g, static_cast<std::size_t>(rows) * cols);
  fp.write(out, static_cast<std::size_t>(cols));
  fp.flops(static_cast<double>(rows) * cols);
});

// row_loss[r] = sum over columns of (y - t)^2, columns in order.
__global__ void squared_error_rows(const float* y, const float* t, float* row_loss,
                                   int rows, int cols) {
  int r = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x);
  if (r >= rows) return;
  const float* yr = y + static_cast<std::size_t>(r) * cols;
  const float* tr = t + static_cast<std::size_t>(r) * cols;
  float acc = 0.0f;
  for (int c = 0; c < cols; ++c) {
    float d = yr[c] - tr[c];
    acc += d * d;
  }
  row_loss[r] = acc;
}
KERNEL_FOOTPRINT(squared_error_rows, [](simgpu::footprint& fp, const float* y,
                                        const float* t, float* row_loss, int rows,
                                        int cols) {
  fp.read(y, static_cast<std::size_t>(rows) * cols);
  fp.read(t, static_cast<std::size_t>(rows) * cols);
  fp.write(row_loss, static_cast<std::size_t>(rows));
  fp.flops(3.0 * rows * cols);
});

// *out = scale * (v[0] + v[1] + ... + v[n-1]), in that order; one thread.
__global__ void sum_scaled(const float* v, float* out, int n, float scale) {
  if (blockIdx.x * blockDim.x + threadIdx.x != 0) return;
  float acc = 0.0f;
  for (int i = 0; i < n; ++i) acc += v[i];
  *out = acc * scale;
}
KERNEL_FOOTPRINT(sum_scaled, [](simgpu::footprint& fp, const float* v, float* out, int n,
                                float) {
  fp.read(v, static_cast<std::size_t>(n));
  fp.write(out, 1);
  fp.flops(n + 1.0);
});

// dy = scale * (y - t)   (gradient of the mean squared error, scale = 2 / count)
__global__ void squared_error_grad(const float* y, const float* t, float* dy, int n,
                                   float scale) {
  int i = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x);
  if (i >= n) return;
  dy[i] = scale * (y[i] - t[i]);
}
KERNEL_FOOTPRINT(squared_error_grad, [](simgpu::footprint& fp, const float* y,
                                        const float* t, float* dy, int n, float) {
  fp.read(y, static_cast<std::size_t>(n));
  fp.read(t, static_cast<std::size_t>(n));
  fp.write(dy, static_cast<std::size_t>(n));
  fp.flops(2.0 * n);
});

// Adam on element i of one tensor: the arithmetic every Adam kernel below shares, so
// all of them give the same bits. inv_bias1 = 1 / (1 - beta1^t) and
// inv_bias2 = 1 / (1 - beta2^t) are computed on the host.
__host__ __device__ inline void adam_element(float* w, const float* g, float* m, float* v,
                                             int i, float lr, float beta1, float beta2,
                                             float eps, float inv_bias1, float inv_bias2) {
  float gi = g[i];
  float mi = beta1 * m[i] + (1.0f - beta1) * gi;
  float vi = beta2 * v[i] + (1.0f - beta2) * (gi * gi);
  m[i] = mi;
  v[i] = vi;
  float m_hat = mi * inv_bias1;
  float v_hat = vi * inv_bias2;
  w[i] = w[i] - lr * m_hat / (sqrtf(v_hat) + eps);
}

// One Adam step on n parameters, the bias corrections by value.
__global__ void adam_step(float* w, const float* g, float* m, float* v, int n, float lr,
                          float beta1, float beta2, float eps, float inv_bias1,
                          float inv_bias2) {
  int i = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x);
  if (i >= n) return;
  adam_element(w, g, m, v, i, lr, beta1, beta2, eps, inv_bias1, inv_bias2);
}
KERNEL_FOOTPRINT(adam_step, [](simgpu::footprint& fp, float* w, const float* g, float* m,
                               float* v, int n, float, float, float, float, float,
                               float) {
  std::size_t count = static_cast<std::size_t>(n);
  fp.readwrite(w, count);
  fp.read(g, count);
  fp.readwrite(m, count);
  fp.readwrite(v, count);
  fp.flops(12.0 * n);
});

// The same with the bias corrections read from device memory (bias[0] = inv_bias1,
// bias[1] = inv_bias2), uploaded before each step: what a step captured once in a
// CUDA graph needs (PyTorch's capturable Adam keeps its step count on the device).
__global__ void adam_step_dev(float* w, const float* g, float* m, float* v, int n, float lr,
                              float beta1, float beta2, float eps, const float* bias) {
  int i = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x);
  if (i >= n) return;
  adam_element(w, g, m, v, i, lr, beta1, beta2, eps, bias[0], bias[1]);
}
KERNEL_FOOTPRINT(adam_step_dev, [](simgpu::footprint& fp, float* w, const float* g, float* m,
                                   float* v, int n, float, float, float, float,
                                   const float* bias) {
  std::size_t count = static_cast<std::size_t>(n);
  fp.readwrite(w, count);
  fp.read(g, count);
  fp.readwrite(m, count);
  fp.readwrite(v, count);
  fp.read(bias, 2);
  fp.flops(12.0 * n);
});

// --pointer-arrays: Adam over every layer in one launch, the tensors found through a
// device array of pointers (as cublasSgemmBatched's pointer arrays or a fused
// optimizer's tensor table): tensors[4 t + 0..3] are tensor t's parameters, gradient
// and two moments, counts[t] its element count. Grid: x over the largest count, y over
// the tensors.
//
// Note [Footprints that hide the chased buffers]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// The footprint declares only what the arguments point at (the pointer array, the
// counts, the bias corrections), never the buffers the kernel reaches through them:
// an interposer that scans launch arguments cannot see those either, so only
// real-access tracking (a GPU's page faults, simgpu's fault-driven windows) finds
// them. The kernel declares each element it reaches through the table to simgpu
// (REACH_READ, REACH_READWRITE: exact ranges for the race detector; Note [Accesses a
// kernel really makes] in tests/simgpu/driver/fault.h); anything else it touched
// would still fault and be recorded by the page. simtrain orders these accesses with
// the same events as the per-layer step.
__global__ void adam_pointer_array(float* const* tensors, const int* counts, int ntensors,
                                   float lr, float beta1, float beta2, float eps,
                                   const float* bias, long long total_elements) {
  int t = static_cast<int>(blockIdx.y);
  int i = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x);
  if (t >= ntensors || i >= counts[t]) return;
  const std::size_t base = static_cast<std::size_t>(t) * 4;
  float* w = tensors[base];
  const float* g = tensors[base + 1];
  float* m = tensors[base + 2];
  float* v = tensors[base + 3];
  REACH_READWRITE(w + i, 1);
  REACH_READ(g + i, 1);
  REACH_READWRITE(m + i, 1);
  REACH_READWRITE(v + i, 1);
  adam_element(w, g, m, v, i, lr, beta1, beta2, eps, bias[0], bias[1]);
  (void)total_elements;
}
KERNEL_FOOTPRINT(adam_pointer_array, [](simgpu::footprint& fp, float* const* tensors,
                                        const int* counts, int ntensors, float, float, float,
                                        float, const float* bias, long long total_elements) {
  fp.read(tensors, static_cast<std::size_t>(ntensors) * 4);
  fp.read(counts, static_cast<std::size_t>(ntensors));
  fp.read(bias, 2);
  fp.flops(12.0 * static_cast<double>(total_elements));
});

// --foreach: the tensor list of one multi-tensor Adam launch, passed by value as
// PyTorch's multi_tensor_apply passes its TensorListMetadata. Room for
// kForeachCapacity tensors makes the block 6920 bytes: the v pointers start at byte
// 4608, past the 4 KiB a launch's parameters were classically limited to (CUDA 12.1
// allows 32764 bytes on Volta and later), so a scanner that stops at 4 KiB misses
// them.
constexpr int kForeachCapacity = 192;
struct adam_tensor_list {
  float* w[kForeachCapacity];
  const float* g[kForeachCapacity];
  float* m[kForeachCapacity];
  float* v[kForeachCapacity];
  int count[kForeachCapacity];
  int tensors;
};
static_assert(sizeof(adam_tensor_list) > 4096, "the point is a parameter block over 4 KiB");

// Tensors per launch: all the list holds on a GPU; on simgpu as many as a footprint can
// name (SIMGPU_MAX_ACCESSES ranges: four per tensor and the bias corrections), so the
// footprint stays exact. Either way the bits are those of the per-layer step.
#ifdef __CUDACC__
constexpr int kForeachTensorsPerLaunch = kForeachCapacity;
#else
constexpr int kForeachTensorsPerLaunch = (SIMGPU_MAX_ACCESSES - 1) / 4;
#endif

__global__ void adam_foreach(adam_tensor_list list, float lr, float beta1, float beta2,
                             float eps, const float* bias) {
  int t = static_cast<int>(blockIdx.y);
  int i = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x);
  if (t >= list.tensors || i >= list.count[t]) return;
  adam_element(list.w[t], list.g[t], list.m[t], list.v[t], i, lr, beta1, beta2, eps, bias[0],
               bias[1]);
}
KERNEL_FOOTPRINT(adam_foreach, [](simgpu::footprint& fp, adam_tensor_list list, float, float,
                                  float, float, const float* bias) {
  double elements = 0.0;
  for (int t = 0; t < list.tensors; ++t) {
    std::size_t count = static_cast<std::size_t>(list.count[t]);
    fp.readwrite(list.w[t], count);
    fp.read(list.g[t], count);
    fp.readwrite(list.m[t], count);
    fp.readwrite(list.v[t], count);
    elements += static_cast<double>(count);
  }
  fp.read(bias, 2);
  fp.flops(12.0 * elements);
});

#endif  // SIMTRAIN_KERNELS_CUH
