// cudaMemGetInfo under OVERSUB_DEVICE_LIMIT, on simgpu. Prints the reported total
// and free, allocates 16 MiB and prints them again, then tries one allocation
// larger than what is reported free, printing its return code and that nothing
// was allocated. The preload test compares the numbers with the limit it set.
#include <cuda_runtime_api.h>

#include <cstdio>

int main() {
  size_t free_bytes = 0, total_bytes = 0;
  if (cudaMemGetInfo(&free_bytes, &total_bytes) != cudaSuccess) return 3;
  std::printf("before total %zu free %zu\n", total_bytes, free_bytes);
  void* p = nullptr;
  const size_t chunk = size_t{16} << 20;
  if (cudaMalloc(&p, chunk) != cudaSuccess) return 4;
  if (cudaMemGetInfo(&free_bytes, &total_bytes) != cudaSuccess) return 5;
  std::printf("after total %zu free %zu\n", total_bytes, free_bytes);
  void* big = nullptr;
  const cudaError_t rc = cudaMalloc(&big, free_bytes + (size_t{1} << 20));
  std::printf("over %d %s\n", static_cast<int>(rc), big == nullptr ? "null" : "allocated");
  if (big != nullptr) cudaFree(big);
  if (cudaFree(p) != cudaSuccess) return 6;
  if (cudaMemGetInfo(&free_bytes, &total_bytes) != cudaSuccess) return 7;
  std::printf("freed total %zu free %zu\n", total_bytes, free_bytes);
  return 0;
}
