// simgpu's libcudart.so.13: copies and sets. Each cudaMemcpyKind picks the driver
// call a real runtime would (HtoD, DtoH, DtoD, or the unified cuMemcpy), so the
// driver sees the direction and charges the host link or device bandwidth for it;
// cudaMemcpyDefault infers the direction from the pointers' attributes.
#include "runtime_state.h"

using simgpu::rt::ctx;
using simgpu::rt::ctx_pt;
using simgpu::rt::driver_table;
using simgpu::rt::per_thread_stream;

namespace {

CUdeviceptr dptr(const void* p) { return reinterpret_cast<CUdeviceptr>(p); }

// Note [Direction of a copy]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~
// The driver's answer for CU_POINTER_ATTRIBUTE_MEMORY_TYPE decides: device (which
// includes managed memory) or host (pinned, registered, or unknown to the driver:
// pageable). A copy that involves managed memory goes through cuMemcpy, which
// migrates pages as the driver sees fit, whatever kind the caller named.
enum class side { host, device, managed };

side where(const driver_table& d, const void* p) {
  unsigned int type = 0;
  if (SIMGPU_CU(d, cuPointerGetAttribute, &type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, dptr(p)) !=
      CUDA_SUCCESS) {
    return side::host;
  }
  if (type != CU_MEMORYTYPE_DEVICE) return side::host;
  unsigned int managed = 0;
  if (SIMGPU_CU(d, cuPointerGetAttribute, &managed, CU_POINTER_ATTRIBUTE_IS_MANAGED, dptr(p)) ==
          CUDA_SUCCESS &&
      managed != 0) {
    return side::managed;
  }
  return side::device;
}

// The direction to use, or cudaMemcpyDefault for "unified" (cuMemcpy).
bool resolve(const driver_table& d, const void* dst, const void* src, cudaMemcpyKind& kind) {
  if (kind < cudaMemcpyHostToHost || kind > cudaMemcpyDefault) return false;
  side s = where(d, src);
  side t = where(d, dst);
  if (s == side::managed || t == side::managed) {
    kind = cudaMemcpyDefault;
  } else if (kind == cudaMemcpyDefault) {
    bool sd = s == side::device;
    bool td = t == side::device;
    kind = sd ? (td ? cudaMemcpyDeviceToDevice : cudaMemcpyDeviceToHost)
              : (td ? cudaMemcpyHostToDevice : cudaMemcpyHostToHost);
  }
  if (kind == cudaMemcpyHostToHost) kind = cudaMemcpyDefault;
  return true;
}

cudaError_t copy(const driver_table& d, void* dst, const void* src, size_t count,
                 cudaMemcpyKind kind) {
  if (count == 0) return cudaSuccess;
  if (!resolve(d, dst, src, kind)) return cudaErrorInvalidMemcpyDirection;
  CUresult r = CUDA_SUCCESS;
  switch (kind) {
    case cudaMemcpyHostToDevice:
      r = SIMGPU_CU(d, cuMemcpyHtoD, dptr(dst), src, count);
      break;
    case cudaMemcpyDeviceToHost:
      r = SIMGPU_CU(d, cuMemcpyDtoH, dst, dptr(src), count);
      break;
    case cudaMemcpyDeviceToDevice:
      r = SIMGPU_CU(d, cuMemcpyDtoD, dptr(dst), dptr(src), count);
      break;
    default:
      r = SIMGPU_CU(d, cuMemcpy, dptr(dst), dptr(src), count);
      break;
  }
  return simgpu::rt::to_cuda_error(r);
}

cudaError_t copy_async(const driver_table& d, void* dst, const void* src, size_t count,
                       cudaMemcpyKind kind, cudaStream_t s) {
  if (count == 0) return cudaSuccess;
  if (!resolve(d, dst, src, kind)) return cudaErrorInvalidMemcpyDirection;
  CUresult r = CUDA_SUCCESS;
  switch (kind) {
    case cudaMemcpyHostToDevice:
      r = SIMGPU_CU(d, cuMemcpyHtoDAsync, dptr(dst), src, count, s);
      break;
    case cudaMemcpyDeviceToHost:
      r = SIMGPU_CU(d, cuMemcpyDtoHAsync, dst, dptr(src), count, s);
      break;
    case cudaMemcpyDeviceToDevice:
      r = SIMGPU_CU(d, cuMemcpyDtoDAsync, dptr(dst), dptr(src), count, s);
      break;
    default:
      r = SIMGPU_CU(d, cuMemcpyAsync, dptr(dst), dptr(src), count, s);
      break;
  }
  return simgpu::rt::to_cuda_error(r);
}

// One CUDA_MEMCPY2D side: host memory by host pointer, the rest by device address.
void set_side(const driver_table& d, const void* p, size_t pitch, bool is_src, CUDA_MEMCPY2D& m) {
  side s = where(d, p);
  CUmemorytype type = s == side::host      ? CU_MEMORYTYPE_HOST
                      : s == side::managed ? CU_MEMORYTYPE_UNIFIED
                                           : CU_MEMORYTYPE_DEVICE;
  if (is_src) {
    m.srcMemoryType = type;
    m.srcHost = p;
    m.srcDevice = dptr(p);
    m.srcPitch = pitch;
  } else {
    m.dstMemoryType = type;
    m.dstHost = const_cast<void*>(p);
    m.dstDevice = dptr(p);
    m.dstPitch = pitch;
  }
}

// Note [2D copies]
// ~~~~~~~~~~~~~~~~
// Contiguous rows become one 1D copy; otherwise one cuMemcpy2D, with each side's
// memory type taken from its pointer (the kind only has to be a valid one).
cudaError_t copy_2d(const driver_table& d, void* dst, size_t dpitch, const void* src, size_t spitch,
                    size_t width, size_t height, cudaMemcpyKind kind, const cudaStream_t* stream) {
  if (width == 0 || height == 0) return cudaSuccess;
  if (width > dpitch || width > spitch) return cudaErrorInvalidPitchValue;
  if (kind < cudaMemcpyHostToHost || kind > cudaMemcpyDefault) {
    return cudaErrorInvalidMemcpyDirection;
  }
  if (dpitch == width && spitch == width) {
    return stream ? copy_async(d, dst, src, width * height, kind, *stream)
                  : copy(d, dst, src, width * height, kind);
  }
  CUDA_MEMCPY2D m{};
  set_side(d, src, spitch, true, m);
  set_side(d, dst, dpitch, false, m);
  m.WidthInBytes = width;
  m.Height = height;
  CUresult r = stream ? SIMGPU_CU(d, cuMemcpy2DAsync, &m, *stream) : SIMGPU_CU(d, cuMemcpy2D, &m);
  return simgpu::rt::to_cuda_error(r);
}

}  // namespace

