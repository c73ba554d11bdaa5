// Kernels of the runtime/CUPTI smoke test, written with simgpu/kernel.h.
#include "simgpu/kernel.h"

__global__ void axpy(float* y, const float* x, float a, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] += a * x[i];
}
SIMGPU_KERNEL(axpy);

__global__ void fill(float* y, float v, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = v;
}
SIMGPU_KERNEL_FOOTPRINT(fill, [](simgpu::footprint& fp, float* y, float, int n) {
  fp.write(y, n);
  fp.flops(n);
});
