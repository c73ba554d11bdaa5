// The per-device arenas and the pool's report section (see device_pool.h).
#include "core/device_pool.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <optional>

#include <fmt/format.h>

#include "common/options.h"
#include "common/stats.h"
#include "pool/driver_api.h"
#include "pool/host_memory.h"
#include "pool/planned_region.h"
#include "pool/stream_fences.h"
#include "pool/vmm_arena.h"
#include "residency/swap_engine.h"
#include "residency/um_engine.h"

namespace oversub::core {

// The arena and driver table (pool/) and the backends (residency/) this facade drives.
using namespace oversub::pool;
using namespace oversub::residency;

std::uint64_t swap_capacity_of(std::uint64_t limit_bytes, std::uint64_t free_bytes,
                               std::uint64_t total_bytes) {
  std::uint64_t bytes = limit_bytes;
  if (bytes == 0) {
    const std::uint64_t headroom = std::min<std::uint64_t>(total_bytes / 16, std::uint64_t{1} << 30);
    bytes = free_bytes > headroom ? free_bytes - headroom : 0;
  }
  constexpr std::uint64_t page = std::uint64_t{2} << 20;
  return bytes / page * page;
}

namespace {

constexpr int max_devices = 16;

// Note [Swap capacity]
// ~~~~~~~~~~~~~~~~~~~~
// With OVERSUB_DEVICE_LIMIT the pages may hold the limit;
// without it, the device's free memory when the engine starts less a headroom of
// 1/16 of the device (at most 1 GiB) for what others allocate after us (cuBLAS
// workspaces, the runtime's own buffers), rounded down to whole pages.
std::uint64_t swap_capacity(const pool_settings& s) {
  if (s.swap_capacity_bytes != 0) return swap_capacity_of(s.swap_capacity_bytes, 0, 0);
  std::size_t free_bytes = 0;
  std::size_t total_bytes = 0;
  if (driver().cuMemGetInfo(&free_bytes, &total_bytes) != CUDA_SUCCESS) return 0;
  return swap_capacity_of(0, free_bytes, total_bytes);
}

// Swap mode's page mover, or um mode's managed memory (one backend per device), or
// none.
std::unique_ptr<residency_backend> make_backend(int device, const pool_settings& s) {
  if (s.um) {
    return std::make_unique<um_engine>(device, swap_capacity(s), s.um_naive, s.mover_thread);
  }
  if (!s.swap) return nullptr;
  swap_config c;
  c.device = device;
  c.capacity_bytes = swap_capacity(s);
  c.host_budget_bytes = s.host_budget_bytes;
  c.clean_evictions = s.all_writes_seen;
  c.mover_thread = s.mover_thread;
  // See Note [Do VMM calls wait?]: the learner plans the remaps' waits where they wait.
  c.calls_wait = vmm_calls_wait(device);
  // See Note [The probe's answer before the timings] in residency/swap_engine.h.
  c.calls_wait_known = vmm_waits_answer(device) != vmm_wait_answer::unknown;
  // See Note [Pinned rates at start]: before the pages fill the device.
  const link_rates pinned = pinned_copy_rates(device);
  if (c.calls_wait) {
    const std::string line = fmt::format(
        "swap: device {}'s mapping calls wait for its queued work (measured at start), so "
        "every page moved waits for the launches queued before it; the schedule plans "
        "with those waits. um mode may be faster here: OVERSUB_MODE=auto compares the two "
        "from a profile (OVERSUB_PROFILE)",
        device);
    say(line);
  }
  auto engine = std::make_unique<swap_engine>(c);
  // See Note [Batches before the plan] in residency/swap_engine.h: its batches take them
  // from its first moves; the clock comes with the first launch.
  if (pinned.to_device > 0 && pinned.to_host > 0) {
    engine->set_copy_clock(nullptr, pinned.to_device, pinned.to_host, /*rates_measured=*/true);
  }
  return engine;
}

// See Note [One range in swap mode] in pool/vmm_arena.cc: the pages may spill to the host
// up to the host budget, and no further than the host's memory.
std::size_t swap_range_bytes(const pool_settings& s) {
  if (!s.swap) return 0;
  // A budget of none (all bits set) is the host's memory: nothing when that is unknown.
  const std::uint64_t host = physical_memory_bytes();
  if (s.host_budget_bytes == ~std::uint64_t{0}) return static_cast<std::size_t>(host);
  return static_cast<std::size_t>(host != 0 ? std::min(s.host_budget_bytes, host)
                                            : s.host_budget_bytes);
}

// See Note [Long-lived layout from a profile] (policy/placement.h): what
// set_long_lived_layout asked, and each device's blocks.
struct long_lived_layout {
  std::vector<std::size_t> expected;
  std::vector<std::uint32_t> order;
};
long_lived_layout g_layout;
// The device the layout is for: the first whose allocation asks (a process training on
// one device may still touch another's context); -1 until then.
std::atomic<int> g_layout_device{-1};

struct layout_slots {
  // Some allocation of this device may still claim a block: the allocation path's
  // only cost once the layout is done (or when there is none).
  std::atomic<bool> active{false};
  std::mutex mutex;
  bool placed = false;  // the blocks are taken (or could not be)
  bool ended = false;
  std::vector<void*> block;  // per expected allocation; null once claimed
  std::size_t next = 0;      // the expected allocation to come
  std::uint64_t claimed = 0;
};

struct device_state {
  explicit device_state(int device, const pool_settings& s)
      : backend(make_backend(device, s)),
        pages(backend ? backend->pages() : nullptr),
        online(vmm_arena_config{device, 0, static_cast<std::size_t>(s.large_bytes), pages,
                                swap_range_bytes(s)}) {
    if (s.planned) planned = std::make_unique<planned_region>(online);
    if (s.um && !s.um_naive) migration = probe_managed_rates(device);
    layout.active.store(pages != nullptr && !g_layout.expected.empty(),
                        std::memory_order_release);
  }
  memory_resource& front() { return planned ? static_cast<memory_resource&>(*planned) : online; }
  // The backend serves every allocation itself (um mode), not the arena.
  bool backend_allocates() const { return backend && pages == nullptr; }
  std::unique_ptr<residency_backend> backend;  // swap and um modes; outlives the arena
  managed_rates migration;                     // um mode: Note [um plans at the driver's rates]
  page_backing* pages;                         // the backend's pages the arena maps (swap)
  vmm_arena online;
  std::unique_ptr<planned_region> planned;
  layout_slots layout;
};

pool_settings g_settings;
std::atomic<device_state*> g_devices[max_devices];
std::mutex g_create_mutex;

bool report_section(stats::section& out);

// The device's state if it was made, else null (never makes one).
device_state* existing(int device) {
  return device >= 0 && device < max_devices ? g_devices[device].load(std::memory_order_acquire)
                                             : nullptr;
}

device_state* state(int device) {
  if (device < 0 || device >= max_devices) return nullptr;
  device_state* s = g_devices[device].load(std::memory_order_acquire);
  if (s != nullptr) return s;
  std::lock_guard<std::mutex> lock(g_create_mutex);
  s = g_devices[device].load(std::memory_order_acquire);
  if (s == nullptr) {
    s = new device_state(device, g_settings);
    g_devices[device].store(s, std::memory_order_release);
  }
  return s;
}

// Note [Report without blocking]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// The exit report runs in liboversub's destructor;
// an arena lock held by a thread that exit() cut short would hang it, so the
// section reads only the counters each arena publishes under try_lock.
bool report_section(stats::section& out) {
  bool any = false;
  for (int d = 0; d < max_devices; ++d) {
    device_state* s = g_devices[d].load(std::memory_order_acquire);
    if (s == nullptr) continue;
    std::optional<resource_stats> maybe = s->online.try_stats();
    if (!maybe) continue;
    const resource_stats& r = *maybe;
    const std::string device = fmt::format("device{}", d);
    out.begin(fmt::format("pool device {}", d), {device})
        .bytes("reserved_bytes", r.reserved_bytes)
        .bytes("mapped_bytes", r.mapped_bytes)
        .bytes("peak_mapped_bytes", r.peak_mapped_bytes)
        .bytes("used_bytes", r.used_bytes)
        .bytes("peak_used_bytes", r.peak_used_bytes)
        .bytes("largest_free_bytes", r.largest_free_bytes)
        .count("live_blocks", r.live_blocks)
        .count("allocations", r.allocations)
        .count("failed_allocations", r.failed_allocations)
        .count("grows", r.grows)
        .count("trims", r.trims)
        .count("syncs", r.syncs);
    if (s->backend) s->backend->try_report(d, out);
    if (s->planned) {
      const planned_stats p = s->planned->plan_stats();
      out.begin("pool planned", {device, "planned"})
          .flag("learned", p.planned)
          .count("iteration_allocations", p.iteration_allocations)
          .bytes("region_bytes", p.region_bytes)
          .bytes("lower_bound_bytes", p.lower_bound_bytes)
          .count("served", p.served)
          .count("deviations", p.deviations)
          .count("online", p.online);
    }
    any = true;
  }
  return any;
}

}  // namespace

void configure(const pool_settings& s) {
  g_settings = s;
  stats::set_pool_section(&report_section);
}

bool available() { return driver().complete; }

// Note [Swap needs host-located VMM]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// Swap mode maps a page's address to a host-located
// handle (cuMemCreate with CU_MEM_LOCATION_TYPE_HOST) while the page is out, so that
// an access nobody predicted still finds the bytes. Drivers and devices without
// CU_DEVICE_ATTRIBUTE_HOST_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED refuse such handles, so
// the interposer asks before the first allocation and runs um mode instead (managed
// memory keeps the same promise), or, without managed memory either, no mode that
// oversubscribes.
namespace {
bool device_attribute_is_set(int ordinal, CUdevice_attribute attribute) {
  const driver_table& d = driver();
  if (!d.complete) return false;
  CUdevice dev = 0;
  int value = 0;
  return d.cuDeviceGet(&dev, ordinal) == CUDA_SUCCESS &&
         d.cuDeviceGetAttribute(&value, attribute, dev) == CUDA_SUCCESS && value != 0;
}
}  // namespace

bool host_vmm_supported(int device) {
  return device_attribute_is_set(device,
                                 CU_DEVICE_ATTRIBUTE_HOST_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED);
}

bool managed_memory_supported(int device) {
  return device_attribute_is_set(device, CU_DEVICE_ATTRIBUTE_MANAGED_MEMORY);
}

bool concurrent_managed_access(int device) {
  return device_attribute_is_set(device, CU_DEVICE_ATTRIBUTE_CONCURRENT_MANAGED_ACCESS);
}

namespace {

// See Note [Pinned rates at start]: bytes of device memory at va copied from pinned
// host memory and back on stream, half of them then all of them each way, each copy
// between events; a way's rate is the half more that the whole copies over the time it
// takes more, so a copy's own setup drops out. {} on any failure.
link_rates time_pinned_copies(CUdeviceptr va, std::size_t bytes, CUstream stream) {
  const driver_table& d = driver();
  link_rates out;
  void* host = nullptr;
  CUevent marks[5] = {};
  bool ok = d.cuMemHostAlloc(&host, bytes, 0) == CUDA_SUCCESS;
  for (CUevent& e : marks) ok = ok && d.cuEventCreate(&e, CU_EVENT_DEFAULT) == CUDA_SUCCESS;
  if (ok) {
    const auto h = reinterpret_cast<CUdeviceptr>(host);
    std::memset(host, 0, bytes);
    // Copies in order: in, half; in, all; out, half; out, all. Each one queued behind
    // another (the first behind a copy in of half), so that none waits for its enqueue.
    const CUdeviceptr to[] = {va, va, h, h};
    const CUdeviceptr from[] = {h, h, va, va};
    ok = d.cuMemcpyAsync(va, h, bytes / 2, stream) == CUDA_SUCCESS &&
         d.cuEventRecord(marks[0], stream) == CUDA_SUCCESS;
    for (int k = 0; k < 4 && ok; ++k) {
      ok = d.cuMemcpyAsync(to[k], from[k], k % 2 == 0 ? bytes / 2 : bytes, stream) ==
               CUDA_SUCCESS &&
           d.cuEventRecord(marks[k + 1], stream) == CUDA_SUCCESS;
    }
    float ms[4] = {};
    for (int k = 0; k < 4 && ok; ++k) {
      ok = (k != 0 || d.cuEventSynchronize(marks[4]) == CUDA_SUCCESS) &&
           d.cuEventElapsedTime(&ms[k], marks[k], marks[k + 1]) == CUDA_SUCCESS;
    }
    const double half = static_cast<double>(bytes / 2);
    if (ok && ms[1] > ms[0] && ms[3] > ms[2]) {
      out.to_device = half / ((ms[1] - ms[0]) * 1e-3);
      out.to_host = half / ((ms[3] - ms[2]) * 1e-3);
    }
  }
  for (CUevent e : marks) {
    if (e != nullptr) d.cuEventDestroy(e);
  }
  if (host != nullptr) d.cuMemFreeHost(host);
  return out;
}

}  // namespace

// Note [Do VMM calls wait?]
// ~~~~~~~~~~~~~~~~~~~~~~~~~
// PyTorch's allocator notes (c10/cuda/CUDACachingAllocator.cpp, on expandable segments)
// that changing mappings "appears to involve at least some synchronous actions with
// the GPU". If cuMemUnmap, cuMemMap or cuMemSetAccess wait until the device has
// finished the work already enqueued, every page swap mode remaps drains the queue,
// and um, whose migrations need no host call per page, can be the faster mode. So
// OVERSUB_MODE=auto asks the device, once, before the application's first allocation,
// on memory of its own: 32 MiB of scratch and one 2 MiB page, mapped together. It
// enqueues 2 GiB of memsets of the scratch on a stream of its own (about a
// millisecond on an H100, far longer than a remap that does not wait), records an
// event after them, remaps the page (unmap, map, grant access: what swap mode does
// to a page) and asks about the event. Done already: the calls waited for the
// memsets. Not ready: they did not. The page is no kernel's, so the remap races
// nothing; the scratch is unmapped after the stream is synchronized. Any failure
// (no memory, a driver error) answers unknown, and auto and swap then take the calls
// not to wait. (A smaller scratch with more memsets does not do: on a device of a few
// MiB the host enqueues 2 MiB memsets more slowly than the device runs them, nothing
// is queued when the page is remapped, and the calls seem not to wait.) It needs no
// clock, so it gives the same answer on simgpu (SIMGPU_VMM_WAIT) as on a GPU. Swap
// mode asks too, when its engine starts (before the pages fill the device), and its
// learner plans with the answer (Note [Mapping calls that wait] in policy/simulate.h);
// the answer is kept (vmm_calls_wait), so a process asks once.
vmm_wait_answer probe_vmm_waits(int device) {
  const driver_table& d = driver();
  if (!d.complete) return vmm_wait_answer::unknown;
  constexpr std::size_t page = std::size_t{2} << 20;
  constexpr std::size_t scratch = std::size_t{32} << 20;
  constexpr int memsets = 64;  // 2 GiB of writes
  const CUmemAllocationProp prop = vmm_prop(CU_MEM_LOCATION_TYPE_DEVICE, device);
  const CUmemAccessDesc access = residency::device_access(device);
  CUdeviceptr va = 0;
  CUmemGenericAllocationHandle work = 0, probe = 0;
  bool work_mapped = false, probe_mapped = false;
  CUstream stream = nullptr;
  CUevent done = nullptr;
  vmm_wait_answer answer = vmm_wait_answer::unknown;
  if (d.cuMemAddressReserve(&va, scratch + page, 0, 0, 0) == CUDA_SUCCESS &&
      d.cuMemCreate(&work, scratch, &prop, 0) == CUDA_SUCCESS &&
      (work_mapped = d.cuMemMap(va, scratch, 0, work, 0) == CUDA_SUCCESS) &&
      d.cuMemCreate(&probe, page, &prop, 0) == CUDA_SUCCESS &&
      (probe_mapped = d.cuMemMap(va + scratch, page, 0, probe, 0) == CUDA_SUCCESS) &&
      d.cuMemSetAccess(va, scratch + page, &access, 1) == CUDA_SUCCESS &&
      d.cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING) == CUDA_SUCCESS &&
      d.cuEventCreate(&done, CU_EVENT_DISABLE_TIMING) == CUDA_SUCCESS) {
    bool queued = true;
    for (int i = 0; i < memsets && queued; ++i) {
      queued = d.cuMemsetD8Async(va, static_cast<unsigned char>(i), scratch, stream) == CUDA_SUCCESS;
    }
    if (queued && d.cuEventRecord(done, stream) == CUDA_SUCCESS) {
      probe_mapped = false;
      if (d.cuMemUnmap(va + scratch, page) == CUDA_SUCCESS &&
          (probe_mapped = d.cuMemMap(va + scratch, page, 0, probe, 0) == CUDA_SUCCESS) &&
          d.cuMemSetAccess(va + scratch, page, &access, 1) == CUDA_SUCCESS) {
        const CUresult q = d.cuEventQuery(done);
        answer = q == CUDA_SUCCESS           ? vmm_wait_answer::waits
                 : q == CUDA_ERROR_NOT_READY ? vmm_wait_answer::no_wait
                                             : vmm_wait_answer::unknown;
      }
    }
  }
  if (stream != nullptr) {
    d.cuStreamSynchronize(stream);
    d.cuStreamDestroy(stream);
  }
  if (done != nullptr) d.cuEventDestroy(done);
  if (probe_mapped) d.cuMemUnmap(va + scratch, page);
  if (work_mapped) d.cuMemUnmap(va, scratch);
  if (probe != 0) d.cuMemRelease(probe);
  if (work != 0) d.cuMemRelease(work);
  if (va != 0) d.cuMemAddressFree(va, scratch + page);
  return answer;
}