extern "C" {

SIMGPU_EXPORT cudaError_t cudaMemcpy(void* dst, const void* src, size_t count,
                                     cudaMemcpyKind kind) {
  SIMGPU_RT_CALL(ctx, cudaMemcpy_v3020, dst, src, count, kind);
  return api.finish(copy(api.drv(), dst, src, count, kind));
}

SIMGPU_EXPORT cudaError_t cudaMemcpy_ptds(void* dst, const void* src, size_t count,
                                          cudaMemcpyKind kind) {
  SIMGPU_RT_CALL(ctx_pt, cudaMemcpy_ptds_v7000, dst, src, count, kind);
  return api.finish(copy(api.drv(), dst, src, count, kind));
}

SIMGPU_EXPORT cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t count,
                                          cudaMemcpyKind kind, cudaStream_t stream) {
  SIMGPU_RT_CALL(ctx, cudaMemcpyAsync_v3020, dst, src, count, kind, stream);
  return api.finish(copy_async(api.drv(), dst, src, count, kind, stream));
}

SIMGPU_EXPORT cudaError_t cudaMemcpyAsync_ptsz(void* dst, const void* src, size_t count,
                                               cudaMemcpyKind kind, cudaStream_t stream) {
  SIMGPU_RT_CALL(ctx_pt, cudaMemcpyAsync_ptsz_v7000, dst, src, count, kind, stream);
  return api.finish(copy_async(api.drv(), dst, src, count, kind, per_thread_stream(stream)));
}

