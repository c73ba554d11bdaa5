// A kernel that keeps the GPU busy for a given time, for the GPU kit's programs
// (gpu_facts.cc, hazard_probe.cc), built by nvcc for a GPU and against simgpu.
//
// gpu_spin(ns, flops) spins for `ns` nanoseconds of %globaltimer on a GPU. On simgpu
// the body does nothing and the footprint's `flops` give it a virtual duration: each
// program measures simgpu's rate (two launches that differ only in flops, timed with
// events) and passes ns times that rate; on a GPU `flops` is unused.
#ifndef OVERSUB_TESTS_GPU_SPIN_KERNEL_CUH
#define OVERSUB_TESTS_GPU_SPIN_KERNEL_CUH

#include "simgpu/kernel.h"

__global__ void gpu_spin(unsigned long long ns, double flops) {
#ifdef __CUDACC__
  (void)flops;
  if (blockIdx.x != 0 || threadIdx.x != 0) return;
  unsigned long long start = 0, now = 0;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
  do {
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
  } while (now - start < ns);
#else
  (void)ns;
  (void)flops;
#endif
}
SIMGPU_KERNEL_FOOTPRINT(gpu_spin, [](simgpu::footprint& fp, unsigned long long, double flops) {
  fp.flops(flops);
});

#endif  // OVERSUB_TESTS_GPU_SPIN_KERNEL_CUH
