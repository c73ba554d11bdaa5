// dlsym, as the rest of the process sees it with liboversub preloaded: glibc's
// answer, except that a libcuda function we intercept comes back as our hook
// (Note [Three ways to the driver] in interpose/driver_hooks.h).
//
// Note [Whose dlsym]
// ~~~~~~~~~~~~~~~~~~
// The export is dlsym@@GLIBC_2.34 and dlsym@GLIBC_2.2.5 (on
// x86-64; GLIBC_2.17 on aarch64), the versions callers bind to (CUDA's libraries
// were linked against the old one, anything built on glibc 2.34 or later against the
// new), so a versioned reference finds ours first in the preload order. glibc's own
// is found once with dlvsym(RTLD_NEXT, "dlsym", version), which nothing of ours
// answers. Inside liboversub, every dlsym call reaches glibc's directly
// (glibc_compat.cc's __wrap_dlsym), never this export.
//
// Note [Honouring the caller's handle]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// glibc resolves RTLD_NEXT (and RTLD_DEFAULT
// for objects loaded privately) relative to the object its caller is in, which it
// reads from its return address. So the export is a small assembly trampoline: it
// asks oversub_dlsym_answer(handle, name) whether the call is ours; when not (every
// RTLD_NEXT query, every name that is not one of our driver exports) it jumps to
// glibc's dlsym with the caller's own return address still on the stack, exactly as
// if the caller had called glibc. A wrapper that called glibc itself would make
// RTLD_NEXT search after liboversub, and a library that wraps a function and asks
// for the next one would get its own wrapper back and recurse forever. For our own
// names with an explicit handle, glibc is asked with that handle (the caller does
// not matter then); with RTLD_DEFAULT it is asked for the first definition after
// liboversub, which is what the caller would reach through us.
#include <dlfcn.h>

#include <atomic>

#include "interpose/driver_hooks.h"

namespace {

using dlsym_fn = void* (*)(void*, const char*);

}  // namespace

extern "C" {

// Read by the trampoline: glibc's dlsym, and the answer that means "ask glibc".
__attribute__((visibility("hidden"))) std::atomic<void*> oversub_glibc_dlsym{nullptr};
__attribute__((visibility("hidden"))) char oversub_dlsym_forward = 0;

// glibc's dlsym (looked up once; the first lookup may race, both store the same).
__attribute__((visibility("hidden"))) void* oversub_real_dlsym() noexcept {
  void* p = oversub_glibc_dlsym.load(std::memory_order_acquire);
  if (p != nullptr) return p;
  p = dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.34");
  if (p == nullptr) {
    // Before glibc 2.34 there is no such version. The failed lookup left a message
    // for dlerror(), which the caller of the dlsym that got us here would read as
    // its own: take it.
    dlerror();
#if defined(__aarch64__)
    p = dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.17");
#else
    p = dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.2.5");
#endif
  }
  oversub_glibc_dlsym.store(p, std::memory_order_release);
  return p;
}

__attribute__((visibility("hidden"))) void* oversub_dlsym_answer(void* handle,
                                                                 const char* name) noexcept {
  const auto glibc = reinterpret_cast<dlsym_fn>(oversub_real_dlsym());
  if (glibc == nullptr) return nullptr;
  // Not a driver name, or RTLD_NEXT: glibc answers, for the caller (Note [Honouring
  // the caller's handle]).
  if (handle == RTLD_NEXT || name == nullptr || name[0] != 'c' || name[1] != 'u') {
    return &oversub_dlsym_forward;
  }
  void* p = glibc(handle == RTLD_DEFAULT ? RTLD_NEXT : handle, name);
  return oversub::interpose::driver_answer_for_symbol(name, p);
}

}  // extern "C"

#if defined(__x86_64__)
// oversub_dlsym_entry(handle, name): %rdi, %rsi are saved across the call to the
// answer (the stack stays 16-byte aligned at that call), then either the answer is
// returned or glibc's dlsym is tail-jumped to with the caller's arguments and return
// address.
__asm__(R"(
  .text
  .p2align 4
  .globl oversub_dlsym_entry
  .type oversub_dlsym_entry, @function
oversub_dlsym_entry:
  .cfi_startproc
  pushq %rdi
  .cfi_adjust_cfa_offset 8
  pushq %rsi
  .cfi_adjust_cfa_offset 8
  subq $8, %rsp
  .cfi_adjust_cfa_offset 8
  call oversub_dlsym_answer
  addq $8, %rsp
  .cfi_adjust_cfa_offset -8
  popq %rsi
  .cfi_adjust_cfa_offset -8
  popq %rdi
  .cfi_adjust_cfa_offset -8
  leaq oversub_dlsym_forward(%rip), %rcx
  cmpq %rcx, %rax
  je 1f
  ret
1:
  jmpq *oversub_glibc_dlsym(%rip)
  .cfi_endproc
  .size oversub_dlsym_entry, .-oversub_dlsym_entry
  .symver oversub_dlsym_entry, dlsym@@GLIBC_2.34
  .globl oversub_dlsym_entry_compat
  .set oversub_dlsym_entry_compat, oversub_dlsym_entry
  .symver oversub_dlsym_entry_compat, dlsym@GLIBC_2.2.5
)");
#else
// Elsewhere a plain wrapper: correct for every handle but RTLD_NEXT, which then
// searches after liboversub instead of after the caller (Note [Honouring the
// caller's handle]).
extern "C" __attribute__((visibility("default"))) void* oversub_dlsym_entry(
    void* handle, const char* name) noexcept {
  void* answer = oversub_dlsym_answer(handle, name);
  if (answer != &oversub_dlsym_forward) return answer;
  return reinterpret_cast<dlsym_fn>(oversub_glibc_dlsym.load(std::memory_order_acquire))(
      handle, name);
}
__asm__(".symver oversub_dlsym_entry, dlsym@@GLIBC_2.34");
__asm__(".symver oversub_dlsym_entry_compat, dlsym@GLIBC_2.17");
__asm__(".globl oversub_dlsym_entry_compat\n.set oversub_dlsym_entry_compat, oversub_dlsym_entry");
#endif
