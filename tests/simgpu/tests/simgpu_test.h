// Helpers shared by simgpu's own tests: CUDA status assertions, driver entry points
// reached the way a CUDA program reaches them (dlopen of libcuda.so.1), the device
// model the run selected (read from the same .model file simgpu reads, so no model
// figure is written twice), and a subprocess runner for behaviour that ends a
// process (faults, the race detector's exit status, malformed settings).
//
// Everything here is header-only and used by the gtest programs in this folder.
#ifndef SIMGPU_TESTS_SIMGPU_TEST_H
#define SIMGPU_TESTS_SIMGPU_TEST_H

#include <cuda.h>
#include <cuda_runtime.h>
#include <dlfcn.h>
#include <fcntl.h>
#include <poll.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cctype>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include <gtest/gtest.h>

extern char** environ;

// Asserts a runtime call succeeded, naming the error otherwise.
#define CUDA_OK(expr)                                                             \
  do {                                                                            \
    cudaError_t simgpu_test_err_ = (expr);                                        \
    ASSERT_EQ(simgpu_test_err_, cudaSuccess)                                      \
        << #expr << " -> " << cudaGetErrorName(simgpu_test_err_);                 \
  } while (0)

// Asserts a driver call succeeded.
#define CU_OK(expr)                                                               \
  do {                                                                            \
    CUresult simgpu_test_res_ = (expr);                                           \
    ASSERT_EQ(simgpu_test_res_, CUDA_SUCCESS) << #expr << " -> " << simgpu_test_res_; \
  } while (0)

namespace simgpu_test {

// A driver API function looked up by its exported name (e.g. "cuMemAlloc_v2") in
// libcuda.so.1, as any CUDA program's dlopen would find it. Throws when absent so a
// missing entry point fails the test that needs it, not the whole program.
template <typename F>
F driver(const char* symbol) {
  static void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_GLOBAL);
  if (lib == nullptr) throw std::runtime_error(std::string("dlopen libcuda.so.1: ") + dlerror());
  void* p = dlsym(lib, symbol);
  if (p == nullptr) throw std::runtime_error(std::string("libcuda.so.1 lacks ") + symbol);
  return reinterpret_cast<F>(p);
}
// The name is macro-expanded first, so cuda.h's renames (cuMemAlloc -> cuMemAlloc_v2)
// give the symbol the header's prototype belongs to.
#define SIMGPU_TEST_STR2(x) #x
#define SIMGPU_TEST_STR(x) SIMGPU_TEST_STR2(x)
#define SIMGPU_DRV(name) ::simgpu_test::driver<decltype(&name)>(SIMGPU_TEST_STR(name))

// ---- Device model ----------------------------------------------------------------

// The key = value pairs of one device model file (<dir>/<name>.model). Comments (#)
// and surrounding blanks are dropped; keys are kept as written.
class device_model {
 public:
  // The model this process runs on: $SIMGPU_DEVICE (default h100-pcie) in
  // $SIMGPU_DEVICE_DIR.
  static device_model current() {
    const char* name = std::getenv("SIMGPU_DEVICE");
    return load(name != nullptr && *name != '\0' ? name : "h100-pcie");
  }

  // A model by name (<$SIMGPU_DEVICE_DIR>/<name>.model) or, like SIMGPU_DEVICE, by path.
  static device_model load(const std::string& name) {
    device_model m;
    if (name.find('/') != std::string::npos) {
      m.path_ = name;
    } else {
      const char* dir = std::getenv("SIMGPU_DEVICE_DIR");
      if (dir == nullptr) throw std::runtime_error("SIMGPU_DEVICE_DIR is not set");
      m.path_ = std::string(dir) + "/" + name + ".model";
    }
    std::ifstream in(m.path_);
    if (!in) throw std::runtime_error("cannot read " + m.path_);
    std::string line;
    while (std::getline(in, line)) {
      std::size_t c = line.find('#');
      if (c != std::string::npos) line.erase(c);
      std::size_t eq = line.find('=');
      if (eq == std::string::npos) continue;
      m.values_[trim(line.substr(0, eq))] = trim(line.substr(eq + 1));
    }
    return m;
  }

  const std::string& path() const { return path_; }
  bool has(const std::string& key) const { return values_.count(key) != 0; }

  std::string text(const std::string& key) const {
    auto it = values_.find(key);
    if (it == values_.end()) throw std::runtime_error(path_ + " has no key " + key);
    return it->second;
  }

  // The first of the given keys present, as a number. Plain numbers, scientific
  // notation and binary/decimal size suffixes (KiB, MiB, GiB, TiB, K, M, G, T, kB,
  // MB, GB, TB) are accepted; a trailing unit word after a blank is ignored.
  double number(std::initializer_list<const char*> keys) const {
    for (const char* k : keys) {
      if (has(k)) return parse_number(text(k));
    }
    std::string all;
    for (const char* k : keys) all += std::string(all.empty() ? "" : "|") + k;
    throw std::runtime_error(path_ + " has none of the keys " + all);
  }

  const std::map<std::string, std::string>& values() const { return values_; }

