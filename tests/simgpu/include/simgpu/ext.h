// simgpu private extension API: the few things simgpu's three libraries need from
// each other that the CUDA driver API does not express.
//
// libcuda.so.1 (tests/simgpu/driver/) holds the simulated device and exports these
// functions with C linkage. libcudart.so.13 and libcupti.so.13 reach them with
// dlopen("libcuda.so.1") + dlsym, exactly as they reach the driver API itself
// (through cuGetProcAddress), so none of simgpu's libraries has a NEEDED entry on
// another. Kernel sources (tests/simgpu/include/simgpu/kernel.h) register their
// host implementations through simgpuRegisterKernel.
//
// Nothing in oversub may include this header: oversub cannot know it runs on simgpu.
#ifndef SIMGPU_EXT_H
#define SIMGPU_EXT_H

#include <cuda.h>
#include <vector_types.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

// ---- Kernels ---------------------------------------------------------------------

// One kernel parameter as CUDA lays it out in the parameter buffer.
typedef struct simgpuParamInfo {
  size_t offset;  // bytes from the start of the parameter buffer
  size_t size;    // bytes
  int flags;      // SIMGPU_PARAM_* below
} simgpuParamInfo;

enum {
  SIMGPU_PARAM_POINTER = 1,        // a pointer the kernel may read and write
  SIMGPU_PARAM_CONST_POINTER = 2,  // a pointer to const: the kernel only reads
};

// Access modes for a footprint entry.
enum { SIMGPU_READ = 1, SIMGPU_WRITE = 2, SIMGPU_READWRITE = 3 };

// Distinct ranges one launch's footprint holds: a 32 KB parameter block (CUDA
// 12.1+) has 4094 pointer-sized words, and a tensor-list kernel may point into a few
// hundred allocations; past this a derived footprint drops ranges.
#define SIMGPU_MAX_ACCESSES 512

typedef struct simgpuAccess {
  const void* ptr;  // device address
  size_t bytes;
  int mode;  // SIMGPU_READ / SIMGPU_WRITE / SIMGPU_READWRITE
} simgpuAccess;

// What one launch touches and how much arithmetic it does: drives the race
// detector (exact byte ranges) and the virtual clock (flops, bytes).
typedef struct simgpuFootprint {
  simgpuAccess accesses[SIMGPU_MAX_ACCESSES];
  int count;
  double flops;
} simgpuFootprint;

// Runs the whole grid on the calling host thread. args[i] points at parameter i,
// as in cudaLaunchKernel.
typedef void (*simgpuKernelRun)(void** args, dim3 grid, dim3 block);

// Optional: fills *fp for one launch from its arguments. When absent, the device
// takes the whole allocation behind every pointer-sized argument word (read-only for
// SIMGPU_PARAM_CONST_POINTER, read-write otherwise) and zero flops.
typedef void (*simgpuKernelFootprint)(void** args, dim3 grid, dim3 block,
                                      simgpuFootprint* fp);

// Registers a kernel under its host-side handle (the address nvcc code would pass
// to cudaLaunchKernel). Idempotent per hostFun. Returns the CUfunction the driver
// launches, or NULL on bad input. name is copied.
CUfunction simgpuRegisterKernel(const void* hostFun, const char* name,
                                const simgpuParamInfo* params, size_t nparams,
                                simgpuKernelRun run, simgpuKernelFootprint footprint);

// The CUfunction registered for hostFun, or NULL.
CUfunction simgpuFunctionFromHost(const void* hostFun);

// Called by a kernel body just before it reads (writes != 0: writes, and may read)
// [ptr, ptr+bytes) through a pointer it loaded from device memory (a batched GEMM's
// pointer array, an optimizer's tensor table). Opens exactly the host pages under
// the range and records the exact range as an access of the kernel for the race
// detector; a range the device may not use this way is an illegal access (the
// message, the sticky CUDA_ERROR_ILLEGAL_ADDRESS, and the body is abandoned).
// Accesses made without it still fault and are recorded by the 4 KiB page. Does
// nothing outside a kernel. See Note [Accesses a kernel really makes] in
// tests/simgpu/driver/fault.h. Kernel sources reach it through simgpu/kernel.h
// (simgpu::reach_read and friends).
void simgpuReach(const void* ptr, size_t bytes, int writes);

// ---- Library images (cuLibraryLoadData) ------------------------------------------

// Note [simgpu library images]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// simgpu cannot run device code, so the "code" a CUDA 12+ program hands to
// cuLibraryLoadData is, on simgpu, a simgpuLibraryImage: a table of kernels as
// simgpuRegisterKernel takes them. cuLibraryLoadData(&lib, &image, ...) registers
// every entry (idempotent per hostFun) and answers a CUlibrary whose CUkernels
// (cuLibraryGetKernel by name, cuLibraryEnumerateKernels) launch through
// cuLaunchKernel(Ex) cast to CUfunction, as on a GPU. cuLibraryLoadFromFile takes a
// shared object that exports a simgpuLibraryImage named simgpu_library_image.
// Anything without SIMGPU_LIBRARY_MAGIC first is CUDA_ERROR_INVALID_IMAGE. The
// image is read during the call only (names and layouts are copied).
#define SIMGPU_LIBRARY_MAGIC 0x42494c53u /* "SLIB" */

