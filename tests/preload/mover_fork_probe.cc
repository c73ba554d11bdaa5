// A child forked while swap mode's mover thread works (Note [The mover] in
// residency/swap_mover.cc), on simgpu. The parent fills `buffers` buffers of 2 MiB,
// buffer i with byte i, more than the device holds (the test sets SIMGPU_MEMORY), so
// pages are evicting when it forks without waiting for the device. The child calls
// cudaMalloc and cudaFree, prints both return codes and leaves with exit(0), running
// the exit handlers (the library's among them). The parent waits for it, reads every
// buffer back, checks its bytes, frees them and prints "parent ok".
//
// An exit handler registered before any CUDA call, and so run after every handler
// registered later (the library's that stops the mover among them), prints the
// number of threads the process still has ("parent threads at exit N", "child
// threads at exit N"): the test compares it with a run without the library.
#include <cuda_runtime_api.h>
#include <dirent.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <vector>

namespace {

constexpr size_t kBufferBytes = size_t{2} << 20;
pid_t g_parent = 0;

int threads() {
  DIR* d = opendir("/proc/self/task");
  if (d == nullptr) return -1;
  int n = 0;
  while (dirent* e = readdir(d)) {
    if (e->d_name[0] != '.') ++n;
  }
  closedir(d);
  return n;
}

void report_threads() {
  std::printf("%s threads at exit %d\n", getpid() == g_parent ? "parent" : "child", threads());
  std::fflush(stdout);
}

}  // namespace

int main(int argc, char** argv) {
  g_parent = getpid();
  if (std::atexit(report_threads) != 0) return 2;
  const int buffers = argc > 1 ? std::atoi(argv[1]) : 32;
  std::vector<unsigned char*> bufs(static_cast<size_t>(buffers), nullptr);
  for (int i = 0; i < buffers; ++i) {
    if (cudaMalloc(reinterpret_cast<void**>(&bufs[i]), kBufferBytes) != cudaSuccess) return 3;
    if (cudaMemset(bufs[i], i & 0xff, kBufferBytes) != cudaSuccess) return 4;
  }
  std::fflush(stdout);
  const pid_t child = fork();
  if (child < 0) return 6;
  if (child == 0) {
    void* p = nullptr;
    const cudaError_t malloc_rc = cudaMalloc(&p, size_t{64} << 20);
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
  std::vector<unsigned char> back(kBufferBytes);
  int wrong = 0;
  for (int i = 0; i < buffers; ++i) {
    if (cudaMemcpy(back.data(), bufs[i], kBufferBytes, cudaMemcpyDeviceToHost) != cudaSuccess)
      return 9;
    for (unsigned char b : back) {
      if (b != (i & 0xff)) {
        ++wrong;
        break;
      }
    }
    if (cudaFree(bufs[i]) != cudaSuccess) return 10;
  }
  if (wrong != 0) {
    std::printf("%d buffers read back wrong\n", wrong);
    return 11;
  }
  std::printf("parent ok\n");
  return WEXITSTATUS(status) == 0 ? 0 : 1;
}