SIMGPU_EXPORT cudaError_t cudaMemcpy2D(void* dst, size_t dpitch, const void* src, size_t spitch,
                                       size_t width, size_t height, cudaMemcpyKind kind) {
  SIMGPU_RT_CALL(ctx, cudaMemcpy2D_v3020, dst, dpitch, src, spitch, width, height, kind);
  return api.finish(copy_2d(api.drv(), dst, dpitch, src, spitch, width, height, kind, nullptr));
}

SIMGPU_EXPORT cudaError_t cudaMemcpy2D_ptds(void* dst, size_t dpitch, const void* src,
                                            size_t spitch, size_t width, size_t height,
                                            cudaMemcpyKind kind) {
  SIMGPU_RT_CALL(ctx_pt, cudaMemcpy2D_ptds_v7000, dst, dpitch, src, spitch, width, height, kind);
  return api.finish(copy_2d(api.drv(), dst, dpitch, src, spitch, width, height, kind, nullptr));
}

SIMGPU_EXPORT cudaError_t cudaMemcpy2DAsync(void* dst, size_t dpitch, const void* src,
                                            size_t spitch, size_t width, size_t height,
                                            cudaMemcpyKind kind, cudaStream_t stream) {
  SIMGPU_RT_CALL(ctx, cudaMemcpy2DAsync_v3020, dst, dpitch, src, spitch, width, height, kind,
                 stream);
  return api.finish(copy_2d(api.drv(), dst, dpitch, src, spitch, width, height, kind, &stream));
}

SIMGPU_EXPORT cudaError_t cudaMemcpy2DAsync_ptsz(void* dst, size_t dpitch, const void* src,
                                                 size_t spitch, size_t width, size_t height,
                                                 cudaMemcpyKind kind, cudaStream_t stream) {
  SIMGPU_RT_CALL(ctx_pt, cudaMemcpy2DAsync_ptsz_v7000, dst, dpitch, src, spitch, width, height,
                 kind, stream);
  cudaStream_t s = per_thread_stream(stream);
  return api.finish(copy_2d(api.drv(), dst, dpitch, src, spitch, width, height, kind, &s));
}

SIMGPU_EXPORT cudaError_t cudaMemset(void* devPtr, int value, size_t count) {
  SIMGPU_RT_CALL(ctx, cudaMemset_v3020, devPtr, value, count);
  if (count == 0) return api.finish(cudaSuccess);
  return api.finish(
      SIMGPU_CU(api.drv(), cuMemsetD8, dptr(devPtr), static_cast<unsigned char>(value), count));
}

SIMGPU_EXPORT cudaError_t cudaMemset_ptds(void* devPtr, int value, size_t count) {
  SIMGPU_RT_CALL(ctx_pt, cudaMemset_ptds_v7000, devPtr, value, count);
  if (count == 0) return api.finish(cudaSuccess);
  return api.finish(
      SIMGPU_CU(api.drv(), cuMemsetD8, dptr(devPtr), static_cast<unsigned char>(value), count));
}

SIMGPU_EXPORT cudaError_t cudaMemsetAsync(void* devPtr, int value, size_t count,
                                          cudaStream_t stream) {
  SIMGPU_RT_CALL(ctx, cudaMemsetAsync_v3020, devPtr, value, count, stream);
  if (count == 0) return api.finish(cudaSuccess);
  return api.finish(SIMGPU_CU(api.drv(), cuMemsetD8Async, dptr(devPtr),
                              static_cast<unsigned char>(value), count, stream));
}

SIMGPU_EXPORT cudaError_t cudaMemsetAsync_ptsz(void* devPtr, int value, size_t count,
                                               cudaStream_t stream) {
  SIMGPU_RT_CALL(ctx_pt, cudaMemsetAsync_ptsz_v7000, devPtr, value, count, stream);
  if (count == 0) return api.finish(cudaSuccess);
  return api.finish(SIMGPU_CU(api.drv(), cuMemsetD8Async, dptr(devPtr),
                              static_cast<unsigned char>(value), count, per_thread_stream(stream)));
}

}  // extern "C"