typedef struct simgpuKernelImage {
  const void* hostFun;  // identity of the kernel (what kernel.h registers under)
  const char* name;     // the kernel's (mangled) name: cuLibraryGetKernel's key
  const simgpuParamInfo* params;
  size_t nparams;
  simgpuKernelRun run;
  simgpuKernelFootprint footprint;  // may be NULL
} simgpuKernelImage;

typedef struct simgpuLibraryImage {
  uint32_t magic;  // SIMGPU_LIBRARY_MAGIC
  uint32_t count;
  const simgpuKernelImage* kernels;
} simgpuLibraryImage;

// The same registration, exported by simgpu's libcudart.so.13 under version node
// SIMGPU_PRIVATE: kernel sources link against the runtime only (as nvcc output does
// through __cudaRegisterFunction) and the runtime forwards to the driver. Returns
// cudaSuccess (0) or cudaErrorInvalidValue (1).
int __simgpuRegisterKernel(const void* hostFun, const char* name,
                           const simgpuParamInfo* params, size_t nparams,
                           simgpuKernelRun run, simgpuKernelFootprint footprint);

// ---- CUPTI bridge ------------------------------------------------------------------

// One API callback, fields as in CUpti_CallbackData. domain is a
// CUpti_CallbackDomain, cbid a CUPTI_{RUNTIME,DRIVER}_TRACE_CBID_* value, site 0 at
// entry and 1 at exit. params points at the real *_params struct from
// generated_cuda{,_runtime_api}_meta.h; returnValue at a cudaError_t or CUresult
// (NULL at entry).
typedef struct simgpuApiRecord {
  int domain;
  int cbid;
  int site;
  const char* functionName;
  const char* symbolName;  // kernel name for launches, else NULL
  const void* params;
  const void* returnValue;
  uint32_t correlationId;
  uint64_t* correlationData;  // the same slot at entry and exit
  CUcontext context;
} simgpuApiRecord;

typedef void (*simgpuApiSink)(void* user, const simgpuApiRecord* rec);

// Installs the one sink (libcupti); NULL removes it. Thread-safe.
void simgpuSetApiSink(simgpuApiSink sink, void* user);

// Brackets one API call. Nested calls on one thread (the runtime calling the
// driver) share the outermost call's correlation id. simgpuApiEnter returns the
// correlation id; the caller passes it and the same correlationData slot to Exit.
// Cheap (an atomic load) when no sink is installed.
uint32_t simgpuApiEnter(int domain, int cbid, const char* functionName,
                        const char* symbolName, const void* params,
                        uint64_t* correlationData);
void simgpuApiExit(int domain, int cbid, const char* functionName,
                   const char* symbolName, const void* params,
                   const void* returnValue, uint32_t correlationId,
                   uint64_t* correlationData);

enum {
  SIMGPU_ACTIVITY_KERNEL = 1,
  SIMGPU_ACTIVITY_MEMCPY = 2,
  SIMGPU_ACTIVITY_MEMSET = 3,
};

// One finished device operation, timestamps on the virtual clock (ns).
typedef struct simgpuActivity {
  int kind;               // SIMGPU_ACTIVITY_*
  uint64_t start_ns;
  uint64_t end_ns;
  uint32_t correlationId;
  uint32_t streamId;
  uint32_t deviceId;
  uint32_t contextId;
  uint64_t bytes;         // memcpy/memset
  int copyKind;           // a CUpti_ActivityMemcpyKind value for memcpy
  int srcKind, dstKind;   // CUpti_ActivityMemoryKind values for memcpy
  const char* name;       // kernel name (valid for the process lifetime)
  dim3 grid, block;
  size_t sharedMem;
} simgpuActivity;

typedef void (*simgpuActivitySink)(void* user, const simgpuActivity* rec);

// Installs the one activity sink (libcupti); NULL removes it. Records are
// delivered in enqueue order from the thread that enqueued the operation.
void simgpuSetActivitySink(simgpuActivitySink sink, void* user);

// The virtual clock now, in ns (what cuptiGetTimestamp returns).
uint64_t simgpuVirtualTimeNs(void);

// 1 when SIMGPU_CUPTI_RECORDS=when-done: libcupti keeps each record until the virtual
// clock has passed its end (Note [Records when done] in tests/simgpu/cupti/activity.cc).
int simgpuActivityWhenDone(void);

#ifdef __cplusplus
}
#endif

#endif  // SIMGPU_EXT_H
