// residency: which pages of oversub's device arena hold their bytes on the device and
// which on the host, and the copies that move them, so that a job can own more bytes
// than the device has (OVERSUB_MODE=swap).
//
// A page is one mapping granule of the arena (2 MiB). Every page keeps its virtual
// address for its whole life; only what backs it changes:
//
//   resident   device memory mapped at the address (counted against the capacity);
//   evicting   still resident, a copy to its host handle queued (or, for a clean page,
//              only the ordering after its users); the device memory is released when
//              that completes (finish_eviction);
//   on_host    its host handle (cuMemCreate with a HOST location) mapped at the
//              address, device memory released.
//
// Note [An unpredicted access is slow, not a crash]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// While on the host, the page's
// address maps host memory that kernels can read and write over the link, so a kernel
// whose buffers we failed to find still computes the right result. That is why a page
// is remapped, never left unmapped.
//
// Note [Host handle as the host copy]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// Each page that was ever evicted owns a host
// handle, also mapped at a shadow address (one reserved range the size of the host
// budget), where the copies read and write it. After a fetch it stays: the host copy is
// current until the page is written, so a page fetched and not written since is evicted
// with no copy (clean eviction).
//
// Note [What counts as a write]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// CUDA does not say which parameters a kernel writes,
// and a kernel can write through a pointer it found in device memory, which no
// argument scan sees. So every prepare() with writes (every launch, every copy or
// memset into device memory) advances a write epoch, and a page is clean only when
// no such work was prepared since its host copy was made: any launch anywhere may
// have written it. Only reads we can see (copies out of it) keep it clean. Losing a
// write is data loss; a needless copy is only time. Work that never reaches
// prepare() (a library launching through the driver API while only the runtime is
// hooked) would break that, so clean evictions can be switched off
// (swap_config::clean_evictions).
//
// Note [Ordering]
// ~~~~~~~~~~~~~~~
// Copies run on two streams of the engine's own (one per direction),
// so compute never waits on a copy it does not need. An eviction's copy waits for an
// event recorded on every stream that used the page since it was last made resident;
// the device memory is released (cuMemUnmap) only after the host has waited for the
// copy's event, so no queued work still uses it. A fetch remaps the page, queues its
// copy in and makes the consuming stream wait on the copy's event (cuStreamWaitEvent);
// later users on other streams wait on it too until it is known complete.
//
// Note [Moves after all work]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~
// A kernel can reach a page that no prepare() announced
// (a pointer it loads from device memory, a graph replay, a launch whose parameters
// could not be read), on a stream that never used the page as far as the engine
// knows. So an eviction's copy, and with it the release of the device memory, waits
// not only for the page's users but for everything every stream had enqueued when the
// eviction began (stream_fences knows every stream with work); a stream whose work
// the copy stream already waited for, with nothing new since, is not asked again.
// Work enqueued after the eviction began is not covered: an unannounced access then
// reaches the page through whatever maps it when it runs (Note [An unpredicted access
// is slow, not a crash]), as an unannounced access to an evicting page always could.
//
// Note [A launch that may touch anything]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// A launch whose parameter layout cannot be
// read may use any page. touch_all() records its stream as a user of every page
// without naming them: evictions are ordered after it anyway (Note [Moves after all
// work]), and the next fetch, whose remap would change what a page's address maps
// under it, first waits for everything those streams enqueued so far (the host
// waits, as for any fetch of a page an unannounced user reached on the host).
//
// Note [No moves while a user captures]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// While a stream captures a graph, its work
// is recorded, not run, and an event recorded on it is a node of the graph: a copy
// stream made to wait on it would join the capture, and the moves would be replayed
// with the graph. So a move that must be ordered after a capturing stream is not made
// now (evict and prefetch do nothing and report no failure; the schedule asks again
// later), prepare() enqueues nothing for a capturing stream, and a page the arena
// needs meanwhile starts on the host
// (Note [Pages born on the host] in residency/swap_page_table.cc). simtrain --graphs
// at 3x (the step captured once, allocating from a private pool during capture, as
// PyTorch's CUDA graphs do) ran out of memory without this.
//
// Note [Windows into large allocations]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// A framework's caching allocator hands out
// tensors inside segments of 20 MiB or more, and the argument scan finds the
// segment, not the tensor. Making whole segments resident for each launch may
// need more than the capacity, so where a launch's allocations together exceed it, the
// hooks ask, for each one larger than a quarter of it, for a window from the argument
// word on, as an optional range: fetched when it fits, otherwise left on the host,
// where the kernel still reaches it (Note [An unpredicted access is slow, not a
// crash]). Where they fit, each allocation is asked for whole: a window leaves the
// rest of a tensor on the host, and every kernel that uses it reads that rest over the
// link at the zero-copy rate, each time. VGG-16 b256 at 1/8 of its bytes, 1.5x, on the
// H200's measured model with the VMM waits (a 411 MB activation, more than a quarter
// of the 1.5 GiB of room, in a launch of 1.15 GiB): 661.5 ms per iteration with
// windows, 584.6 with whole allocations (T_unl 528; simgpu had charged the pages past
// a window's first as device memory, Note [A range across mappings] in
// tests/simgpu/driver/address_space.cc). um mode keeps the windows wherever the
// allocation is that large: its engine leaves such a buffer to the driver's demand
// paging (Note [Large managed buffers] in residency/um_engine.cc), and its learner
// plans only what a launch asks for whole (Note [What the learner moves] in
// core/schedule_internal.h); asked for whole, the 411 MB activation above was planned
// and prefetched to the host at the driver's 9.4 GB/s every iteration: um 553.1 ->
// 645.3 ms per iteration there. Only the required ranges can make prepare() fail with
// too_large.
//
// Note [Dead pages]
// ~~~~~~~~~~~~~~~~~
// The pool tells the engine which bytes hold live allocations
// (occupy() when it hands a block out, vacate() when the block comes back). A page no
// live block overlaps holds nothing anyone may read, and neither does a page whose
// blocks were all handed out after its last vacancy while no write-capable work was
// prepared since (a new block's contents are undefined until written). Such a page's
// content is dead: it is evicted without a copy (still ordered after its users, and
// still remapped to its host handle, so a stray access stays harmless) and fetched
// without one, and making room takes dead pages before live ones. This is what the
// allocations' lifetimes are worth to swapping: an activation freed in the backward
// pass is not copied out, and the page that holds the next iteration's activation is
// not copied back in. Whether content is dead is decided from the allocation calls,
// never from the schedule, so a wrong schedule cannot lose data; an address the engine
// was never told about counts as live.
//
// Note [Making room]
// ~~~~~~~~~~~~~~~~~~
// Pages being prepared for the current launch are pinned. To fit
// pages the engine first finishes evictions whose copies are known complete, then, if
// it may wait, waits for the oldest eviction under way; otherwise it evicts unpinned
// resident pages, dead ones first (Note [Dead pages]), then the least recently used.
// A launch whose own pages exceed the capacity cannot run: prepare() says so and
// nothing is moved.
//
// Note [Batched moves]
// ~~~~~~~~~~~~~~~~~~~~
// Every page moved costs host time in driver calls, and the
// host's time is the launches' time once the queue runs dry (on simgpu's H100-PCIe
// model each call is 2 us; real mapping calls cost more). So the engine moves the
// pages of one request (a schedule's evictions before a launch, a launch's fetches)
// together:
//   - one ordering per request: an event recorded once on each user stream of any of
//     the pages, and one wait on each copy under way, instead of one per page;
//   - one copy in per run of pages adjacent both at their addresses and at their
//     shadow addresses (a page's first eviction takes the next shadow slot, so pages
//     first evicted together stay adjacent there), instead of one per page; copies
//     out go page by page (Note [Evictions copy page by page]);
//   - one copy event per run, shared by its pages (copy_event, counted), so that work
//     waiting for one page never waits for the copies queued after it;
//   - one cuMemUnmap and one cuMemSetAccess per run of adjacent pages remapped
//     together, one cuMemMap per page (Note [Remapping runs]);
//   - an evicted page's device memory is kept for the next fetch or new page (Note
//     [Spare device memory]).
// A page whose eviction is still under way when it is wanted again is made resident
// with no host wait: it keeps its device memory, and the work that uses it waits on
// the eviction's copy event, which is ordered after the page's earlier users.
//
// Note [Remapping runs]
// ~~~~~~~~~~~~~~~~~~~~~
// A page moved is remapped: its address unmapped, the other memory mapped there, access
// granted. On a GPU the unmap and the grant cost mostly per call, not per page: the
// H200 measured, while a kernel ran, 64 us per cuMemUnmap plus 0.4 per 2 MiB and 122 us
// per cuMemSetAccess plus 1.4 per 2 MiB, where a 2 MiB page's copy takes 38 us
// (docs/gpu-results.md). So pages adjacent at their addresses and moved together are
// remapped as a run (remap_runs in residency/page_runs.h): one cuMemUnmap over the run,
// one cuMemMap per page (each page is its own handle), one cuMemSetAccess over the
// run. The driver allows both calls over several mappings, as long as no mapping is
// cut: cuMemUnmap's documentation forbids only a sub-range of one mapping; NVIDIA's
// vectorAddMMAP sample (cuda-samples, multidevicealloc_memmap.cpp) maps one handle per
// device and then grants access and unmaps with one call each over all of them;
// PyTorch's expandable segments grant access over several mappings at once. simgpu
// checks the same (whole mappings, every byte mapped). A driver that unmaps only one
// mapping a call is met page by page: See Note [A driver that unmaps one mapping at a
// time] in residency/page_runs.cc.
// Runs form only where moves are made together, and room comes a page at a time (each
// eviction's own copy out, Note [Evictions copy page by page]). So the engine times
// each run's unmap and grant on its copy clock (set_copy_clock) and fits them as a part
// per run plus a part per page (run_cost_fit; with calls that wait for the device:
// See Note [Timing calls that may wait] in residency/page_runs.cc). Where a run's own
// part is worth the copies of several pages, a fetch that finds room for fewer than
// that many of its pages waits for the eviction that frees the last of them
// (batch_pages_locked), and
// the evictions that wait frees are finished, and the pages fetched, as runs; the
// mover waits likewise and takes the pages adjacent to its batch's with it. A batch
// costs two runs, its evictions' and its fetch's, so it gathers as many pages as
// copy in the time of two runs' own parts (policy::run_batch_pages, at most
// kMaxRunPages): on the H200's measured model 10 pages (186 us a run, 38 us a page's
// copy), and more where the room allows (Note [Batches that keep up]). With the room
// of one run's part (5 pages) the mover's remaps bounded the 3x points: ResNet-50 at
// 1/8 45.32 -> 43.16 ms per iteration, GPT-2 at 1/8 280.88 -> 257.13 (T_unl 254.01),
// the 1.5x points within 1.5% (docs/results.md,
// "Swap: a batch of room for two runs"). 16 pages was faster at GPT-2 3x and
// ResNet-50 1.5x and slower at ResNet-50 3x and VGG-16 (the batch is also room the
// plan leaves out: policy::planning_capacity). Until both the calls and the link are
// measured (Note [Batches before the plan]), and where a call costs about the same for
// one page as for many (simgpu's H100-PCIe model charges the A100's figures per page),
// the batch is one page and a fetch's first pages still come in while the later
// evictions go out.
// ResNet-50 at 1/8 of its bytes, 3x, on the H200's measured model: swap cost 3.01x
// T_unl with every page remapped alone, 1.79x with runs and batches of room (226
// unmaps and access grants per iteration for 532 maps); the H100-PCIe model's points
// unchanged (docs/results.md, "Swap: remapping runs of pages").
//
// Note [Batches that keep up]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~
// A batch of B pages each way costs the mover two runs' own parts and B pages' parts
// each way (a map, and the unmap's and the grant's parts per page), while the link
// copies B pages one way: 2 * 186 + 2 * 12.8 * B us against 38 * B on the H200's
// measured model, so the mover keeps up only from B = 30 on; the two runs' parts alone
// (Note [Remapping runs]) give 10. But each batch is also room the plan leaves out
// (policy::planning_capacity), and at ResNet-50 1/8, 3x, the room is 57 pages: 16 and
// 24 were slower than 10 there. So the batch is the larger of the two runs' rule and
// the keep-up rule capped at a sixth of the room (policy::run_batch_pages), at most 32
// pages (kMaxRunPages, which also bounds how far the mover extends a run). Full-size
// ResNet-50 at 3x (459 pages of room) went from 126.38 to 110.04 ms an iteration (the
// window bound 77.3); at 1/8 the points moved within 1% (ResNet-50 1.5x 37.59 ->
// 37.95, GPT-2 3x 256.24 -> 254.73; docs/results.md).
//
// Note [Batches before the plan]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// The link's rate that sizes the batches (Note [Remapping runs]) came with the first
// plan: until then every move was a page of its own, each remap paying its families'
// first calls (about 400 us of calls for a page out and a page in on the H200's
// measured model), and a launch that wanted a 20 MiB segment waited for ten such
// batches in turn. Those are the iterations before a schedule forms, and all of them
// where none does (PyTorch's first iterations on an H200 ran on demand, one page a
// batch: docs/gpu-results.md). The engine now takes the pinned copies' rates timed at
// start (Note [Pinned rates at start] in core/device_pool.cc) when it is made
// (set_copy_clock with no clock yet), and a clock handed over without rates (the
// learner's, at the first launch) keeps them, so its batches follow the calls' cost
// from its eighth timed run. The rates are timed when the engine is made, never at a
// launch: timed at the first launch, their copies ran inside the application's first
// kernel as oversub-replay timed it, and its calibration made every kernel 6.6%
// longer. ResNet-50 at 1/8 through the caching allocator, 3x, on the H200's measured
// model: the iterations before the schedule 322, 276 and 271 -> 192, 114 and 113 ms
// (T_unl 37.0), the schedule's as before (docs/results.md, "Swap: batches before the
// plan").
//
// Note [Spare device memory]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~
// An evicted page's device memory is kept, not released, and the next fetch or new
// page maps it instead of creating new memory. Spares count against the capacity
// (resident + spare <= capacity, trimmed when the capacity shrinks), so the device
// never holds more than before.
//
// Note [Evictions copy page by page]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// A page's device memory is free once its own
// copy out is done, and a fetch waiting for room waits for exactly that. One copy for
// a run of evicted pages frees them all at its end, so the fetches that take their
// room copy in only after the whole run has gone out: out, then in, where the plan
// (policy/simulate.h) has the second page going out while the first page's fetch
// comes in. So each eviction is its own copy with its own event, at one copy setup
// (5 us on the H100-PCIe model against 47 us for 2 MiB) per page. Fetches keep their
// runs: a fetched page's users wait for its copy, and the schedule's pages come in
// the order it asks for them (prefetch_pages), soonest use first, so a run holds back
// no page that is needed first. And a fetch into lent memory (below) waits only for
// the lenders of its own pages, each copy in behind its own lender's copy out.
// Weight-heavy simtrain at 10x on the H100-PCIe model, laid out by first use from its
// profile (Note [Long-lived layout from a profile] in policy/placement.h), lending,
// untuned: 6.413 ms per iteration against the plan's 3.726 with runs out and all
// lenders waited for at once, 5.736 with copies in waiting for their own lenders,
// 4.482 with page-by-page copies out as well, 3.807 with the pages asked for in the
// schedule's order too. Every simtrain point of ./scripts/bench-swap in
// docs/results/archive.md, "Evictions copy page by page".
//
// Note [Lending an evicting page's memory]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// A fetch that finds no room while
// evictions are under way does not wait on the host for one to finish. It takes the
// device memory of the evicting page whose copy out is oldest (the lender), maps it at
// its own address as well, and queues its copy in on the copy-to-device stream behind a
// wait on the lender's copy event: the GPU orders the copy in after the copy out, and
// the host goes on issuing work (in a host-bound job the host's time is the
// iteration's). The work that uses the fetched page waits on its copy in, as always.
// The lender's address keeps mapping that memory until the host finds the lender's copy
// complete (finish_completed_locked, also asked at each prepare() while any page is
// lent) and maps the lender's host handle there, as for any eviction; the bytes moved
// to the borrower when lending, so the capacity is never exceeded. Until then a
// lender's address must not be used: work that asks for it (prepare(), any range kind)
// makes the host wait for the lender's copy and finish its eviction first, so it reaches
// its host copy. Only an access that no prepare() announced could touch a lender in
// that window, and it would see the borrower's bytes: the window is one copy out long.
// (Without lending, such an access in the same window reads the right bytes, and a
// write is lost once the eviction finishes: an unannounced access to an evicting page
// is outside what the engine keeps correct either way.) A scheduled prefetch (no wait)
// borrows only from the schedule's own evictions, an on-demand fetch from any. Off
// unless set_lending(true): it is faster at some points and slower at others (the
// swap learner times it, Note [Lending as a variant] in core/tuning.cc).
//
// Note [Asking the driver once]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// A driver call is host time, and in a host-bound job
// the host's time is the iteration's (on simgpu every call, a cuEventQuery too, costs
// api_overhead_ns: 2 us on the H100-PCIe model, as much as a launch). So the engine
// asks only what it does not know yet: a copy known done is not asked about again, nor
// any copy queued before it on the same stream (a stream runs in order); a stream
// that waited for a copy once is not made to wait for it again, nor is the copy's own
// stream; work that uses a fetched page waits for its copy (cuStreamWaitEvent) without
// asking first whether it is done (a wait on a done event costs one call, as the
// question does); and finishing evictions asks about the oldest copy under way on
// each stream, and about no later one there while it is not done. Activation-heavy
// simtrain at 1.5x on the H100-PCIe model, untuned: 88 cuEventQuery calls per
// iteration -> 64, 0.629 -> 0.588 ms per iteration.
//
// Note [Not asking too early]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~
// A fetch that found no room waits for an eviction, and
// the schedule asks again before every launch whether its copy out is done: one
// cuEventQuery per launch until it is. A copy cannot be done before the host issued
// it plus its bytes at the link's rate, after the copies queued before it on its
// stream. With a host clock on the copies' timeline (CUPTI's, the clock of its
// activity records) and the measured rates (set_copy_clock, by the swap learner
// once it has measured the link), the engine keeps, per copy, that earliest end (at
// 9/10 of the bytes' time, for the rate's noise), and does not ask before it.
//
// Threads: one mutex. A launch on another thread between prepare() and the real launch
// call could have its page evicted in between; training loops launch from one thread
// per device. Holding the gate across the launch would close that window.
#ifndef OVERSUB_RESIDENCY_SWAP_ENGINE_H
#define OVERSUB_RESIDENCY_SWAP_ENGINE_H

