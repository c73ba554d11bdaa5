// What a CUDA graph's replay will touch, learned while the graph was captured.
//
// Note [A graph's footprint]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~
// A replay (cuGraphLaunch) is one call to oversub and a whole training step to the
// device. Its kernels' arguments were seen once, at capture: every launch, copy and
// memset on a capturing stream goes through the hooks like any other, and prepare()
// enqueues nothing for it (Note [No moves while a user captures] in
// residency/swap_engine.h) but says the stream was capturing. The ranges are then
// added to the footprint of the graph being built (cuStreamGetCaptureInfo names it),
// in the order first seen; cuGraphInstantiate* hands the footprint to the executable
// graph; a replay of it makes the footprint resident first, as one call's memory
// (Note [Larger than the capacity] in core/launch_residency.cc when it exceeds the
// capacity: what fits is fetched, the rest is reached on the host).
//
// The footprint is a prefetch and nothing more. A graph built node by node, a node
// changed after instantiation (cuGraphExecKernelNodeSetParams, cuGraphExecUpdate) or
// a pointer stored in device memory is not in it; ordering never depends on it: a
// replay still counts as work that may touch any page (Note [A launch that may touch
// anything] in residency/swap_engine.h), so no page moves under a replay, whatever
// its footprint says. A stale footprint (memory freed and reallocated since capture)
// costs moves, never correctness. Before, a replay of a graph larger than the
// capacity ran every access from host memory and fetched nothing.
//
// Note [Replays come round in turn]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// A model split into graphs (torch.compile) replays them in the same order every
// iteration: a cycle. Taking the least recently used page for room is the worst
// choice on a cycle longer than the capacity: it is the page needed soonest, so every
// page moves every iteration. simtrain --graphs --graph-layers 4 at 1.5x moved 354
// pages in six iterations that way and ran 27% slower than reaching them on the host.
// The graph replayed longest ago is the one replayed next, so a replay's fetches take
// first the pages of no known graph, then those of the graph replayed most recently,
// and keep the pages of the graph replayed longest ago to the last (Belady's choice,
// for a cycle).
//
// Note [Fetch or reach, by measurement]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// In swap mode a fetch before a replay cannot overlap the replay before it: that one
// may touch any page (the first Note), so the remap waits on the host until it has
// finished, and the device idles while the host remaps and the copies run. Reaching
// the pages on the host instead costs the kernels link bandwidth but keeps the device
// busy. Which is faster depends on how often the kernels re-read their operands, on
// the device's link and driver, and on how the graphs' footprints overlap; on simgpu's
// H100 model, simtrain --graphs --graph-layers N over six iterations ranged from 15%
// faster fetching (N = 8 at 3x) to 21% slower (N = 2 at 10x). So it is measured:
// the first graph with a footprint replayed is the cycle's head, and an event
// recorded on its stream at each of its replays times the whole cycle on the device.
// Cycles 1-2 fetch, 3-4 reach, 5-6 fetch, 7-8 reach (the first of each pair, which
// still moves pages left by the other way, is not counted); from cycle 9 on, the way
// whose counted cycles were faster is kept, and OVERSUB_VERBOSE says which. Cycle 0
// (the first replays, which find nothing resident) fetches. Until the figures are
// in, and if they never are (the events cannot be created or read), replays fetch.
// um mode prefetches through the same choice.
#ifndef OVERSUB_CORE_GRAPH_FOOTPRINT_H
#define OVERSUB_CORE_GRAPH_FOOTPRINT_H

#include <cuda.h>

#include <memory>
#include <span>
#include <vector>

#include "residency/backend.h"

namespace oversub::core {

// ranges, of work just recorded on stream while it captures a graph: added to that
// graph's footprint (reach-only ranges are not: Note [Windows into large
// allocations] in residency/swap_engine.h). Never throws; a footprint that cannot grow
// is dropped (replays then fetch nothing, as before).
void graph_capture_ranges(CUstream stream, std::span<const residency::byte_range> ranges) noexcept;

// exec was instantiated from graph: it replays graph's footprint (none when graph was
// not captured under oversub).
void graph_instantiated(CUgraphExec exec, CUgraph graph) noexcept;
void graph_destroyed(CUgraph graph) noexcept;
void graph_exec_destroyed(CUgraphExec exec) noexcept;

// The footprint a replay of exec makes resident, required ranges in the order
// captured (never empty); null when unknown. Shared, not copied, per replay.
using graph_ranges = std::shared_ptr<const std::vector<residency::byte_range>>;
graph_ranges graph_footprint(CUgraphExec exec);

// A replay of exec (which has a footprint) is about to be enqueued on stream: whether
// it fetches its footprint first (Note [Fetch or reach, by measurement]).
bool graph_fetch_now(CUgraphExec exec, CUstream stream) noexcept;

// A replay of exec begins: which pages its fetches' evictions take first (Note
// [Replays come round in turn]). Allocates (may throw std::bad_alloc).
residency::victim_rank graph_replay_rank(CUgraphExec exec, std::uintptr_t page_bytes);

}  // namespace oversub::core

#endif  // OVERSUB_CORE_GRAPH_FOOTPRINT_H