vmm_wait_answer vmm_waits_answer(int device) {
  static std::mutex mutex;
  static std::map<int, vmm_wait_answer> known;
  std::lock_guard<std::mutex> lock(mutex);
  if (auto it = known.find(device); it != known.end()) return it->second;
  const vmm_wait_answer answer = probe_vmm_waits(device);
  known.emplace(device, answer);
  return answer;
}

bool vmm_calls_wait(int device) { return vmm_waits_answer(device) == vmm_wait_answer::waits; }

// Note [Pinned rates at start]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// The swap learner plans, and the engine sizes its batches of room (Note [Remapping
// runs] in residency/swap_engine.h), with the link's rates, fitted from CUPTI's records
// of the engine's copies (Note [Launch durations] in core/schedule_costs.cc). Where CUPTI is
// not the library's (a profiler holds it, or no libcupti loads) there are no records,
// and a constant 25 GB/s would stand in where an H200 copies at 55: every page's copy
// would seem to take twice its time, the batches would come out half as large and the
// plan would move too little. So swap mode, as its engine starts (before its pages fill
// the device), copies up to 32 MiB of device memory of its own (a quarter of what is
// free, whole 2 MiB pages) from pinned host memory and back, half of it then all of it
// each way, on its own stream between events that time the copies (cuEventElapsedTime,
// no CUPTI), and keeps each way's rate over the half more (the copy's setup drops out).
// The learner takes them where CUPTI gave none (the stats' link_source "probe"), and the
// engine from its first moves (Note [Batches before the plan] in residency/swap_engine.h).