#include <cuda.h>

#include <cstdint>
#include <condition_variable>
#include <deque>
#include <map>
#include <mutex>
#include <span>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "pool/memory_resource.h"
#include "pool/vmm_arena.h"
#include "residency/backend.h"
#include "residency/page_runs.h"

namespace oversub::residency {

struct swap_config {
  int device = 0;
  std::size_t page_bytes = std::size_t{2} << 20;  // the arena's granularity
  std::uint64_t capacity_bytes = 0;               // device bytes the pages may hold
  std::uint64_t host_budget_bytes = 0;            // host handles' bytes (OVERSUB_HOST_LIMIT)
  // Evict pages nothing may have written since their host copy without copying them
  // again. Only sound when every write-capable call reaches prepare(): the
  // interposer turns it on only when it sees every launch and copy (Note [What
  // counts as a write]).
  bool clean_evictions = true;
  // See Note [The mover] in residency/swap_mover.cc: remaps made by a thread of the
  // engine's own (the library's default, OVERSUB_MOVER; off here, for the engine's own
  // tests).
  bool mover_thread = false;
  // The device's mapping calls wait for its queued work (Note [Do VMM calls wait?] in
  // core/device_pool.cc): reported with the remap costs, for the learner's plan.
  bool calls_wait = false;
  // calls_wait is the start probe's answer, not a default for want of one (Note [The
  // probe's answer before the timings]).
  bool calls_wait_known = false;
};

struct swap_stats {
  std::uint64_t pages = 0;               // live pages
  std::uint64_t resident_bytes = 0;      // device memory held by pages (evicting included)
  std::uint64_t peak_resident_bytes = 0;
  std::uint64_t host_bytes = 0;          // host handles held
  std::uint64_t peak_host_bytes = 0;
  std::uint64_t evictions = 0;           // pages moved to the host
  std::uint64_t clean_evictions = 0;     // ... of which without a copy
  std::uint64_t dead_evictions = 0;      // ... of which dead (Note [Dead pages])
  std::uint64_t dead_fetches = 0;        // fetches without a copy: dead content
  std::uint64_t fetches = 0;             // pages brought back
  std::uint64_t bytes_to_host = 0;
  std::uint64_t bytes_to_device = 0;
  std::uint64_t waits = 0;               // host waits on an eviction to make room
  std::uint64_t failures = 0;            // pages that could not be made resident
  // See Note [Batched moves]: driver calls the moves cost.
  std::uint64_t copies = 0;              // cuMemcpyAsync calls (both directions)
  std::uint64_t mapping_calls = 0;       // cuMemCreate/Release/Map/Unmap/SetAccess
  std::uint64_t spare_reuses = 0;        // device memory reused instead of created
  std::uint64_t spare_bytes = 0;         // device memory held spare now
  // See Note [Lending an evicting page's memory]: fetches that took the device memory of
  // an eviction still under way instead of waiting for it on the host.
  std::uint64_t lends = 0;
  // See Note [Pages born on the host] in residency/swap_page_table.cc: new pages
  // that started on the host (no room).
  std::uint64_t born_on_host = 0;
  // See Note [The mover] in residency/swap_mover.cc: its batches and the pages they
  // finished, and the times the launching thread waited for one (wanting a page it was
  // finishing, or room).
  std::uint64_t mover_batches = 0;
  std::uint64_t mover_pages = 0;
  std::uint64_t mover_waits = 0;
  std::uint64_t mover_fetches = 0;  // fetches the mover made (counted in fetches too)
  // The evictions' copies its threads enqueued (counted in copies too): see Note
  // [Copies out on the mover] in residency/swap_copies_out.cc.
  std::uint64_t mover_copies_out = 0;
  // See Note [A launch's fetch takes the queue's neighbours] in residency/swap_mover.cc:
  // pages the launching thread took from the mover's queue into its own runs.
  std::uint64_t launch_run_pages = 0;
  // See Note [A launch hands its fetch to the mover] in residency/swap_mover.cc:
  // hand-offs the launching thread took back (the mover stopped, or could not make the
  // room).
  std::uint64_t mover_handbacks = 0;
  // See Note [Which part differs] in core/schedule_costs.cc: the remaps' mapping calls (unmaps,
  // maps, access grants) as timed on the copy clock, by the thread that made them, and
  // the runs and pages they remapped. 0 until the engine has the clock.
  std::uint64_t mover_remap_ns = 0;
  std::uint64_t launch_remap_ns = 0;
  std::uint64_t remap_runs = 0;
  std::uint64_t remap_pages = 0;
};

// The exit report's swap section (residency/swap_engine.cc).
void write_report(int device, std::uint64_t capacity_bytes, const swap_stats& e,
                  stats::section& out);

class swap_engine final : public backend_with_stats<swap_stats>, public pool::page_backing {
 public:
  // See Note [Remapping runs]: the longest run one batch remaps.
  static constexpr std::size_t kMaxRunPages = 32;

