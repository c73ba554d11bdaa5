// The exception guard of the exported hooks and the test-only fault point (see
// abi_guard.h, Note [Nothing crosses the ABI edge] in interpose/abi_guard.h).
#include "interpose/abi_guard.h"

#include <cstdlib>
#include <cstring>
#include <exception>
#include <new>
#include <stdexcept>

#include "common/log.h"

namespace oversub::interpose {

std::atomic<bool> g_test_throw_armed{false};

namespace {

std::atomic<bool> g_thrown_logged{false};

// What is being handled, for the log line: whether it is an out-of-memory, and its
// description. Only called inside a catch block.
struct thrown {
  bool out_of_memory;
  const char* what;
};

thrown current_thrown() noexcept {
  try {
    throw;
  } catch (const std::bad_alloc& e) {
    return {true, e.what()};
  } catch (const std::exception& e) {
    return {false, e.what()};
  } catch (...) {
    return {false, "an exception that is not a std::exception"};
  }
}

// Logs the exception being handled (the first at error level, later ones at debug);
// returns whether it is std::bad_alloc.
bool log_thrown(const char* symbol, const char* oom_outcome, const char* other_outcome) noexcept {
  const thrown t = current_thrown();
  const bool first = !g_thrown_logged.exchange(true, std::memory_order_relaxed);
  log::emit(first ? log::level::error : log::level::debug,
            "{}: oversub's own work inside the call failed ({}: {}); {} and the "
            "application goes on",
            symbol, t.out_of_memory ? "out of host memory, std::bad_alloc" : "exception thrown",
            t.what, t.out_of_memory ? oom_outcome : other_outcome);
  return t.out_of_memory;
}

// See Note [A test-only fault point] in interpose/abi_guard.h.
char g_test_throw_name[128];
bool g_test_throw_runtime_error = false;

__attribute__((constructor)) void read_test_throw() {
  const char* v = std::getenv("OVERSUB_TEST_THROW");
  if (v == nullptr || *v == '\0') return;
  const char* colon = std::strchr(v, ':');
  const std::size_t n = colon != nullptr ? static_cast<std::size_t>(colon - v) : std::strlen(v);
  if (n >= sizeof g_test_throw_name) return;
  std::memcpy(g_test_throw_name, v, n);
  g_test_throw_name[n] = '\0';
  g_test_throw_runtime_error = colon != nullptr && std::strcmp(colon + 1, "runtime_error") == 0;
  g_test_throw_armed.store(true, std::memory_order_relaxed);
}

}  // namespace

cudaError_t runtime_code_of_thrown(const char* symbol) noexcept {
  return log_thrown(symbol, "the call returns cudaErrorMemoryAllocation",
                    "the call returns cudaErrorUnknown")
             ? cudaErrorMemoryAllocation
             : cudaErrorUnknown;
}

CUresult driver_code_of_thrown(const char* symbol) noexcept {
  return log_thrown(symbol, "the call returns CUDA_ERROR_OUT_OF_MEMORY",
                    "the call returns CUDA_ERROR_UNKNOWN")
             ? CUDA_ERROR_OUT_OF_MEMORY
             : CUDA_ERROR_UNKNOWN;
}

void drop_thrown(const char* symbol) noexcept {
  constexpr const char* outcome = "the call does nothing";
  log_thrown(symbol, outcome, outcome);
}

void* answer_on_thrown(const char* what, void* untouched) noexcept {
  constexpr const char* outcome = "the driver's function is answered unwrapped";
  log_thrown(what, outcome, outcome);
  return untouched;
}

void test_throw_named(const char* name) {
  if (name == nullptr || std::strcmp(name, g_test_throw_name) != 0) return;
  if (g_test_throw_runtime_error) throw std::runtime_error("OVERSUB_TEST_THROW fault point");
  throw std::bad_alloc();
}

}  // namespace oversub::interpose