namespace {

link_rates probe_pinned_rates(int device) {
  const driver_table& d = driver();
  link_rates out;
  std::size_t free_bytes = 0, total_bytes = 0;
  if (!d.complete || d.cuMemGetInfo(&free_bytes, &total_bytes) != CUDA_SUCCESS) return out;
  constexpr std::size_t page = std::size_t{2} << 20;
  const std::size_t bytes = std::min(std::size_t{32} << 20, free_bytes / 4 / page * page);
  if (bytes == 0) return out;
  const CUmemAllocationProp prop = vmm_prop(CU_MEM_LOCATION_TYPE_DEVICE, device);
  const CUmemAccessDesc access = residency::device_access(device);
  CUdeviceptr va = 0;
  CUmemGenericAllocationHandle h = 0;
  bool mapped = false;
  CUstream stream = nullptr;
  if (d.cuMemAddressReserve(&va, bytes, 0, 0, 0) == CUDA_SUCCESS &&
      d.cuMemCreate(&h, bytes, &prop, 0) == CUDA_SUCCESS &&
      (mapped = d.cuMemMap(va, bytes, 0, h, 0) == CUDA_SUCCESS) &&
      d.cuMemSetAccess(va, bytes, &access, 1) == CUDA_SUCCESS &&
      d.cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING) == CUDA_SUCCESS) {
    out = time_pinned_copies(va, bytes, stream);
  }
  if (stream != nullptr) {
    d.cuStreamSynchronize(stream);
    d.cuStreamDestroy(stream);
  }
  if (mapped) d.cuMemUnmap(va, bytes);
  if (h != 0) d.cuMemRelease(h);
  if (va != 0) d.cuMemAddressFree(va, bytes);
  return out;
}

}  // namespace

