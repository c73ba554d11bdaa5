// glibc_compat.cc: lets liboversub.so, built on a new glibc, load on glibc 2.31 and
// later (a GPU machine's distribution is often older than the development one).
//
// Note [Older glibc]
// ~~~~~~~~~~~~~~~~~~
// A library linked on glibc 2.36 binds each symbol to its newest version, and the
// dynamic loader refuses the library where that version does not exist. Ours are
// few, and come mostly from the statically linked libstdc++ and libgcc:
//   arc4random (2.36)             libstdc++'s std::random_device (never called here)
//   _dl_find_object (2.35)        libgcc's unwinder, to find a frame's .eh_frame
//   __libc_single_threaded (2.32) libstdc++'s reference counts and static guards
//   dl*, pthread_*, sem_* (2.34)  moved from libdl and libpthread into libc in 2.34,
//                                 where they also keep their GLIBC_2.2.5 version
// interpose/meson.build links with `-Wl,--wrap=<name>` for each of them, which sends
// every reference, the archives' included, to `__wrap_<name>` below:
// - the 2.34 functions call the same function at its GLIBC_2.2.5 version (`.symver`
//   on an undefined alias). Before 2.34 those live in libdl.so.2 and libpthread.so.0,
//   so the library also names both in NEEDED (they are stubs on newer glibc);
// - arc4random reads getrandom(2) (GLIBC_2.25);
// - _dl_find_object calls the loader's own where it exists (looked up once at load)
//   and otherwise finds the object and its PT_GNU_EH_FRAME with dl_iterate_phdr, as
//   libgcc did before glibc 2.35;
// - __libc_single_threaded is a constant 0 ("threads may exist"): libstdc++ then
//   always takes its atomic paths, which is what a process with CUDA's threads does.
// tests/abi/check_abi.py (case needed) fails if any symbol needs a version > 2.31;
// a new one is fixed by adding it to the --wrap list and to the list below.
#include <dlfcn.h>
#include <link.h>
#include <pthread.h>
#include <semaphore.h>
#include <sys/random.h>

#include <atomic>
#include <cerrno>
#include <cstddef>
#include <cstdint>

// One line per function that moved into libc in glibc 2.34 and that liboversub (or
// the static libstdc++) may call: return type, name, parameters, arguments. Each
// becomes `__wrap_<name>`, calling `<name>@GLIBC_2.2.5` through a local alias.
// Keep the names in step with the --wrap list in interpose/meson.build: a name
// listed there without a line here fails to link, a line here not listed there
// leaves a GLIBC_2.34 reference that the ABI test (abi_needed) reports.
#define OVERSUB_GLIBC_FORWARDS(X)                                                            \
  X(void*, dlopen, (const char* file, int mode), (file, mode))                               \
  X(int, dlclose, (void* handle), (handle))                                                  \
  X(void*, dlvsym, (void* handle, const char* name, const char* version),                    \
    (handle, name, version))                                                                 \
  X(int, dladdr, (const void* address, Dl_info* info), (address, info))                      \
  X(char*, dlerror, (), ())                                                                  \
  X(int, pthread_key_create, (pthread_key_t* key, void (*destructor)(void*)),                \
    (key, destructor))                                                                       \
  X(int, __pthread_key_create, (pthread_key_t* key, void (*destructor)(void*)),              \
    (key, destructor))                                                                       \
  X(int, pthread_key_delete, (pthread_key_t key), (key))                                     \
  X(void*, pthread_getspecific, (pthread_key_t key), (key))                                  \
  X(int, pthread_setspecific, (pthread_key_t key, const void* value), (key, value))          \
  X(int, pthread_once, (pthread_once_t* once, void (*init)()), (once, init))                 \
  X(int, pthread_create,                                                                     \
    (pthread_t* thread, const pthread_attr_t* attr, void* (*start)(void*), void* arg),       \
    (thread, attr, start, arg))                                                              \
  X(int, pthread_join, (pthread_t thread, void** result), (thread, result))                  \
  X(int, pthread_detach, (pthread_t thread), (thread))                                       \
  X(int, pthread_mutex_trylock, (pthread_mutex_t* mutex), (mutex))                           \
  X(int, pthread_mutex_timedlock, (pthread_mutex_t* mutex, const struct timespec* until),    \
    (mutex, until))                                                                          \
  X(int, pthread_mutexattr_init, (pthread_mutexattr_t* attr), (attr))                        \
  X(int, pthread_mutexattr_destroy, (pthread_mutexattr_t* attr), (attr))                     \
  X(int, pthread_mutexattr_settype, (pthread_mutexattr_t* attr, int kind), (attr, kind))     \
  X(int, pthread_rwlock_init, (pthread_rwlock_t* lock, const pthread_rwlockattr_t* attr),    \
    (lock, attr))                                                                            \
  X(int, pthread_rwlock_destroy, (pthread_rwlock_t* lock), (lock))                           \
  X(int, pthread_rwlock_rdlock, (pthread_rwlock_t* lock), (lock))                            \
  X(int, pthread_rwlock_wrlock, (pthread_rwlock_t* lock), (lock))                            \
  X(int, pthread_rwlock_tryrdlock, (pthread_rwlock_t* lock), (lock))                         \
  X(int, pthread_rwlock_trywrlock, (pthread_rwlock_t* lock), (lock))                         \
  X(int, pthread_rwlock_unlock, (pthread_rwlock_t* lock), (lock))                            \
  X(int, sem_init, (sem_t* sem, int shared, unsigned value), (sem, shared, value))           \
  X(int, sem_destroy, (sem_t* sem), (sem))                                                   \
  X(int, sem_post, (sem_t* sem), (sem))                                                      \
  X(int, sem_wait, (sem_t* sem), (sem))                                                      \
  X(int, sem_trywait, (sem_t* sem), (sem))                                                   \
  X(int, sem_timedwait, (sem_t* sem, const struct timespec* until), (sem, until))

