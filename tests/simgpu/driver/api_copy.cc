// Driver entry points: copies, memsets and prefetches, each with its per-thread
// default stream export (_ptds for synchronous calls, _ptsz for async ones).
#include "api.h"
#include "copy.h"

using namespace simgpu;

namespace {

uintptr_t u(const void* p) { return reinterpret_cast<uintptr_t>(p); }

CUresult copy_on(CUstream h, bool ptds, uintptr_t dst, uintptr_t src, size_t bytes, bool sync) {
  stream_obj* s = resolve_stream(h, ptds);
  if (s == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  return do_copy(s, dst, src, bytes, sync);
}

CUresult set_on(CUstream h, bool ptds, CUdeviceptr dst, uint32_t v, unsigned elem, size_t n,
                bool sync) {
  stream_obj* s = resolve_stream(h, ptds);
  if (s == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  return do_memset(s, dst, v, elem, n, sync);
}

CUresult prefetch_on(CUstream h, bool ptds, CUdeviceptr p, size_t n, CUmemLocation loc,
                     unsigned flags) {
  if (flags != 0) return CUDA_ERROR_INVALID_VALUE;
  stream_obj* s = resolve_stream(h, ptds);
  if (s == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  return do_prefetch(s, p, n, loc);
}

// cuMemDiscardBatchAsync: "must not be legacy NULL stream"; flags reserved (0).
CUresult discard_on(CUstream h, bool ptds, CUdeviceptr* dptrs, size_t* sizes, size_t count,
                    unsigned long long flags) {
  if (flags != 0 || count == 0 || dptrs == nullptr || sizes == nullptr)
    return CUDA_ERROR_INVALID_VALUE;
  stream_obj* s = resolve_stream(h, ptds);
  if (s == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  if (s->legacy) return CUDA_ERROR_INVALID_VALUE;
  std::vector<std::pair<uintptr_t, uint64_t>> ranges;
  ranges.reserve(count);
  for (size_t i = 0; i < count; ++i) ranges.emplace_back(dptrs[i], sizes[i]);
  return do_discard(s, std::move(ranges));
}

CUresult copy_2d_on(const CUDA_MEMCPY2D* c, CUstream h, bool ptds, bool sync) {
  if (c == nullptr) return CUDA_ERROR_INVALID_VALUE;
  auto side = [](CUmemorytype t, const void* host, CUdeviceptr device, CUarray array,
                 size_t x, size_t y, size_t pitch, uintptr_t* out) {
    uintptr_t base = 0;
    switch (t) {
      case CU_MEMORYTYPE_HOST: base = u(host); break;
      case CU_MEMORYTYPE_DEVICE:
      case CU_MEMORYTYPE_UNIFIED: base = device; break;
      default: return array != nullptr ? CUDA_ERROR_NOT_SUPPORTED : CUDA_ERROR_INVALID_VALUE;
    }
    if (base == 0) return CUDA_ERROR_INVALID_VALUE;
    *out = base + y * pitch + x;
    return CUDA_SUCCESS;
  };
  uintptr_t src = 0, dst = 0;
  if (CUresult r = side(c->srcMemoryType, c->srcHost, c->srcDevice, c->srcArray, c->srcXInBytes,
                        c->srcY, c->srcPitch, &src);
      r != CUDA_SUCCESS)
    return r;
  if (CUresult r = side(c->dstMemoryType, c->dstHost, c->dstDevice, c->dstArray, c->dstXInBytes,
                        c->dstY, c->dstPitch, &dst);
      r != CUDA_SUCCESS)
    return r;
  stream_obj* s = resolve_stream(h, ptds);
  if (s == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  return do_copy_2d(s, dst, c->dstPitch, src, c->srcPitch, c->WidthInBytes, c->Height, sync);
}

}  // namespace

// ---- generic (unified addressing) ----------------------------------------------------

SIMGPU_EXPORT CUresult cuMemcpy(CUdeviceptr dst, CUdeviceptr src, size_t ByteCount) {
  SIMGPU_API(context, cuMemcpy, dst, src, ByteCount);
  SIMGPU_RETURN(copy_on(nullptr, false, dst, src, ByteCount, true));
}
SIMGPU_EXPORT CUresult cuMemcpy_ptds(CUdeviceptr dst, CUdeviceptr src, size_t ByteCount) {
  SIMGPU_API(context, cuMemcpy_ptds, dst, src, ByteCount);
  SIMGPU_RETURN(copy_on(nullptr, true, dst, src, ByteCount, true));
}
SIMGPU_EXPORT CUresult cuMemcpyAsync(CUdeviceptr dst, CUdeviceptr src, size_t ByteCount,
                                     CUstream hStream) {
  SIMGPU_API(context, cuMemcpyAsync, dst, src, ByteCount, hStream);
  SIMGPU_RETURN(copy_on(hStream, false, dst, src, ByteCount, false));
}
SIMGPU_EXPORT CUresult cuMemcpyAsync_ptsz(CUdeviceptr dst, CUdeviceptr src, size_t ByteCount,
                                          CUstream hStream) {
  SIMGPU_API(context, cuMemcpyAsync_ptsz, dst, src, ByteCount, hStream);
  SIMGPU_RETURN(copy_on(hStream, true, dst, src, ByteCount, false));
}

// ---- typed copies ----------------------------------------------------------------------

SIMGPU_EXPORT CUresult cuMemcpyHtoD(CUdeviceptr dstDevice, const void* srcHost, size_t n) {
  SIMGPU_API(context, cuMemcpyHtoD_v2, dstDevice, srcHost, n);
  SIMGPU_RETURN(copy_on(nullptr, false, dstDevice, u(srcHost), n, true));
}
SIMGPU_EXPORT CUresult cuMemcpyHtoD_v2_ptds(CUdeviceptr dstDevice, const void* srcHost,
                                            size_t n) {
  SIMGPU_API(context, cuMemcpyHtoD_v2_ptds, dstDevice, srcHost, n);
  SIMGPU_RETURN(copy_on(nullptr, true, dstDevice, u(srcHost), n, true));
}
SIMGPU_EXPORT CUresult cuMemcpyDtoH(void* dstHost, CUdeviceptr srcDevice, size_t n) {
  SIMGPU_API(context, cuMemcpyDtoH_v2, dstHost, srcDevice, n);
  SIMGPU_RETURN(copy_on(nullptr, false, u(dstHost), srcDevice, n, true));
}
SIMGPU_EXPORT CUresult cuMemcpyDtoH_v2_ptds(void* dstHost, CUdeviceptr srcDevice, size_t n) {
  SIMGPU_API(context, cuMemcpyDtoH_v2_ptds, dstHost, srcDevice, n);
  SIMGPU_RETURN(copy_on(nullptr, true, u(dstHost), srcDevice, n, true));
}
SIMGPU_EXPORT CUresult cuMemcpyDtoD(CUdeviceptr dstDevice, CUdeviceptr srcDevice, size_t n) {
  SIMGPU_API(context, cuMemcpyDtoD_v2, dstDevice, srcDevice, n);
  SIMGPU_RETURN(copy_on(nullptr, false, dstDevice, srcDevice, n, true));
}
SIMGPU_EXPORT CUresult cuMemcpyDtoD_v2_ptds(CUdeviceptr dstDevice, CUdeviceptr srcDevice,
                                            size_t n) {
  SIMGPU_API(context, cuMemcpyDtoD_v2_ptds, dstDevice, srcDevice, n);
  SIMGPU_RETURN(copy_on(nullptr, true, dstDevice, srcDevice, n, true));
}
SIMGPU_EXPORT CUresult cuMemcpyHtoDAsync(CUdeviceptr dstDevice, const void* srcHost, size_t n,
                                         CUstream hStream) {
  SIMGPU_API(context, cuMemcpyHtoDAsync_v2, dstDevice, srcHost, n, hStream);
  SIMGPU_RETURN(copy_on(hStream, false, dstDevice, u(srcHost), n, false));
}
SIMGPU_EXPORT CUresult cuMemcpyHtoDAsync_v2_ptsz(CUdeviceptr dstDevice, const void* srcHost,
                                                 size_t n, CUstream hStream) {
  SIMGPU_API(context, cuMemcpyHtoDAsync_v2_ptsz, dstDevice, srcHost, n, hStream);
  SIMGPU_RETURN(copy_on(hStream, true, dstDevice, u(srcHost), n, false));
}
SIMGPU_EXPORT CUresult cuMemcpyDtoHAsync(void* dstHost, CUdeviceptr srcDevice, size_t n,
                                         CUstream hStream) {
  SIMGPU_API(context, cuMemcpyDtoHAsync_v2, dstHost, srcDevice, n, hStream);
  SIMGPU_RETURN(copy_on(hStream, false, u(dstHost), srcDevice, n, false));
}
SIMGPU_EXPORT CUresult cuMemcpyDtoHAsync_v2_ptsz(void* dstHost, CUdeviceptr srcDevice, size_t n,
                                                 CUstream hStream) {
  SIMGPU_API(context, cuMemcpyDtoHAsync_v2_ptsz, dstHost, srcDevice, n, hStream);
  SIMGPU_RETURN(copy_on(hStream, true, u(dstHost), srcDevice, n, false));
}
SIMGPU_EXPORT CUresult cuMemcpyDtoDAsync(CUdeviceptr dstDevice, CUdeviceptr srcDevice, size_t n,
                                         CUstream hStream) {
  SIMGPU_API(context, cuMemcpyDtoDAsync_v2, dstDevice, srcDevice, n, hStream);
  SIMGPU_RETURN(copy_on(hStream, false, dstDevice, srcDevice, n, false));
}
SIMGPU_EXPORT CUresult cuMemcpyDtoDAsync_v2_ptsz(CUdeviceptr dstDevice, CUdeviceptr srcDevice,
                                                 size_t n, CUstream hStream) {
  SIMGPU_API(context, cuMemcpyDtoDAsync_v2_ptsz, dstDevice, srcDevice, n, hStream);
  SIMGPU_RETURN(copy_on(hStream, true, dstDevice, srcDevice, n, false));
}

// ---- 2D copies (host and device memory; arrays are not simulated) --------------------

SIMGPU_EXPORT CUresult cuMemcpy2D(const CUDA_MEMCPY2D* pCopy) {
  SIMGPU_API(context, cuMemcpy2D_v2, pCopy);
  SIMGPU_RETURN(copy_2d_on(pCopy, nullptr, false, true));
}
SIMGPU_EXPORT CUresult cuMemcpy2D_v2_ptds(const CUDA_MEMCPY2D* pCopy) {
  SIMGPU_API(context, cuMemcpy2D_v2_ptds, pCopy);
  SIMGPU_RETURN(copy_2d_on(pCopy, nullptr, true, true));
}
SIMGPU_EXPORT CUresult cuMemcpy2DAsync(const CUDA_MEMCPY2D* pCopy, CUstream hStream) {
  SIMGPU_API(context, cuMemcpy2DAsync_v2, pCopy, hStream);
  SIMGPU_RETURN(copy_2d_on(pCopy, hStream, false, false));
}
SIMGPU_EXPORT CUresult cuMemcpy2DAsync_v2_ptsz(const CUDA_MEMCPY2D* pCopy, CUstream hStream) {
  SIMGPU_API(context, cuMemcpy2DAsync_v2_ptsz, pCopy, hStream);
  SIMGPU_RETURN(copy_2d_on(pCopy, hStream, true, false));
}

// ---- memsets ---------------------------------------------------------------------------

SIMGPU_EXPORT CUresult cuMemsetD8(CUdeviceptr dstDevice, unsigned char uc, size_t N) {
  SIMGPU_API(context, cuMemsetD8_v2, dstDevice, uc, N);
  SIMGPU_RETURN(set_on(nullptr, false, dstDevice, uc, 1, N, true));
}
SIMGPU_EXPORT CUresult cuMemsetD8_v2_ptds(CUdeviceptr dstDevice, unsigned char uc, size_t N) {
  SIMGPU_API(context, cuMemsetD8_v2_ptds, dstDevice, uc, N);
  SIMGPU_RETURN(set_on(nullptr, true, dstDevice, uc, 1, N, true));
}
SIMGPU_EXPORT CUresult cuMemsetD16(CUdeviceptr dstDevice, unsigned short us, size_t N) {
  SIMGPU_API(context, cuMemsetD16_v2, dstDevice, us, N);
  SIMGPU_RETURN(set_on(nullptr, false, dstDevice, us, 2, N, true));
}
SIMGPU_EXPORT CUresult cuMemsetD16_v2_ptds(CUdeviceptr dstDevice, unsigned short us, size_t N) {
  SIMGPU_API(context, cuMemsetD16_v2_ptds, dstDevice, us, N);
  SIMGPU_RETURN(set_on(nullptr, true, dstDevice, us, 2, N, true));
}
SIMGPU_EXPORT CUresult cuMemsetD32(CUdeviceptr dstDevice, unsigned int ui, size_t N) {
  SIMGPU_API(context, cuMemsetD32_v2, dstDevice, ui, N);
  SIMGPU_RETURN(set_on(nullptr, false, dstDevice, ui, 4, N, true));
}
SIMGPU_EXPORT CUresult cuMemsetD32_v2_ptds(CUdeviceptr dstDevice, unsigned int ui, size_t N) {
  SIMGPU_API(context, cuMemsetD32_v2_ptds, dstDevice, ui, N);
  SIMGPU_RETURN(set_on(nullptr, true, dstDevice, ui, 4, N, true));
}
SIMGPU_EXPORT CUresult cuMemsetD8Async(CUdeviceptr dstDevice, unsigned char uc, size_t N,
                                       CUstream hStream) {
  SIMGPU_API(context, cuMemsetD8Async, dstDevice, uc, N, hStream);
  SIMGPU_RETURN(set_on(hStream, false, dstDevice, uc, 1, N, false));
}
SIMGPU_EXPORT CUresult cuMemsetD8Async_ptsz(CUdeviceptr dstDevice, unsigned char uc, size_t N,
                                            CUstream hStream) {
  SIMGPU_API(context, cuMemsetD8Async_ptsz, dstDevice, uc, N, hStream);
  SIMGPU_RETURN(set_on(hStream, true, dstDevice, uc, 1, N, false));
}
SIMGPU_EXPORT CUresult cuMemsetD16Async(CUdeviceptr dstDevice, unsigned short us, size_t N,
                                        CUstream hStream) {
  SIMGPU_API(context, cuMemsetD16Async, dstDevice, us, N, hStream);
  SIMGPU_RETURN(set_on(hStream, false, dstDevice, us, 2, N, false));
}
SIMGPU_EXPORT CUresult cuMemsetD16Async_ptsz(CUdeviceptr dstDevice, unsigned short us, size_t N,
                                             CUstream hStream) {
  SIMGPU_API(context, cuMemsetD16Async_ptsz, dstDevice, us, N, hStream);
  SIMGPU_RETURN(set_on(hStream, true, dstDevice, us, 2, N, false));
}
SIMGPU_EXPORT CUresult cuMemsetD32Async(CUdeviceptr dstDevice, unsigned int ui, size_t N,
                                        CUstream hStream) {
  SIMGPU_API(context, cuMemsetD32Async, dstDevice, ui, N, hStream);
  SIMGPU_RETURN(set_on(hStream, false, dstDevice, ui, 4, N, false));
}
SIMGPU_EXPORT CUresult cuMemsetD32Async_ptsz(CUdeviceptr dstDevice, unsigned int ui, size_t N,
                                             CUstream hStream) {
  SIMGPU_API(context, cuMemsetD32Async_ptsz, dstDevice, ui, N, hStream);
  SIMGPU_RETURN(set_on(hStream, true, dstDevice, ui, 4, N, false));
}

// ---- managed prefetch ------------------------------------------------------------------

SIMGPU_EXPORT CUresult cuMemPrefetchAsync(CUdeviceptr devPtr, size_t count, CUmemLocation location,
                                          unsigned int flags, CUstream hStream) {
  SIMGPU_API(context, cuMemPrefetchAsync_v2, devPtr, count, location, flags, hStream);
  SIMGPU_RETURN(prefetch_on(hStream, false, devPtr, count, location, flags));
}
SIMGPU_EXPORT CUresult cuMemPrefetchAsync_v2_ptsz(CUdeviceptr devPtr, size_t count,
                                                  CUmemLocation location, unsigned int flags,
                                                  CUstream hStream) {
  SIMGPU_API(context, cuMemPrefetchAsync_v2_ptsz, devPtr, count, location, flags, hStream);
  SIMGPU_RETURN(prefetch_on(hStream, true, devPtr, count, location, flags));
}

SIMGPU_EXPORT CUresult cuMemDiscardBatchAsync(CUdeviceptr* dptrs, size_t* sizes, size_t count,
                                              unsigned long long flags, CUstream hStream) {
  SIMGPU_API(context, cuMemDiscardBatchAsync, dptrs, sizes, count, flags, hStream);
  SIMGPU_RETURN(discard_on(hStream, false, dptrs, sizes, count, flags));
}
SIMGPU_EXPORT CUresult cuMemDiscardBatchAsync_ptsz(CUdeviceptr* dptrs, size_t* sizes,
                                                   size_t count, unsigned long long flags,
                                                   CUstream hStream) {
  SIMGPU_API(context, cuMemDiscardBatchAsync_ptsz, dptrs, sizes, count, flags, hStream);
  SIMGPU_RETURN(discard_on(hStream, true, dptrs, sizes, count, flags));
}