  explicit swap_engine(swap_config cfg);
  ~swap_engine() override;

  // ---- The arena's pages (pool::page_backing) ----
  // The arena maps a new page at va (page-aligned, inside a reservation): device
  // memory, making room first. False when no room can be made.
  bool create_page(std::uintptr_t va) override;
  // The page holds no live data any more (the arena's trim): release what backs it,
  // after the copies under way. The caller knows no queued work uses it.
  void destroy_page(std::uintptr_t va) override;
  // True when va is a page of this engine.
  bool owns_page(std::uintptr_t va) const;

  // ---- residency_backend ----
  pool::page_backing* pages() noexcept override { return this; }
  // The arena serves swap mode's blocks (pages()): the engine serves none itself.
  pool::allocation_result allocate(std::size_t, CUstream) override {
    return {nullptr, pool::pool_errc::out_of_memory};
  }
  bool deallocate(void*, CUstream) override { return false; }
  // See Note [Dead pages]: the pool handed out [addr, addr + bytes) / took back the block
  // at addr (the bytes occupy() recorded; an address it never saw is ignored).
  void occupy(std::uintptr_t addr, std::size_t bytes) override;
  void vacate(std::uintptr_t addr) override;
  void take_vacancies(std::vector<vacancy>& out) override;

  // Before work on stream that uses ranges: make every page they touch resident and
  // order the work after the fetches; the pages count as used by stream, and with
  // writes the write epoch advances (Note [What counts as a write]). Addresses
  // outside the engine's pages are ignored. When stream
  // is capturing nothing is moved (pages on the host are reached through their
  // mapping). Never throws.
  prepare_result prepare(std::span<const byte_range> ranges, CUstream stream,
                         bool writes = true, const victim_rank& rank = {}) override;
  // Schedule-driven moves (policy/): start evicting, or start fetching, the pages of
  // ranges, without making any stream wait. Pages in use by queued work are ordered
  // after it. Returns false on a driver error or when room could not be made.
  bool evict(std::span<const byte_range> ranges) override;
  // See Note [A launch that may touch anything]: work on stream whose pages are unknown.
  void touch_all(CUstream stream) override;
  bool prefetch(std::span<const byte_range> ranges);
  // Note [Prefetch without waiting]
  // ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
  // As prefetch(), but never waits on the host for
  // an eviction's copy: room comes only from evictions already finished or from new
  // ones begun now. Pages that cannot be fetched yet are appended to later (to try
  // again at a later launch). False on a driver error.
  // rank: which pages this prefetch may evict to make room, and in what order (0 for
  // those the schedule needs before the pages fetched); asked only of eviction
  // candidates, when room is short. Without it, the least recently used leave first.
  bool prefetch_now(std::span<const byte_range> ranges, std::vector<byte_range>& later,
                    const victim_rank& rank = {}) override;
  // See Note [Lending an evicting page's memory]: off until turned on (the swap learner
  // times it as a variant of its schedule); turning it off leaves the pages lent
  // already to finish as usual.
  void set_lending(bool on) override;
  // A host clock (ns) that times the engine's remaps (Note [Remapping runs]), and the
  // link's rates per direction (bytes/s), which size its batches. Rates measured on that
  // clock (rates_measured) also keep the engine from asking the driver about a copy
  // before it could have finished (Note [Not asking too early]); assumed ones do not.
  // A null clock times nothing and batches nothing; a rate of 0 keeps the rates timed
  // at start (Note [Batches before the plan]), and without those batches nothing.
  void set_copy_clock(std::uint64_t (*now_ns)() noexcept, double h2d_bytes_per_s,
                      double d2h_bytes_per_s, bool rates_measured) override;
  std::size_t batch_pages() override;
  remap_costs measured_remap_costs() override;
  remap_totals moved_totals() override;