link_rates pinned_copy_rates(int device) {
  static std::mutex mutex;
  static std::map<int, link_rates> known;
  std::lock_guard<std::mutex> lock(mutex);
  if (auto it = known.find(device); it != known.end()) return it->second;
  return known.emplace(device, probe_pinned_rates(device)).first->second;
}

// Note [Managed migration rates, measured]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// The Unified Memory driver migrates at rates of its own, which CUPTI's copy records
// do not give: an H200 (driver 580) prefetched managed memory to the device at 49.3
// GB/s but to the host at 9.4, where pinned copies ran at 55 GB/s each way
// (docs/gpu-results.md). um mode's evictions are prefetches to the host, so a
// prediction of um at the copy rates overrates it by up to six times on its evictions
// (Note [Predicting swap against um] in policy/mode_choice.h). So OVERSUB_MODE=auto,
// when it has a profile to predict from, times the two directions once before the
// application's first allocation: 32 MiB of managed memory of its own (at most a
// quarter of the device's free memory, in 2 MiB steps; none below 2 MiB), written by
// the CPU, prefetched to the device and back once to warm the driver's structures, then
// timed with events on a stream of its own, each way. Where the driver has
// cuMemDiscardBatchAsync, the buffer is then prefetched to the device once more and
// discarded, timed as well: what um's discards of freed buffers hold its stream to the
// host for (Note [um's moves] in policy/mode_choice.h; a driver that refuses it
// discards nothing, and um migrates instead). A few milliseconds on a GPU;
// the buffer is freed after the stream is synchronized. Any failure answers 0, and the
// prediction then takes the copy rates.
//
// Note [um plans at the driver's rates]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// um mode's learner plans its prefetches with the link's rates (Note [Launch
// durations] in core/schedule_costs.cc), and CUPTI's records give those of the copies; but
// every move um makes is a migration, at the driver's rates. At the copy rates the plan
// took evictions to the host as six times cheaper than an H200 moves them. So um mode's
// backend times the migrations once as it starts, as auto does (the same probe, run
// once a device: auto's measurement is reused), and the learner plans at those rates.
// On simgpu's H200 model, at 1/8 of the traces' bytes: ResNet-50 1.5x 64.49 -> 51.37 ms
// an iteration, VGG-16 1.5x 223.96 -> 189.16, GPT-2 3x 468.31 -> 451.98, GPT-2 1.5x
// 316.91 -> 315.80, ResNet-50 3x 81.87 either way (docs/results.md).
managed_rates probe_managed_rates(int device) {
  // Once a device: the answer does not change, and auto and um's backend both ask.
  static std::mutex cache_mutex;
  static std::map<int, managed_rates> cache;
  std::lock_guard<std::mutex> cache_lock(cache_mutex);
  if (auto it = cache.find(device); it != cache.end()) return it->second;
  managed_rates& out = cache[device];
  const driver_table& d = driver();
  if (!d.complete || !concurrent_managed_access(device)) return out;
  // Never more than a quarter of what is free: a migration the device has no room for
  // would time the driver's evictions instead.
  std::size_t free_bytes = 0, total_bytes = 0;
  if (d.cuMemGetInfo(&free_bytes, &total_bytes) != CUDA_SUCCESS) return out;
  constexpr std::size_t two_mib = std::size_t{2} << 20;
  const std::size_t bytes = std::min(std::size_t{32} << 20, free_bytes / 4 / two_mib * two_mib);
  if (bytes == 0) return out;
  CUmemLocation on_device{};
  on_device.type = CU_MEM_LOCATION_TYPE_DEVICE;
  on_device.id = device;
  CUmemLocation on_host{};
  on_host.type = CU_MEM_LOCATION_TYPE_HOST;
  CUdeviceptr p = 0;
  CUstream stream = nullptr;
  CUevent marks[5] = {nullptr, nullptr, nullptr, nullptr, nullptr};
  auto prefetch = [&](const CUmemLocation& where) {
    return d.cuMemPrefetchAsync(p, bytes, where, 0, stream) == CUDA_SUCCESS;
  };
  bool ok = d.cuMemAllocManaged(&p, bytes, CU_MEM_ATTACH_GLOBAL) == CUDA_SUCCESS &&
            d.cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING) == CUDA_SUCCESS;
  for (CUevent& e : marks) ok = ok && d.cuEventCreate(&e, CU_EVENT_DEFAULT) == CUDA_SUCCESS;
  if (ok) {
    std::memset(reinterpret_cast<void*>(p), 1, bytes);
    ok = prefetch(on_device) && prefetch(on_host) && d.cuEventRecord(marks[0], stream) == CUDA_SUCCESS &&
         prefetch(on_device) && d.cuEventRecord(marks[1], stream) == CUDA_SUCCESS &&
         prefetch(on_host) && d.cuEventRecord(marks[2], stream) == CUDA_SUCCESS &&
         d.cuEventSynchronize(marks[2]) == CUDA_SUCCESS;
    float up_ms = 0, down_ms = 0;
    if (ok && d.cuEventElapsedTime(&up_ms, marks[0], marks[1]) == CUDA_SUCCESS &&
        d.cuEventElapsedTime(&down_ms, marks[1], marks[2]) == CUDA_SUCCESS && up_ms > 0 &&
        down_ms > 0) {
      out.to_device = static_cast<double>(bytes) / (up_ms * 1e-3);
      out.to_host = static_cast<double>(bytes) / (down_ms * 1e-3);
    }
    CUdeviceptr base = p;
    std::size_t size = bytes;
    float discard_ms = 0;
    if (out.to_device > 0 && d.cuMemDiscardBatchAsync != nullptr && prefetch(on_device) &&
        d.cuEventRecord(marks[3], stream) == CUDA_SUCCESS &&
        d.cuMemDiscardBatchAsync(&base, &size, 1, 0, stream) == CUDA_SUCCESS &&
        d.cuEventRecord(marks[4], stream) == CUDA_SUCCESS &&
        d.cuEventSynchronize(marks[4]) == CUDA_SUCCESS &&
        d.cuEventElapsedTime(&discard_ms, marks[3], marks[4]) == CUDA_SUCCESS) {
      out.discards = true;
      out.discard_page_ns = static_cast<double>(discard_ms) * 1e6 /
                            static_cast<double>(bytes / (std::size_t{64} << 10));
    }
  }
  if (stream != nullptr) {
    d.cuStreamSynchronize(stream);
    d.cuStreamDestroy(stream);
  }
  for (CUevent e : marks) {
    if (e != nullptr) d.cuEventDestroy(e);
  }
  if (p != 0) d.cuMemFree(p);
  return out;
}

