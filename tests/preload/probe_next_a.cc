// A wrapper of probe_value() that finds the next definition the way interposers do,
// with dlsym(RTLD_NEXT) (driver_probe's rtld-next case): 1 + probe_next_b's. If dlsym
// searched after the wrong object it would return this function itself, and the call
// below would recurse until the stack ran out.
#include <dlfcn.h>

extern "C" int probe_value() {
  auto next = reinterpret_cast<int (*)()>(dlsym(RTLD_NEXT, "probe_value"));
  if (next == nullptr || next == &probe_value) return -1;
  return next() + 1;
}