  // The bytes the pages may hold: capacity_bytes(), the configured capacity less what
  // other libraries hold on the device (reserve_foreign, see Note [Memory that is not
  // ours] in residency/backend.h); pages above a capacity
  // that shrank are evicted by the next prepare(). The figures: stats() and
  // try_stats() (backend_with_stats).

 private:
  // finishing: the mover's, between evicting and on_host; fetching: the mover's,
  // between on_host and resident (Note [The mover] in residency/swap_mover.cc).
  enum class state : std::uint8_t { resident, evicting, finishing, on_host, fetching };
  struct page {
    state where = state::resident;
    bool host_current = false;     // the host handle held the bytes at clean_epoch
    std::uint64_t clean_epoch = 0; // write epoch when the host copy was made
    CUmemGenericAllocationHandle device = 0;
    CUmemGenericAllocationHandle host = 0;
    std::uintptr_t shadow = 0;  // where the host handle is mapped for copies
    int copy = -1;                // the last copy's event (copies_), while not known complete
    std::uint64_t last_use = 0;   // LRU tick
    std::uint64_t pinned = 0;     // == prepare epoch while pinned
    std::vector<CUstream> users;  // streams that used it since it became resident
    // See Note [Dead pages]: live blocks over the page; dead: set once a vacancy left it
    // without any (before that the engine knows nothing of it, so it counts as live);
    // fresh_epoch: the write epoch when its first block after a vacancy came.
    std::uint32_t occupants = 0;
    bool dead = false;  // a page is live until a vacancy says otherwise
    std::uint64_t fresh_epoch = 0;
    // See Note [Lending an evicting page's memory]: an evicting page whose device memory
    // (still mapped here, still `device`) was taken by the page at lent_to; the page
    // that took it names its lender until the lender's eviction is finished.
    std::uintptr_t lent_to = 0;
    std::uintptr_t lender = 0;
    bool planned = false;
    // The mover batch that put it on the host (Note [The mover] in residency/swap_mover.cc).
    std::uint64_t handoff = 0;
  };
  // See Note [Dead pages], at write epoch `epoch`.
  // The fresh-block half needs every write seen (Note [What counts as a write]).
  bool content_dead(const page& p, std::uint64_t epoch) const {
    return p.dead && (p.occupants == 0 || (cfg_.clean_evictions && p.fresh_epoch == epoch));
  }
  template <typename F>
  void for_pages_locked(std::uintptr_t addr, std::size_t bytes, F&& f);
  void log_vacancy_locked(vacancy v);