namespace {

// See Note [Long-lived layout from a profile] in policy/placement.h: the block laid out
// for this allocation, or null. The blocks are taken at the device's first allocation;
// those are plain arena blocks, so the allocation that claims one frees it as any other.
void* claim_laid_out(device_state& s, int device, std::size_t bytes, CUstream stream) {
  layout_slots& l = s.layout;
  std::lock_guard<std::mutex> lock(l.mutex);
  int none = -1;
  if (l.ended || !(g_layout_device.compare_exchange_strong(none, device) || none == device)) {
    l.active.store(false, std::memory_order_release);
    return nullptr;
  }
  if (!l.placed) {
    l.placed = true;
    l.block.assign(g_layout.expected.size(), nullptr);
    for (std::uint32_t k : g_layout.order) {
      const allocation_result r = s.online.allocate(g_layout.expected[k], stream);
      if (!r) break;  // the rest are served as always
      l.block[k] = r.ptr;
    }
  }
  if (l.next >= l.block.size() || g_layout.expected[l.next] != bytes) return nullptr;
  void* p = l.block[l.next];
  l.block[l.next++] = nullptr;
  if (p != nullptr) ++l.claimed;
  // Every expected allocation has come: no block is left to claim or give back.
  if (l.next == l.block.size()) l.active.store(false, std::memory_order_release);
  return p;
}

}  // namespace

