// One refusal: what every hook that turns a call away because of memory says and
// returns, whichever layer ran out (the tracker's virtual capacity, the pool, the
// residency engine, another library's VMM memory).
//
// Note [One refusal message]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~
// A refused call returns cudaErrorMemoryAllocation (CUDA_ERROR_OUT_OF_MEMORY to a
// driver caller) and logs one line shaped like PyTorch's out-of-memory message, so a
// user who knows that one reads this one: what the call asked for, how much of which
// capacity is free, what oversub holds, then why and which option to change
// (OVERSUB_DEVICE_LIMIT, OVERSUB_MODE=swap, OVERSUB_HOST_LIMIT, PyTorch's
// expandable_segments:False). The first refusal of the process is a warning and the
// later ones info, one flag for all kinds. Each kind is counted where the statistics
// have a counter for it (pool_refusals, swap_refusals).
#ifndef OVERSUB_CORE_REFUSAL_H
#define OVERSUB_CORE_REFUSAL_H

#include <driver_types.h>

#include <cstdint>
#include <string>

namespace oversub {

enum class refusal_kind : std::uint8_t {
  device_limit,     // track and pool modes: past OVERSUB_DEVICE_LIMIT (the tracker)
  pool_full,        // pool mode: the pool could not map more device memory
  pool_no_driver,   // pool mode: ... because the CUDA driver is unavailable
  resident_too_large,  // swap/um: the call's own memory is more than the swap capacity
  resident_no_room,    // swap/um: nothing could be evicted to make room
  host_budget,         // swap: evicting needs host memory past OVERSUB_HOST_LIMIT
  foreign_vmm,      // swap/um: the application's own VMM memory would leave no room
};

struct refusal {
  refusal_kind kind;
  const char* call;         // the entry point refused
  int device;
  std::uint64_t asked;      // bytes asked for (needed resident, for a launch or copy)
  bool driver_caller = false;  // the message names CUDA_ERROR_OUT_OF_MEMORY
  // The capacity the call counts against and what oversub holds of it; filled by
  // refuse() where the pool or the engine knows them (the pool and residency kinds),
  // by the caller for device_limit (the tracker's limit and live bytes).
  std::uint64_t capacity = 0;
  std::uint64_t held = 0;
};

// Logs r (Note [One refusal message]), counts it, returns cudaErrorMemoryAllocation
// (a driver caller translates it: core/error_codes.h).
cudaError_t refuse(refusal r) noexcept;

// What the message says besides r: filled by refuse() from the pool and the engine.
struct refusal_figures {
  std::uint64_t device_free = 0;   // pool kinds: the device's free memory (0: unknown)
  std::uint64_t device_total = 0;
  std::uint64_t pool_used = 0;     // pool kinds: what the application holds of the pool
  bool swap = false;               // swap mode (pages), not um
  std::uint64_t page_bytes = 0;    // swap mode: the engine's page
  std::uint64_t limit_bytes = 0;   // swap mode: OVERSUB_DEVICE_LIMIT in bytes (0: none)
};
// The message (without the log prefix): pure, for refuse() and its test.
std::string refusal_message(const refusal& r, const refusal_figures& f);

}  // namespace oversub

#endif  // OVERSUB_CORE_REFUSAL_H