  // See Note [Batched moves]: a copy event shared by the pages of one request.
  struct copy_event {
    CUevent event = nullptr;
    std::uint32_t refs = 0;  // pages whose copy field names it
    bool done = false;       // known complete
    std::uint64_t seq = 0;   // the order events were taken (each copy stream is in order)
    CUstream stream = nullptr;  // the copy stream it was recorded on
    std::uint64_t not_before_ns = 0;  // Note [Not asking too early]
    // Its copy not enqueued yet: see Note [Copies out on the mover] in
    // residency/swap_copies_out.cc.
    bool pending = false;
    // See Note [Asking the driver once]: the streams already ordered after it.
    std::vector<CUstream> waiters;
  };

  bool ensure_ready_locked();
  page* find_locked(std::uintptr_t va);
  std::vector<std::uintptr_t> pages_of(std::span<const byte_range> ranges,
                                       bool optional = false) const;
  std::vector<std::uintptr_t> optional_pages_of(std::span<const byte_range> ranges) const;
  CUresult make_room_locked(std::uint64_t bytes, bool wait = true,
                            const victim_rank& rank = {});
  CUresult finish_completed_locked();
  std::vector<std::uintptr_t> victims_locked(std::size_t n,
                                             const victim_rank& rank = {});
  CUresult evict_begin_locked(std::span<const std::uintptr_t> vas);
  CUresult evict_finish_locked(std::span<const std::uintptr_t> vas);
  CUresult fetch_locked(std::vector<std::uintptr_t> vas, bool wait,
                        std::vector<std::uintptr_t>* deferred,
                        const victim_rank& rank = {});
  CUresult fetch_batch_locked(std::vector<std::uintptr_t> vas,
                              std::span<const std::uintptr_t> lenders = {});
  std::vector<std::uintptr_t> lenders_locked(std::size_t n, const victim_rank& rank = {},
                                             bool planned_only = false);
  CUresult finish_lender_locked(std::uintptr_t va);
  std::size_t copy_runs_locked(std::span<const std::uintptr_t> vas, std::span<page* const> ps,
                               std::span<const char> copy, CUstream s, std::span<int> ev,
                               CUresult& error);
  CUresult wait_eviction_locked(std::size_t nth);
  std::size_t batch_pages_locked() const;
  bool prefetch_pages(std::span<const byte_range> ranges, std::vector<byte_range>* later,
                      const victim_rank& rank);
  CUresult ensure_host_handle_locked(page& p);
  // See Note [Pages born on the host] in residency/swap_page_table.cc.
  bool create_on_host_locked(std::uintptr_t va);
  // The stream work that orders a copy after all work (with `job`: its events).
  struct out_job;
  CUresult order_after_locked(std::span<page* const> ps, CUstream copy_stream,
                              out_job* job = nullptr);
  CUevent stream_event_locked(CUstream s);
  // See Note [Copies out on the mover] in residency/swap_copies_out.cc.
  struct out_job {
    std::vector<CUevent> after_streams;  // recorded when it began (order_events_)
    std::vector<int> after_copies;       // copies it waits for, held until then
    int clean = -1;                      // the event of its pages that need no copy
    std::vector<std::uintptr_t> clean_pages;
    struct run {
      std::uintptr_t va, shadow;
      std::size_t bytes;
      int c;
    };
    std::vector<run> runs;
  };
  std::deque<out_job> out_jobs_;
  std::vector<CUevent> order_events_;  // free events for out_job::after_streams
  // Enqueues the jobs begun so far, or those up to the one with copy `through`; on an
  // error, the failed job's pages not enqueued stay resident and the error is returned.
  CUresult issue_out_jobs_locked(int through = -1);
  // Copy c enqueued (c < 0: nothing to do).
  CUresult issued_locked(int c) {
    return c >= 0 && copies_[c].pending ? issue_out_jobs_locked(c) : CUDA_SUCCESS;
  }
  CUresult enqueue_copy_locked(int c, CUstream s, std::uintptr_t va, std::uintptr_t shadow,
                               std::size_t bytes);
  // See Note [Moves after all work]: per (copy stream, stream), the work epoch of that
  // stream the copy stream was last ordered after.
  std::map<std::pair<CUstream, CUstream>, std::uint64_t> covered_;
  // See Note [A launch that may touch anything]: streams whose work may use any page,
  // until the next fetch has waited for them.
  std::vector<CUstream> touch_all_users_;
  // Driver calls, counted (swap_stats::mapping_calls).
  CUresult map_locked(std::uintptr_t va, CUmemGenericAllocationHandle h);  // map + access
  CUresult unmap_locked(std::uintptr_t va);
  CUresult set_access_locked(std::uintptr_t va, std::size_t pages);
  CUresult take_device_locked(CUmemGenericAllocationHandle& h);
  CUmemGenericAllocationHandle take_spare_locked(std::uint64_t& batch);
  void give_device_locked(CUmemGenericAllocationHandle h, std::uint64_t batch = 0);
  void trim_spares_locked();
  void back_to_host_locked(std::uintptr_t va, page& p);
  // Copy events.
  int new_copy_locked();
  CUresult record_copy_locked(CUstream s, int& c);
  void hold_copy_locked(page& p, int c);
  void release_copy_locked(page& p);
  void recycle_copy_locked(int c);
  CUresult order_after_copy_locked(int c, CUstream s);
  CUresult use_after_copy_locked(page& p, CUstream s);
  void copy_done_locked(int c);
  CUresult wait_copy_locked(page& p);
  int nth_copy_locked(std::vector<int> copies, std::size_t nth) const;