void set_long_lived_layout(std::vector<std::size_t> expected, std::vector<std::uint32_t> order) {
  if (order.size() != expected.size()) return;
  for (std::uint32_t k : order) {
    if (k >= expected.size()) return;
  }
  g_layout = long_lived_layout{std::move(expected), std::move(order)};
}

layout_result device_end_long_lived_layout(int device) noexcept {
  device_state* s = existing(device);
  if (s == nullptr || s->pages == nullptr || g_layout.expected.empty()) return {};
  try {
    layout_slots& l = s->layout;
    std::lock_guard<std::mutex> lock(l.mutex);
    if (l.ended) return {};
    l.ended = true;
    l.active.store(false, std::memory_order_release);
    if (!l.placed) return {};  // not the device laid out
    layout_result r{g_layout.expected.size(), l.claimed, 0};
    for (std::size_t k = 0; k < l.block.size(); ++k) {
      if (l.block[k] == nullptr) continue;
      s->online.deallocate(l.block[k], g_layout.expected[k], no_stream);
      l.block[k] = nullptr;
      ++r.returned;
    }
    return r;
  } catch (...) {  // a mutex that cannot be locked: the blocks stay
    return {};
  }
}

allocation_result device_allocate(int device, std::size_t bytes, CUstream stream) {
  device_state* s = state(device);
  if (s == nullptr) return {nullptr, pool_errc::out_of_memory};
  if (s->backend_allocates()) return s->backend->allocate(bytes, stream);
  if (s->layout.active.load(std::memory_order_acquire)) {
    if (void* p = claim_laid_out(*s, device, bytes, stream)) {
      s->backend->occupy(reinterpret_cast<std::uintptr_t>(p), bytes);
      return {p, pool_errc::ok};
    }
  }
  allocation_result r = s->front().allocate(bytes, stream);
  // See Note [Dead pages] in residency/swap_engine.h: every block users get passes here.
  if (r && s->backend) s->backend->occupy(reinterpret_cast<std::uintptr_t>(r.ptr), bytes);
  return r;
}

