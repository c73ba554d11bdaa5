// Driver entry points: initialisation, versions, errors, the device and the
// primary context.
#include <cstring>
#include <vector>

#include "api.h"
#include "capture.h"
#include "clock.h"
#include "errors.h"

namespace simgpu {

CUresult api_gate(gate g) {
  if (g == gate::none) return CUDA_SUCCESS;
  if (g_forked.load()) return CUDA_ERROR_NOT_INITIALIZED;
  if (g == gate::init) return CUDA_SUCCESS;
  if (!g_initialized.load()) return CUDA_ERROR_NOT_INITIALIZED;
  if (g == gate::device) return CUDA_SUCCESS;
  CUcontext c = current_context();
  if (c == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
  if (c != primary_context() || !dev().primary_active) return CUDA_ERROR_CONTEXT_IS_DESTROYED;
  if (int e = g_sticky_error.load(); e != CUDA_SUCCESS) return static_cast<CUresult>(e);
  return CUDA_SUCCESS;
}

namespace {

thread_local std::vector<CUcontext> t_ctx_stack;

void set_current(CUcontext c) {
  current_context() = c;
  if (t_ctx_stack.empty()) t_ctx_stack.push_back(c);
  else t_ctx_stack.back() = c;
}

int device_attribute(CUdevice_attribute a) {
  const device_model& m = dev().model;
  switch (a) {
    case CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK: return m.max_threads_per_block;
    case CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X: return 1024;
    case CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Y: return 1024;
    case CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z: return 64;
    case CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X: return m.cc_major >= 3 ? 2147483647 : 65535;
    case CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y: return 65535;
    case CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z: return 65535;
    case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK: return m.max_shared_per_block_bytes;
    case CU_DEVICE_ATTRIBUTE_TOTAL_CONSTANT_MEMORY: return 65536;
    case CU_DEVICE_ATTRIBUTE_WARP_SIZE: return 32;
    case CU_DEVICE_ATTRIBUTE_MAX_PITCH: return 2147483647;
    case CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_BLOCK: return m.regs_per_block;
    case CU_DEVICE_ATTRIBUTE_CLOCK_RATE: return m.clock_khz;
    case CU_DEVICE_ATTRIBUTE_TEXTURE_ALIGNMENT: return 512;
    case CU_DEVICE_ATTRIBUTE_GPU_OVERLAP: return 1;
    case CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT: return m.sm_count;
    case CU_DEVICE_ATTRIBUTE_KERNEL_EXEC_TIMEOUT: return 0;
    case CU_DEVICE_ATTRIBUTE_INTEGRATED: return 0;
    case CU_DEVICE_ATTRIBUTE_CAN_MAP_HOST_MEMORY: return 1;
    case CU_DEVICE_ATTRIBUTE_COMPUTE_MODE: return CU_COMPUTEMODE_DEFAULT;
    case CU_DEVICE_ATTRIBUTE_CONCURRENT_KERNELS: return 1;
    case CU_DEVICE_ATTRIBUTE_ECC_ENABLED: return 0;
    case CU_DEVICE_ATTRIBUTE_PCI_BUS_ID: return m.pci_bus_id;
    case CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID: return 0;
    case CU_DEVICE_ATTRIBUTE_TCC_DRIVER: return 0;
    case CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE: return m.mem_clock_khz;
    case CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH: return m.mem_bus_width_bits;
    case CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE: return m.l2_bytes;
    case CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR: return m.max_threads_per_sm;
    case CU_DEVICE_ATTRIBUTE_ASYNC_ENGINE_COUNT: return 2;
    case CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING: return 1;
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR: return m.cc_major;
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR: return m.cc_minor;
    case CU_DEVICE_ATTRIBUTE_STREAM_PRIORITIES_SUPPORTED: return 1;
    case CU_DEVICE_ATTRIBUTE_GLOBAL_L1_CACHE_SUPPORTED: return 1;
    case CU_DEVICE_ATTRIBUTE_LOCAL_L1_CACHE_SUPPORTED: return 1;
    case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR: return 2 * m.max_shared_per_block_bytes;
    case CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_MULTIPROCESSOR: return 65536;
    case CU_DEVICE_ATTRIBUTE_MANAGED_MEMORY: return 1;
    case CU_DEVICE_ATTRIBUTE_MULTI_GPU_BOARD: return 0;
    case CU_DEVICE_ATTRIBUTE_HOST_NATIVE_ATOMIC_SUPPORTED: return 0;
    case CU_DEVICE_ATTRIBUTE_PAGEABLE_MEMORY_ACCESS: return 0;
    case CU_DEVICE_ATTRIBUTE_CONCURRENT_MANAGED_ACCESS: return m.concurrent_managed_access;
    case CU_DEVICE_ATTRIBUTE_COMPUTE_PREEMPTION_SUPPORTED: return m.cc_major >= 6;
    case CU_DEVICE_ATTRIBUTE_CAN_USE_HOST_POINTER_FOR_REGISTERED_MEM: return 1;
    case CU_DEVICE_ATTRIBUTE_COOPERATIVE_LAUNCH: return m.cc_major >= 6;
    case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN: return m.max_shared_per_block_bytes;
    case CU_DEVICE_ATTRIBUTE_PAGEABLE_MEMORY_ACCESS_USES_HOST_PAGE_TABLES: return 0;
    case CU_DEVICE_ATTRIBUTE_DIRECT_MANAGED_MEM_ACCESS_FROM_HOST: return 0;
    case CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED: return 1;
    case CU_DEVICE_ATTRIBUTE_HOST_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED: return m.host_vmm_supported;
    case CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED: return 0;
    case CU_DEVICE_ATTRIBUTE_MAX_BLOCKS_PER_MULTIPROCESSOR: return 32;
    case CU_DEVICE_ATTRIBUTE_GENERIC_COMPRESSION_SUPPORTED: return 0;
    case CU_DEVICE_ATTRIBUTE_MAX_PERSISTING_L2_CACHE_SIZE: return 0;
    case CU_DEVICE_ATTRIBUTE_MAX_ACCESS_POLICY_WINDOW_SIZE: return 0;
    case CU_DEVICE_ATTRIBUTE_READ_ONLY_HOST_REGISTER_SUPPORTED: return 1;
    case CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED: return 1;
    case CU_DEVICE_ATTRIBUTE_HOST_REGISTER_SUPPORTED: return 1;
    case CU_DEVICE_ATTRIBUTE_MEMPOOL_SUPPORTED_HANDLE_TYPES: return 0;
    case CU_DEVICE_ATTRIBUTE_HOST_NUMA_ID: return -1;
    default: return 0;
  }
}

}  // namespace

}  // namespace simgpu

using namespace simgpu;

SIMGPU_EXPORT CUresult cuInit(unsigned int Flags) {
  SIMGPU_API(init, cuInit, Flags);
  if (Flags != 0) SIMGPU_RETURN(CUDA_ERROR_INVALID_VALUE);
  SIMGPU_RETURN(init_device());
}

SIMGPU_EXPORT CUresult cuDriverGetVersion(int* driverVersion) {
  SIMGPU_API(none, cuDriverGetVersion, driverVersion);
  if (driverVersion == nullptr) SIMGPU_RETURN(CUDA_ERROR_INVALID_VALUE);
  *driverVersion = 13000;
  SIMGPU_RETURN(CUDA_SUCCESS);
}

SIMGPU_EXPORT CUresult cuGetErrorString(CUresult error, const char** pStr) {
  SIMGPU_API(none, cuGetErrorString, error, pStr);
  if (pStr == nullptr) SIMGPU_RETURN(CUDA_ERROR_INVALID_VALUE);
  *pStr = error_string(error);
  SIMGPU_RETURN(*pStr ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE);
}

SIMGPU_EXPORT CUresult cuGetErrorName(CUresult error, const char** pStr) {
  SIMGPU_API(none, cuGetErrorName, error, pStr);
  if (pStr == nullptr) SIMGPU_RETURN(CUDA_ERROR_INVALID_VALUE);
  *pStr = error_name(error);
  SIMGPU_RETURN(*pStr ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE);
}

SIMGPU_EXPORT CUresult cuDeviceGetCount(int* count) {
  SIMGPU_API(device, cuDeviceGetCount, count);
  if (count == nullptr) SIMGPU_RETURN(CUDA_ERROR_INVALID_VALUE);
  *count = 1;
  SIMGPU_RETURN(CUDA_SUCCESS);
}

SIMGPU_EXPORT CUresult cuDeviceGet(CUdevice* device, int ordinal) {
  SIMGPU_API(device, cuDeviceGet, device, ordinal);
  if (device == nullptr) SIMGPU_RETURN(CUDA_ERROR_INVALID_VALUE);
  if (ordinal != 0) SIMGPU_RETURN(CUDA_ERROR_INVALID_DEVICE);
  *device = 0;
  SIMGPU_RETURN(CUDA_SUCCESS);
}

SIMGPU_EXPORT CUresult cuDeviceGetName(char* name, int len, CUdevice dev_) {
  SIMGPU_API(device, cuDeviceGetName, name, len, dev_);
  if (dev_ != 0) SIMGPU_RETURN(CUDA_ERROR_INVALID_DEVICE);
  if (name == nullptr || len <= 0) SIMGPU_RETURN(CUDA_ERROR_INVALID_VALUE);
  std::strncpy(name, dev().model.name.c_str(), static_cast<size_t>(len) - 1);
  name[len - 1] = '\0';
  SIMGPU_RETURN(CUDA_SUCCESS);
}

SIMGPU_EXPORT CUresult cuDeviceTotalMem(size_t* bytes, CUdevice dev_) {
  SIMGPU_API(device, cuDeviceTotalMem_v2, bytes, dev_);
  if (dev_ != 0) SIMGPU_RETURN(CUDA_ERROR_INVALID_DEVICE);
  if (bytes == nullptr) SIMGPU_RETURN(CUDA_ERROR_INVALID_VALUE);
  *bytes = dev().capacity_bytes;
  SIMGPU_RETURN(CUDA_SUCCESS);
}

SIMGPU_EXPORT CUresult cuDeviceGetAttribute(int* pi, CUdevice_attribute attrib, CUdevice dev_) {
  SIMGPU_API(device, cuDeviceGetAttribute, pi, attrib, dev_);
  if (dev_ != 0) SIMGPU_RETURN(CUDA_ERROR_INVALID_DEVICE);
  if (pi == nullptr || attrib <= 0 || attrib >= CU_DEVICE_ATTRIBUTE_MAX)
    SIMGPU_RETURN(CUDA_ERROR_INVALID_VALUE);
  *pi = device_attribute(attrib);
  SIMGPU_RETURN(CUDA_SUCCESS);
}

namespace {
CUresult fill_uuid(CUuuid* uuid) {
  if (uuid == nullptr) return CUDA_ERROR_INVALID_VALUE;
  static const unsigned char bytes[16] = {0x51, 0x6d, 0x67, 0x70, 0x75, 0x2d, 0x30, 0x30,
                                          0x2d, 0x73, 0x69, 0x6d, 0x67, 0x70, 0x75, 0x01};
  std::memcpy(uuid->bytes, bytes, 16);
  return CUDA_SUCCESS;
}
}  // namespace

SIMGPU_EXPORT CUresult cuDeviceGetUuid(CUuuid* uuid, CUdevice dev_) {
  SIMGPU_API(device, cuDeviceGetUuid_v2, uuid, dev_);
  if (dev_ != 0) SIMGPU_RETURN(CUDA_ERROR_INVALID_DEVICE);
  SIMGPU_RETURN(fill_uuid(uuid));
}

extern "C" __attribute__((visibility("default"))) CUresult simgpu_cuDeviceGetUuid_v1(
    CUuuid* uuid, CUdevice dev_) __asm__("cuDeviceGetUuid");
CUresult simgpu_cuDeviceGetUuid_v1(CUuuid* uuid, CUdevice dev_) {
  SIMGPU_API(device, cuDeviceGetUuid, uuid, dev_);
  if (dev_ != 0) SIMGPU_RETURN(CUDA_ERROR_INVALID_DEVICE);
  SIMGPU_RETURN(fill_uuid(uuid));
}

SIMGPU_EXPORT CUresult cuDeviceGetPCIBusId(char* pciBusId, int len, CUdevice dev_) {
  SIMGPU_API(device, cuDeviceGetPCIBusId, pciBusId, len, dev_);
  if (dev_ != 0) SIMGPU_RETURN(CUDA_ERROR_INVALID_DEVICE);
  if (pciBusId == nullptr || len < 13) SIMGPU_RETURN(CUDA_ERROR_INVALID_VALUE);
  std::strncpy(pciBusId, "0000:00:00.0", static_cast<size_t>(len));
  SIMGPU_RETURN(CUDA_SUCCESS);
}

SIMGPU_EXPORT CUresult cuDevicePrimaryCtxRetain(CUcontext* pctx, CUdevice dev_) {
  SIMGPU_API(device, cuDevicePrimaryCtxRetain, pctx, dev_);
  if (dev_ != 0) SIMGPU_RETURN(CUDA_ERROR_INVALID_DEVICE);
  if (pctx == nullptr) SIMGPU_RETURN(CUDA_ERROR_INVALID_VALUE);
  ++dev().primary_refs;
  dev().primary_active = true;
  *pctx = primary_context();
  SIMGPU_RETURN(CUDA_SUCCESS);
}

SIMGPU_EXPORT CUresult cuDevicePrimaryCtxRelease(CUdevice dev_) {
  SIMGPU_API(device, cuDevicePrimaryCtxRelease_v2, dev_);
  if (dev_ != 0) SIMGPU_RETURN(CUDA_ERROR_INVALID_DEVICE);
  if (dev().primary_refs <= 0) SIMGPU_RETURN(CUDA_ERROR_INVALID_CONTEXT);
  if (--dev().primary_refs == 0) {
    host_wait_all();
    dev().primary_active = false;
  }
  SIMGPU_RETURN(CUDA_SUCCESS);
}

SIMGPU_EXPORT CUresult cuDevicePrimaryCtxReset(CUdevice dev_) {
  SIMGPU_API(device, cuDevicePrimaryCtxReset_v2, dev_);
  if (dev_ != 0) SIMGPU_RETURN(CUDA_ERROR_INVALID_DEVICE);
  host_wait_all();
  dev().primary_refs = 0;
  dev().primary_active = false;
  g_sticky_error.store(CUDA_SUCCESS);
  SIMGPU_RETURN(CUDA_SUCCESS);
}

SIMGPU_EXPORT CUresult cuDevicePrimaryCtxGetState(CUdevice dev_, unsigned int* flags,
                                                  int* active) {
  SIMGPU_API(device, cuDevicePrimaryCtxGetState, dev_, flags, active);
  if (dev_ != 0) SIMGPU_RETURN(CUDA_ERROR_INVALID_DEVICE);
  if (flags == nullptr || active == nullptr) SIMGPU_RETURN(CUDA_ERROR_INVALID_VALUE);
  *flags = dev().primary_flags;
  *active = dev().primary_active ? 1 : 0;
  SIMGPU_RETURN(CUDA_SUCCESS);
}

SIMGPU_EXPORT CUresult cuDevicePrimaryCtxSetFlags(CUdevice dev_, unsigned int flags) {
  SIMGPU_API(device, cuDevicePrimaryCtxSetFlags_v2, dev_, flags);
  if (dev_ != 0) SIMGPU_RETURN(CUDA_ERROR_INVALID_DEVICE);
  if (flags & ~0x1fu) SIMGPU_RETURN(CUDA_ERROR_INVALID_VALUE);
  dev().primary_flags = flags;
  SIMGPU_RETURN(CUDA_SUCCESS);
}

SIMGPU_EXPORT CUresult cuCtxGetCurrent(CUcontext* pctx) {
  SIMGPU_API(device, cuCtxGetCurrent, pctx);
  if (pctx == nullptr) SIMGPU_RETURN(CUDA_ERROR_INVALID_VALUE);
  *pctx = current_context();
  SIMGPU_RETURN(CUDA_SUCCESS);
}

SIMGPU_EXPORT CUresult cuCtxSetCurrent(CUcontext ctx) {
  SIMGPU_API(device, cuCtxSetCurrent, ctx);
  if (ctx != nullptr && ctx != primary_context()) SIMGPU_RETURN(CUDA_ERROR_INVALID_CONTEXT);
  set_current(ctx);
  SIMGPU_RETURN(CUDA_SUCCESS);
}

SIMGPU_EXPORT CUresult cuCtxPushCurrent(CUcontext ctx) {
  SIMGPU_API(device, cuCtxPushCurrent_v2, ctx);
  if (ctx != primary_context()) SIMGPU_RETURN(CUDA_ERROR_INVALID_CONTEXT);
  t_ctx_stack.push_back(ctx);
  current_context() = ctx;
  SIMGPU_RETURN(CUDA_SUCCESS);
}

SIMGPU_EXPORT CUresult cuCtxPopCurrent(CUcontext* pctx) {
  SIMGPU_API(device, cuCtxPopCurrent_v2, pctx);
  if (t_ctx_stack.empty() || t_ctx_stack.back() == nullptr)
    SIMGPU_RETURN(CUDA_ERROR_INVALID_CONTEXT);
  if (pctx) *pctx = t_ctx_stack.back();
  t_ctx_stack.pop_back();
  current_context() = t_ctx_stack.empty() ? nullptr : t_ctx_stack.back();
  SIMGPU_RETURN(CUDA_SUCCESS);
}

SIMGPU_EXPORT CUresult cuCtxGetDevice(CUdevice* device) {
  SIMGPU_API(context, cuCtxGetDevice, device);
  if (device == nullptr) SIMGPU_RETURN(CUDA_ERROR_INVALID_VALUE);
  *device = 0;
  SIMGPU_RETURN(CUDA_SUCCESS);
}

SIMGPU_EXPORT CUresult cuCtxGetFlags(unsigned int* flags) {
  SIMGPU_API(context, cuCtxGetFlags, flags);
  if (flags == nullptr) SIMGPU_RETURN(CUDA_ERROR_INVALID_VALUE);
  *flags = dev().primary_flags;
  SIMGPU_RETURN(CUDA_SUCCESS);
}

SIMGPU_EXPORT CUresult cuCtxGetId(CUcontext ctx, unsigned long long* ctxId) {
  SIMGPU_API(device, cuCtxGetId, ctx, ctxId);
  if (ctxId == nullptr) SIMGPU_RETURN(CUDA_ERROR_INVALID_VALUE);
  if (ctx == nullptr) ctx = current_context();
  if (ctx != primary_context()) SIMGPU_RETURN(CUDA_ERROR_INVALID_CONTEXT);
  *ctxId = 1;
  SIMGPU_RETURN(CUDA_SUCCESS);
}

SIMGPU_EXPORT CUresult cuCtxGetApiVersion(CUcontext ctx, unsigned int* version) {
  SIMGPU_API(device, cuCtxGetApiVersion, ctx, version);
  if (version == nullptr) SIMGPU_RETURN(CUDA_ERROR_INVALID_VALUE);
  *version = 13000;
  SIMGPU_RETURN(CUDA_SUCCESS);
}

SIMGPU_EXPORT CUresult cuCtxSynchronize(void) {
  SIMGPU_API0(context, cuCtxSynchronize);
  if (CUresult c = capture_unsafe_call(); c != CUDA_SUCCESS) SIMGPU_RETURN(c);
  host_wait_all();
  SIMGPU_RETURN(CUDA_SUCCESS);
}