  // See Note [The mover] in residency/swap_mover.cc.
  void start_mover_locked();
  void mover_main();
  void stop_mover();
  friend void stop_movers_at_exit();
  // See Note [The mover] in residency/swap_mover.cc: a page the mover may fetch (on the
  // host, nothing but the engine used it there, not wanted by an application thread
  // right now, no lending either way).
  // with_users: a page work has reached in host memory may be taken too (the mover then
  // waits for that work first: Note [The mover fetches pages reached on the host] in
  // residency/swap_mover.cc).
  bool mover_may_fetch(const page& p, bool with_users = false) const {
    return p.where == state::on_host && (with_users || p.users.empty()) &&
           touch_all_users_.empty() &&
           p.lender == 0 && p.lent_to == 0 && (p.pinned != epoch_ || handoff_epoch_ == epoch_) &&
           p.host != 0;
  }
  bool claimable(const page& p) const {
    return p.where == state::evicting && p.lent_to == 0 && p.lender == 0 && p.copy >= 0 &&
           p.pinned != epoch_;
  }
  void observe_locked(std::uint64_t batch);
  void extend_with_queued_locked(std::vector<std::uintptr_t>& missing);
  CUresult hand_to_mover_locked(std::vector<std::uintptr_t>& vas, const victim_rank& rank);
  void await_page_locked(std::uintptr_t va);
  bool mover_on_ = false;
  // See Note [A launch hands its fetch to the mover] in residency/swap_mover.cc: the
  // mover waits with nothing it can do; pages pinned in this epoch are the mover's to
  // fetch.
  bool mover_idle_ = false;
  std::uint64_t handoff_epoch_ = 0;
  bool stop_ = false;
  int mover_pid_ = 0;
  std::thread mover_;
  std::condition_variable_any moved_;  // a batch committed, or evictions begun
  // The thread that enqueues out_jobs_ (swap_copies_out.cc).
  std::thread copier_;
  bool copier_on_ = false;
  std::condition_variable_any copies_begun_;
  void copier_main();
  std::size_t finishing_ = 0;          // pages in state finishing
  std::size_t room_wanted_ = 0;        // pages of room asked for and not taken yet
  std::size_t fetching_ = 0;           // pages in state fetching
  std::size_t room_waiters_ = 0;       // application threads waiting for room
  std::vector<std::uintptr_t> mover_fetch_;  // the schedule's latest fetches, in its order
  enum class move : std::uint8_t { idle, worked, failed };
  move mover_finish_locked(std::unique_lock<std::mutex>& lock);
  move mover_fetch_locked(std::unique_lock<std::mutex>& lock);
  struct fetch_plan;  // residency/swap_mover.cc
  bool plan_fetch_locked(fetch_plan& f, std::span<const CUmemGenericAllocationHandle> lendable);
  CUresult create_fetch_memory(fetch_plan& f, std::uint64_t& calls);
  CUresult copy_fetch_in(fetch_plan& f, const std::vector<char>& ok, CUresult error,
                         std::uint64_t& calls, std::uint64_t& copy_calls);
  void commit_fetch_locked(fetch_plan& f, CUresult error, CUresult handed,
                           std::uint64_t copy_calls, const std::vector<char>& keep);
  std::uint64_t batches_ = 0;          // batches committed
  std::uint64_t next_batch_ = 0;       // batches taken
  std::uint64_t observed_ = 0;         // hand-offs the application's threads asked about
  CUstream mover_stream_ = nullptr;
  std::vector<CUevent> handoff_;       // by batch number, modulo its size
  CUresult mover_error_ = CUDA_SUCCESS;
  std::vector<std::uint64_t> spare_batch_;  // per spare_: the batch that gave it (0: none)

