// page_runs: remapping runs of adjacent pages with one unmap and one access grant
// each (Note [Remapping runs] in residency/swap_engine.h).
#include "residency/page_runs.h"

#include "pool/driver_api.h"

namespace oversub::residency {

CUmemAccessDesc device_access(int device) {
  CUmemAccessDesc access{};
  access.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  access.location.id = device;
  access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  return access;
}

CUresult remap_runs(std::span<const std::uintptr_t> vas,
                    std::span<const CUmemGenericAllocationHandle> from,
                    std::span<const CUmemGenericAllocationHandle> to, std::size_t page_bytes,
                    int device, std::vector<char>& ok, std::uint64_t& calls,
                    std::uint64_t (*clock)() noexcept, run_cost_fit* fit) {
  const pool::driver_table& d = pool::driver();
  const CUmemAccessDesc access = device_access(device);
  ok.assign(vas.size(), 0);
  CUresult first_error = CUDA_SUCCESS;
  for_runs(vas, page_bytes, [&](std::size_t first, std::size_t count) {
    if (first_error != CUDA_SUCCESS) return;
    const std::size_t end = first + count;
    const bool timed = clock != nullptr && fit != nullptr;
    std::uint64_t t0 = timed ? clock() : 0;
    ++calls;
    if (CUresult r = d.cuMemUnmap(vas[first], count * page_bytes); r != CUDA_SUCCESS) {
      first_error = r;  // nothing unmapped: the whole range must be whole mappings
      return;
    }
    const std::uint64_t unmapped = timed ? clock() : 0;
    const std::uint64_t spent = unmapped - t0;
    std::size_t moved = first;
    for (; moved < end; ++moved) {
      ++calls;
      if (CUresult r = d.cuMemMap(vas[moved], page_bytes, 0, to[moved], 0); r != CUDA_SUCCESS) {
        first_error = r;
        break;
      }
    }
    if (timed && moved == end) {
      fit->maps += static_cast<double>(count);
      fit->map_ns += static_cast<double>(clock() - unmapped);
    }
    // The pages not moved: their memory back, so their bytes stay reachable.
    for (std::size_t k = moved; k < end; ++k) {
      ++calls;
      d.cuMemMap(vas[k], page_bytes, 0, from[k], 0);
    }
    ++calls;
    t0 = timed ? clock() : 0;
    const CUresult granted = d.cuMemSetAccess(vas[first], count * page_bytes, &access, 1);
    if (timed && granted == CUDA_SUCCESS) {
      fit->add(static_cast<double>(count), static_cast<double>(spent + (clock() - t0)));
    }
    if (CUresult r = granted; r != CUDA_SUCCESS) {
      // Every page back on its old memory, with access page by page.
      for (std::size_t k = first; k < end; ++k) {
        if (k < moved) {
          calls += 2;
          d.cuMemUnmap(vas[k], page_bytes);
          d.cuMemMap(vas[k], page_bytes, 0, from[k], 0);
        }
        ++calls;
        d.cuMemSetAccess(vas[k], page_bytes, &access, 1);
      }
      if (first_error == CUDA_SUCCESS) first_error = r;
      return;
    }
    for (std::size_t k = first; k < moved; ++k) ok[k] = 1;
  });
  return first_error;
}

}  // namespace oversub::residency