  static double parse_number(const std::string& s) {
    std::size_t used = 0;
    double v = std::stod(s, &used);
    std::string unit = trim(s.substr(used));
    std::size_t sp = unit.find(' ');
    if (sp != std::string::npos) unit.erase(sp);
    static const std::map<std::string, double> scale = {
        {"", 1},        {"B", 1},       {"KiB", 0x1p10}, {"MiB", 0x1p20}, {"GiB", 0x1p30},
        {"TiB", 0x1p40}, {"K", 1e3},     {"M", 1e6},      {"G", 1e9},      {"T", 1e12},
        {"kB", 1e3},    {"KB", 1e3},    {"MB", 1e6},     {"GB", 1e9},     {"TB", 1e12}};
    auto it = scale.find(unit);
    return it == scale.end() ? v : v * it->second;
  }

 private:
  static std::string trim(std::string s) {
    while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.pop_back();
    std::size_t i = 0;
    while (i < s.size() && std::isspace(static_cast<unsigned char>(s[i]))) ++i;
    s.erase(0, i);
    if (s.size() >= 2 && s.front() == '"' && s.back() == '"') s = s.substr(1, s.size() - 2);
    return s;
  }

  std::string path_;
  std::map<std::string, std::string> values_;
};

// ---- Subprocesses ----------------------------------------------------------------

struct process_result {
  int exit_code = -1;    // valid when !signaled
  int signal = 0;        // the terminating signal, when signaled
  bool signaled = false;
  std::string out, err;
};

// Runs argv with this process's environment plus `set` (a value of nullopt removes
// the variable), capturing stdout and stderr.
using env_settings = std::map<std::string, std::optional<std::string>>;
inline process_result run_process(const std::vector<std::string>& argv,
                                  const env_settings& set = {}) {
  std::vector<std::string> env_strings;
  for (char** e = environ; *e != nullptr; ++e) {
    std::string kv(*e);
    std::string key = kv.substr(0, kv.find('='));
    if (set.count(key) == 0) env_strings.push_back(kv);
  }
  for (const auto& [k, v] : set) {
    if (v) env_strings.push_back(k + "=" + *v);
  }
  std::vector<char*> envp, args;
  for (auto& s : env_strings) envp.push_back(s.data());
  envp.push_back(nullptr);
  std::vector<std::string> argv_copy = argv;
  for (auto& s : argv_copy) args.push_back(s.data());
  args.push_back(nullptr);

  int out_pipe[2], err_pipe[2];
  if (pipe2(out_pipe, O_CLOEXEC) != 0 || pipe2(err_pipe, O_CLOEXEC) != 0)
    throw std::runtime_error("pipe");
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, out_pipe[1], 1);
  posix_spawn_file_actions_adddup2(&fa, err_pipe[1], 2);
  pid_t pid = 0;
  int rc = posix_spawn(&pid, args[0], &fa, nullptr, args.data(), envp.data());
  posix_spawn_file_actions_destroy(&fa);
  close(out_pipe[1]);
  close(err_pipe[1]);
  if (rc != 0) {
    close(out_pipe[0]);
    close(err_pipe[0]);
    throw std::runtime_error("posix_spawn " + argv[0] + ": " + std::strerror(rc));
  }
  process_result r;
  pollfd fds[2] = {{out_pipe[0], POLLIN, 0}, {err_pipe[0], POLLIN, 0}};
  int open_fds = 2;
  char buf[4096];
  while (open_fds > 0) {
    if (poll(fds, 2, -1) < 0) break;
    for (int i = 0; i < 2; ++i) {
      if (fds[i].fd < 0 || fds[i].revents == 0) continue;
      ssize_t n = read(fds[i].fd, buf, sizeof buf);
      if (n <= 0) {
        close(fds[i].fd);
        fds[i].fd = -1;
        --open_fds;
      } else {
        (i == 0 ? r.out : r.err).append(buf, static_cast<std::size_t>(n));
      }
    }
  }
  int status = 0;
  waitpid(pid, &status, 0);
  if (WIFSIGNALED(status)) {
    r.signaled = true;
    r.signal = WTERMSIG(status);
  } else {
    r.exit_code = WEXITSTATUS(status);
  }
  return r;
}

// Describes a result for a failure message.
inline std::string describe(const process_result& r) {
  std::string s = r.signaled ? "killed by signal " + std::to_string(r.signal)
                             : "exit status " + std::to_string(r.exit_code);
  return s + "\n--- stdout ---\n" + r.out + "--- stderr ---\n" + r.err;
}

// The value printed as `key=<value>` (up to the next blank or line end) in text, or
// an empty string.
inline std::string field(const std::string& text, const std::string& key) {
  std::size_t pos = 0;
  while ((pos = text.find(key + "=", pos)) != std::string::npos) {
    if (pos == 0 || std::isspace(static_cast<unsigned char>(text[pos - 1]))) {
      std::size_t b = pos + key.size() + 1;
      std::size_t e = text.find_first_of(" \t\n", b);
      return text.substr(b, e == std::string::npos ? std::string::npos : e - b);
    }
    pos += key.size();
  }
  return {};
}

// Every hexadecimal address (0x...) that follows `after` in text, in order.
inline std::vector<std::uintptr_t> addresses_after(const std::string& text,
                                                   const std::string& after) {
  std::vector<std::uintptr_t> found;
  std::size_t pos = 0;
  while ((pos = text.find(after, pos)) != std::string::npos) {
    pos += after.size();
    std::size_t x = text.find("0x", pos);
    if (x == std::string::npos) break;
    found.push_back(static_cast<std::uintptr_t>(std::strtoull(text.c_str() + x, nullptr, 16)));
  }
  return found;
}

}  // namespace simgpu_test

#endif  // SIMGPU_TESTS_SIMGPU_TEST_H