  swap_config cfg_;
  bool ready_ = false;
  bool broken_ = false;
  CUstream to_host_ = nullptr;
  CUstream to_device_ = nullptr;
  std::uintptr_t shadow_base_ = 0;
  std::size_t shadow_bytes_ = 0;
  std::vector<std::uintptr_t> free_shadow_;  // shadow slots given back
  std::size_t shadow_next_ = 0;              // slots handed out so far
  std::unordered_map<std::uintptr_t, page> pages_;  // by address
  std::unordered_map<CUstream, CUevent> stream_events_;
  std::vector<copy_event> copies_;  // Note [Batched moves]
  std::vector<int> free_copies_;
  std::vector<CUmemGenericAllocationHandle> spare_;  // Note [Spare device memory]
  std::uint64_t copy_seq_ = 0;
  std::size_t lent_pages_ = 0;  // pages with lent_to set
  bool lending_ = false;        // set_lending
  // See Note [Not asking too early]: set_copy_clock's figures, and the earliest each copy
  // stream can be done with what was queued on it so far.
  std::uint64_t (*clock_)() noexcept = nullptr;
  // See Note [Remapping runs]: what the runs' own calls cost, as timed by clock_.
  run_cost_fit run_fit_;
  // Note [The probe's answer before the timings]
  // ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
  // Where the mapping calls wait for the device's queued work, the launching thread
  // enqueues an eviction's copies out itself (Note [Copies out on the mover] in
  // residency/swap_copies_out.cc) and a fetch's copies wait for the evictions' grants
  // (Note [A fetch's copies before the evictions' grants] in residency/page_runs.cc).
  // Whether they wait is the start probe's answer (Note [Do VMM calls wait?] in
  // core/device_pool.cc), and, where it had none, the remaps' timings
  // (run_cost_fit::calls_wait: all told more than 1.5 times their lower quartiles).
  // The timings also took the calls for waiting where the probe had found they do not:
  // a run that pays each call family's first call costs three to four times one whose
  // calls repeat the family before it (the H200's busy figures: cuMemSetAccess 124 us
  // against 34, Note [Calls grouped by family] in residency/page_runs.cc), and under
  // PyTorch's caching allocator the scheduled batches group many runs, so the timed
  // runs spread that far. ResNet-50 b32 at 1/8 replayed through a caching allocator
  // (`oversub-replay --allocator caching`), 3x, on the H200's measured model, calls
  // that do not wait: from the first scheduled iterations on, the launching thread
  // enqueued 556 copies out an iteration (1.5 ms of host time added, 4.1% of T_unl),
  // and the fetches' copies waited. So where the probe found that the calls do not
  // wait, the timings are not asked; where it found that they wait, or had no answer,
  // they decide as before. The same point: 48.90 -> 47.6 ms, the launching thread's
  // added time 0.3% of T_unl (docs/results.md, "PyTorch's caching allocator").
  bool timings_say_calls_wait_locked() const {
    const bool probed_no_wait = cfg_.calls_wait_known && !cfg_.calls_wait;
    return !probed_no_wait && run_fit_.n >= 8 && run_fit_.calls_wait();
  }
  // Adds remaps timed into `fit` to run_fit_ and to the stats of the thread that made
  // them (the mover, or the launching thread).
  void count_remaps_locked(const run_cost_fit& fit, bool by_mover);
  double h2d_rate_ = 0;
  double d2h_rate_ = 0;
  bool rates_measured_ = false;  // on clock_, so that they bound a copy's end
  std::uint64_t to_host_not_before_ = 0;
  std::uint64_t to_device_not_before_ = 0;
  std::uint64_t tick_ = 0;
  std::uint64_t write_epoch_ = 1;  // Note [What counts as a write]
  // See Note [Dead pages]: the epoch a fetch compares with (prepare() fetches for work
  // whose own write has already advanced write_epoch_).
  std::uint64_t fetch_epoch_ = 1;
  std::unordered_map<std::uintptr_t, std::size_t> occupied_;  // live blocks: addr -> bytes
  // Pages vacated and occupied again, until take_vacancies (at most kMaxVacancies).
  static constexpr std::size_t kMaxVacancies = std::size_t{1} << 16;
  std::vector<vacancy> vacancies_;
  std::uint64_t epoch_ = 1;  // pages start unpinned (pinned == 0)
};

}  // namespace oversub::residency

#endif  // OVERSUB_RESIDENCY_SWAP_ENGINE_H
