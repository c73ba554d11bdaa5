// randprog for simgpu: the CUDA source compiled by the host compiler, its kernels
// registered with simgpu through gpu_compat.h (see randprog.cu).
#include "randprog.cu"
