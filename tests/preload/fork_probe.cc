// A child forked after CUDA use, on simgpu. The parent allocates (and keeps) 8 MiB,
// forks; the child calls cudaMalloc of `child_mib` MiB and cudaFree, prints both
// return codes and leaves with exit(0), running the library's destructors. CUDA
// does not survive fork (simgpu, like a GPU, answers cudaErrorInitializationError in
// the child), so the codes are whatever CUDA says; the preload test compares them
// with a run without the library. The parent waits, checks the child exited
// normally, frees its own allocation and prints "parent ok".
#include <cuda_runtime_api.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>

int main(int argc, char** argv) {
  const size_t child_mib = argc > 1 ? std::strtoul(argv[1], nullptr, 10) : 64;
  void* mine = nullptr;
  if (cudaMalloc(&mine, size_t{8} << 20) != cudaSuccess) return 3;
  if (cudaMemset(mine, 1, size_t{8} << 20) != cudaSuccess) return 4;
  if (cudaDeviceSynchronize() != cudaSuccess) return 5;
  std::fflush(stdout);
  const pid_t child = fork();
  if (child < 0) return 6;
  if (child == 0) {
    void* p = nullptr;
    const cudaError_t malloc_rc = cudaMalloc(&p, child_mib << 20);
    const cudaError_t free_rc = cudaFree(p);
    std::printf("child malloc %d\nchild free %d\n", static_cast<int>(malloc_rc),
                static_cast<int>(free_rc));
    std::fflush(stdout);
    std::exit(0);
  }
  int status = 0;
  if (waitpid(child, &status, 0) != child) return 7;
  if (!WIFEXITED(status)) {
    std::printf("child died (status %d)\n", status);
    return 8;
  }
  std::printf("child exit %d\n", WEXITSTATUS(status));
  if (cudaFree(mine) != cudaSuccess) return 9;
  std::printf("parent ok\n");
  return WEXITSTATUS(status) == 0 ? 0 : 1;
}