bool device_deallocate(int device, void* ptr, std::size_t bytes, CUstream stream) {
  device_state* s = existing(device);
  if (s == nullptr) return false;
  if (s->backend_allocates()) return s->backend->deallocate(ptr, stream);
  if (s->planned) {
    if (!s->planned->owns(ptr)) return false;
  } else if (!s->online.owns(ptr)) {
    return false;
  }
  if (s->backend) s->backend->vacate(reinterpret_cast<std::uintptr_t>(ptr));
  s->front().deallocate(ptr, bytes, stream);
  return true;
}

std::uint64_t device_cached_bytes(int device) {
  device_state* s = existing(device);
  if (s == nullptr) return 0;
  return s->online.cached_bytes() + (s->planned ? s->planned->slack_bytes() : 0);
}

resource_stats device_stats(int device) {
  device_state* s = existing(device);
  return s == nullptr ? resource_stats{} : s->front().stats();
}

void note_work(CUstream stream) noexcept { fences().note_work(stream); }

namespace {
residency_backend* backend_of(int device) {
  device_state* s = existing(device);
  return s == nullptr ? nullptr : s->backend.get();
}
}  // namespace

residency::prepare_result device_prepare(int device, std::span<const residency::byte_range> ranges, CUstream stream,
                              bool writes, const residency::victim_rank& rank) noexcept {
  residency_backend* b = backend_of(device);
  return b == nullptr ? residency::prepare_result{} : b->prepare(ranges, stream, writes, rank);
}

