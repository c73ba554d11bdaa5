// The guard every exported hook runs its work under (hooks.cc, driver_hooks.cc,
// driver_real.cc).
//
// Note [Nothing crosses the ABI edge]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// A hook is an extern "C" function called by
// code that knows nothing of C++ exceptions (the CUDA runtime, cuBLAS, a Python
// extension), and it is declared noexcept, so an exception leaving it would end the
// application's process. What a hook does may throw: the learned schedule allocates
// and sorts before a launch, the tracker grows its maps, a log line is formatted. So
// the handlers below the exported functions are not noexcept; each exported function
// runs its whole body in one try block, and what reaches it is turned into CUDA's own
// answer for a call that failed: cudaErrorMemoryAllocation / CUDA_ERROR_OUT_OF_MEMORY
// for std::bad_alloc, cudaErrorUnknown / CUDA_ERROR_UNKNOWN for anything else, logged
// once (the first at error level, naming the function and what was thrown). The
// re-entrancy guard and every lock on the way are scoped objects, so the next call
// finds the state as it was.
#ifndef OVERSUB_INTERPOSE_ABI_GUARD_H
#define OVERSUB_INTERPOSE_ABI_GUARD_H

#include <cuda.h>
#include <cuda_runtime_api.h>

#include <atomic>

namespace oversub::interpose {

// Called from inside a catch block of hook `symbol`: the runtime's or the driver's
// code for the exception being handled (logged once).
cudaError_t runtime_code_of_thrown(const char* symbol) noexcept;
CUresult driver_code_of_thrown(const char* symbol) noexcept;
// The same for a lookup's answer (dlsym, cuGetProcAddress): logged once, and the
// real function it would have replaced handed back untouched.
void* answer_on_thrown(const char* what, void* untouched) noexcept;
// The same for oversub's own exported functions that return nothing.
void drop_thrown(const char* symbol) noexcept;

// Note [A test-only fault point]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// OVERSUB_TEST_THROW=<name>[:bad_alloc|:runtime_error],
// read once when the library loads, makes test_throw_point(name) throw (std::bad_alloc
// by default). name is an exported hook's symbol (the throw comes from the hook's
// guarded body, before its handler) or schedule_before_launch (from inside a swap or
// um launch, just before the learned schedule is consulted). For the preload tests of
// the guard only; not an option of oversub's, and never set by the oversub command.
extern std::atomic<bool> g_test_throw_armed;
void test_throw_named(const char* name);
inline void test_throw_point(const char* name) {
  if (g_test_throw_armed.load(std::memory_order_relaxed)) test_throw_named(name);
}

}  // namespace oversub::interpose

#endif  // OVERSUB_INTERPOSE_ABI_GUARD_H
