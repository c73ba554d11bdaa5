// oversub-replay for simgpu: the CUDA source compiled by the host compiler, its
// kernels registered with simgpu through gpu_compat.h (see replay.cu).
#include "replay.cu"