void device_touch_all(int device, CUstream stream) noexcept {
  if (residency_backend* b = backend_of(device)) b->touch_all(stream);
}

bool device_evict(int device, std::span<const residency::byte_range> ranges) noexcept {
  residency_backend* b = backend_of(device);
  return b == nullptr || b->evict(ranges);
}

bool device_prefetch_now(int device, std::span<const residency::byte_range> ranges,
                         std::vector<residency::byte_range>& later,
                         const residency::victim_rank& rank) noexcept {
  residency_backend* b = backend_of(device);
  return b == nullptr || b->prefetch_now(ranges, later, rank);
}

void device_set_lending(int device, bool on) noexcept {
  if (residency_backend* b = backend_of(device)) {
    try {
      b->set_lending(on);
    } catch (...) {  // a mutex that cannot be locked: lending stays as it was
    }
  }
}

bool device_set_copy_clock(int device, std::uint64_t (*now_ns)() noexcept,
                           double h2d_bytes_per_s, double d2h_bytes_per_s,
                           bool rates_measured) noexcept {
  residency_backend* b = backend_of(device);
  if (b == nullptr) return false;
  try {
    b->set_copy_clock(now_ns, h2d_bytes_per_s, d2h_bytes_per_s, rates_measured);
  } catch (...) {  // a mutex that cannot be locked: the engine asks as before
  }
  return true;
}

std::uint64_t device_layout_generation(int device) noexcept {
  device_state* s = existing(device);
  return s != nullptr && s->planned ? s->planned->layout_generation() : 0;
}

std::uint64_t device_residency_capacity(int device) noexcept {
  residency_backend* b = backend_of(device);
  return b == nullptr ? 0 : b->capacity_bytes();
}

std::size_t device_batch_pages(int device) noexcept {
  residency_backend* b = backend_of(device);
  return b == nullptr ? 1 : b->batch_pages();
}

void device_take_vacancies(int device, std::vector<residency_backend::vacancy>& out) noexcept {
  residency_backend* b = backend_of(device);
  if (b == nullptr) return;
  try {
    b->take_vacancies(out);
  } catch (...) {
    // Out of memory for the list: the learner plans as if no page died.
  }
}

residency::residency_backend::remap_costs device_remap_costs(int device) noexcept {
  residency_backend* b = backend_of(device);
  return b == nullptr ? residency_backend::remap_costs{} : b->measured_remap_costs();
}

managed_rates device_migration_rates(int device) noexcept {
  const device_state* s = existing(device);
  return s == nullptr ? managed_rates{} : s->migration;
}

residency::residency_backend::remap_totals device_moved_totals(int device) noexcept {
  residency_backend* b = backend_of(device);
  return b == nullptr ? residency_backend::remap_totals{} : b->moved_totals();
}

bool device_reserve_foreign(int device, std::int64_t bytes) noexcept {
  device_state* s = state(device);
  return s == nullptr || s->backend == nullptr || s->backend->reserve_foreign(bytes);
}

}  // namespace oversub::core
