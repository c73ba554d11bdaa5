// Loading the driver table (see driver_api.h).
#include "pool/driver_api.h"

#include <dlfcn.h>

#include "common/log.h"

namespace oversub::pool {

namespace {

constexpr const char* driver_soname = "libcuda.so.1";
constexpr int requested_cuda_version = 13000;  // the CUDA 13 ABI of each function

using get_proc_address_t = CUresult (*)(const char*, void**, int, cuuint64_t,
                                        CUdriverProcAddressQueryResult*);

driver_table* load() {
  auto* table = new driver_table;
  void* handle = dlopen(driver_soname, RTLD_NOW | RTLD_NOLOAD);
  if (handle == nullptr) handle = dlopen(driver_soname, RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    log::error("pool: cannot open {}: {}; device allocations are forwarded to CUDA",
               driver_soname, dlerror());
    return table;
  }
  auto get = reinterpret_cast<get_proc_address_t>(dlsym(handle, "cuGetProcAddress_v2"));
  if (get == nullptr) {
    log::error("pool: {} has no cuGetProcAddress_v2 (a driver older than CUDA 12); "
               "device allocations are forwarded to CUDA", driver_soname);
    return table;
  }
  bool all = true;
  // A function the driver lacks leaves its pointer null; a required one makes the
  // table incomplete.
  const auto load_one = [&](const char* name, void** out, bool required) {
    CUdriverProcAddressQueryResult status = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
    if (get(name, out, requested_cuda_version, CU_GET_PROC_ADDRESS_DEFAULT, &status) ==
            CUDA_SUCCESS &&
        status == CU_GET_PROC_ADDRESS_SUCCESS && *out != nullptr) {
      return;
    }
    *out = nullptr;
    if (required) {
      log::error("pool: the driver does not provide {}", name);
      all = false;
    } else {
      log::debug("pool: the driver does not provide {} (optional)", name);
    }
  };
#define OVERSUB_DRIVER_LOAD(name) load_one(#name, reinterpret_cast<void**>(&table->name), true);
#define OVERSUB_DRIVER_LOAD_OPTIONAL(name) \
  load_one(#name, reinterpret_cast<void**>(&table->name), false);
  OVERSUB_DRIVER_FUNCTIONS(OVERSUB_DRIVER_LOAD)
  OVERSUB_DRIVER_OPTIONAL_FUNCTIONS(OVERSUB_DRIVER_LOAD_OPTIONAL)
#undef OVERSUB_DRIVER_LOAD
#undef OVERSUB_DRIVER_LOAD_OPTIONAL
  if (all && table->cuInit(0) != CUDA_SUCCESS) {
    log::error("pool: cuInit failed; device allocations are forwarded to CUDA");
    all = false;
  }
  table->complete = all;
  return table;
}

}  // namespace

const driver_table& driver() {
  static const driver_table* table = load();
  return *table;
}

bool driver_ok(CUresult r, const char* what) {
  if (r == CUDA_SUCCESS) return true;
  log::debug("pool: {} failed with CUresult {}", what, static_cast<int>(r));
  return false;
}

}  // namespace oversub::pool
