// The driver side of the interposer: libcuda's entry points (interpose/driver_hooks.def),
// reached the way the CUDA runtime, cuBLAS, cuDNN, JAX and TensorFlow reach them:
// through cuGetProcAddress(_v2), the runtime's cudaGetDriverEntryPoint(ByVersion),
// dlsym on a dlopen'ed libcuda, or a direct link.
//
// Note [Three ways to the driver]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// 1. cuGetProcAddress: the runtime dlopens libcuda, dlsyms cuGetProcAddress_v2 once
//    and asks it for every other function. Our dlsym answers that with our
//    cuGetProcAddress_v2, which asks the real one and replaces the answer with our
//    hook for the same ABI when Note [Answering by version] (driver_table.h) says the
//    requested (symbol, version, per-thread flag) is an ABI we intercept.
// 2. dlsym(handle, "cuMemAlloc_v2") on libcuda: our dlsym (dlsym_hook.cc) answers our
//    hook when the real answer is libcuda's function of that exact name.
// 3. A direct link (-lcuda): the hooks are exported under their own names.
// Every answer keeps the real function it stands for (the first one seen per ABI;
// See Note [One real function per ABI] in interpose/driver_real.cc), and a hook
// called while hooks are inactive (Note [When hooks pass through] in real.h: the
// runtime's own driver calls inside our runtime hooks, a fork child,
// OVERSUB_MODE=off) only forwards to it.
#ifndef OVERSUB_INTERPOSE_DRIVER_HOOKS_H
#define OVERSUB_INTERPOSE_DRIVER_HOOKS_H

#include <cstddef>

namespace oversub::interpose {

// Defined in driver_real.cc (the lookups and answers) and driver_hooks.cc (the
// handlers and exported hooks; the names below).

// dlsym's part (dlsym_hook.cc): for a name that is one of our driver exports and a
// real answer p from libcuda (or from wherever the handle led), our hook; else p.
// Both answers are p itself when something throws on the way (see Note [Nothing
// crosses the ABI edge] in interpose/abi_guard.h).
void* driver_answer_for_symbol(const char* name, void* p) noexcept;

// cudaGetDriverEntryPoint(ByVersion)'s part: the runtime's answer p to a query for
// symbol at version with flags (cudaEnable*: 0 default, 1 legacy, 2 per-thread;
// default_per_thread: what a default query means for this caller), replaced by our
// hook where the version table says so.
void* driver_answer_for_query(const char* symbol, int version, unsigned long long flags,
                              bool default_per_thread, void* p) noexcept;

// The driver's free and total memory of the current context's device (real
// cuMemGetInfo_v2); false without a driver or a context.
bool driver_mem_info(std::size_t* free_bytes, std::size_t* total_bytes) noexcept;

// Names of the driver hooks, for the per-entry-point call counts.
const char* const* driver_hook_names() noexcept;
std::size_t driver_hook_names_count() noexcept;

}  // namespace oversub::interpose

#endif  // OVERSUB_INTERPOSE_DRIVER_HOOKS_H
