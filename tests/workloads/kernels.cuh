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

// One Adam step on n parameters; inv_bias1 = 1 / (1 - beta1^t) and
// inv_bias2 = 1 / (1 - beta2^t) are computed on the host.
__global__ void adam_step(float* w, const float* g, float* m, float* v, int n, float lr,
                          float beta1, float beta2, float eps, float inv_bias1,
                          float inv_bias2) {
  int i = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x);
  if (i >= n) return;
  float gi = g[i];
  float mi = beta1 * m[i] + (1.0f - beta1) * gi;
  float vi = beta2 * v[i] + (1.0f - beta2) * (gi * gi);
  m[i] = mi;
  v[i] = vi;
  float m_hat = mi * inv_bias1;
  float v_hat = vi * inv_bias2;
  w[i] = w[i] - lr * m_hat / (sqrtf(v_hat) + eps);
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

#endif  // SIMTRAIN_KERNELS_CUH