// dlsym(RTLD_NEXT, ...) searches after the object its caller is in: the caller of
// the old dlsym is __wrap_dlsym, inside liboversub.so, as the original caller was.
#define OVERSUB_GLIBC_FORWARD(ret, name, params, args)                  \
  ret oversub_old_##name params;                                        \
  __asm__(".symver oversub_old_" #name ", " #name "@GLIBC_2.2.5");      \
  ret __wrap_##name params { return oversub_old_##name args; }

extern "C" {

OVERSUB_GLIBC_FORWARDS(OVERSUB_GLIBC_FORWARD)

// dlsym is not forwarded by symbol: liboversub exports dlsym@GLIBC_2.2.5 itself
// (dlsym_hook.cc), so a reference to that version would find our own export first.
// glibc's is looked up once through dlvsym, which we do not export.
void* oversub_real_dlsym() noexcept;
void* __wrap_dlsym(void* handle, const char* name) {
  return reinterpret_cast<void* (*)(void*, const char*)>(oversub_real_dlsym())(handle, name);
}

char __wrap___libc_single_threaded = 0;

uint32_t __wrap_arc4random() {
  uint32_t value = 0;
  auto* bytes = reinterpret_cast<unsigned char*>(&value);
  size_t have = 0;
  while (have < sizeof value) {
    const ssize_t n = getrandom(bytes + have, sizeof value - have, 0);
    if (n > 0) have += static_cast<size_t>(n);
    else if (n < 0 && errno != EINTR) break;  // no entropy source: what was read
  }
  return value;
}

}  // extern "C"

namespace {

using find_object_fn = int (*)(void*, dl_find_object*);

// The loader's _dl_find_object (glibc 2.35+), or null; set once at load.
std::atomic<find_object_fn> g_find_object{nullptr};

[[gnu::constructor]] void resolve_find_object() {
  g_find_object.store(reinterpret_cast<find_object_fn>(
                          oversub_old_dlvsym(RTLD_DEFAULT, "_dl_find_object", "GLIBC_2.35")),
                      std::memory_order_release);
}

struct object_search {
  uintptr_t pc;
  dl_find_object* result;
};

int find_in_object(dl_phdr_info* info, size_t, void* data) {
  auto* search = static_cast<object_search*>(data);
  uintptr_t low = UINTPTR_MAX, high = 0;
  void* eh_frame = nullptr;
  bool contains = false;
  for (int i = 0; i < info->dlpi_phnum; ++i) {
    const ElfW(Phdr)& ph = info->dlpi_phdr[i];
    const uintptr_t start = info->dlpi_addr + ph.p_vaddr;
    if (ph.p_type == PT_LOAD) {
      low = start < low ? start : low;
      high = start + ph.p_memsz > high ? start + ph.p_memsz : high;
      contains = contains || (search->pc >= start && search->pc < start + ph.p_memsz);
    } else if (ph.p_type == PT_GNU_EH_FRAME) {
      eh_frame = reinterpret_cast<void*>(start);
    }
  }
  if (!contains) return 0;
  *search->result = dl_find_object{};
  search->result->dlfo_map_start = reinterpret_cast<void*>(low);
  search->result->dlfo_map_end = reinterpret_cast<void*>(high);
  search->result->dlfo_eh_frame = eh_frame;
  return 1;
}

}  // namespace

extern "C" int __wrap__dl_find_object(void* pc, dl_find_object* result) {
  if (find_object_fn real = g_find_object.load(std::memory_order_acquire)) return real(pc, result);
  object_search search{reinterpret_cast<uintptr_t>(pc), result};
  return dl_iterate_phdr(find_in_object, &search) != 0 ? 0 : -1;
}
