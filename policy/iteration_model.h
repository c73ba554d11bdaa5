// iteration_model: the policy's input. One learned training iteration as the
// sequence of its launches (kernels, in stream order) and the buffers they use.
//
// Plain C++ with no dependency: the profiler converts its profile into this struct,
// tests and benchmarks build it from synthetic programs, and the schedule, its
// checker and the simulator read it. Buffers are named by their index in
// `buffers`; launches by their index in `launches` (the "launch index").
//
// Glossary
// - long-lived buffer: exists across iterations (weights, optimizer state, a
//   persistent gradient). Its content must survive from one iteration to the next.
// - per-iteration buffer: allocated within the iteration and freed within it
//   (activations, gradients of activations, workspaces). Its content is undefined
//   until its first use and dead after its last use.
// - use: a launch reads or writes (touches) the buffer; it must be resident on the
//   device while the launch runs.
#ifndef OVERSUB_POLICY_ITERATION_MODEL_H
#define OVERSUB_POLICY_ITERATION_MODEL_H

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

namespace oversub::policy {

using buffer_id = std::uint32_t;

// One buffer of the iteration.
struct model_buffer {
  std::size_t bytes = 0;
  // True: lives across iterations; alloc_launch/free_launch are ignored.
  bool long_lived = false;
  // Per-iteration buffers: allocated before launch alloc_launch runs and freed after
  // launch free_launch completes (alloc_launch <= free_launch). Every use lies in
  // [alloc_launch, free_launch]. Note [Memory of a per-iteration buffer].
  std::uint32_t alloc_launch = 0;
  std::uint32_t free_launch = 0;
  // Where it lies, where known (0: unknown). Buffers that touch (one's address plus
  // its bytes is the other's) and move together are remapped as one run (Note [Virtual
  // time model] in policy/simulate.h); the page model's pages carry their addresses.
  std::uintptr_t address = 0;
};

// The moves before launches from..until (its fetch_before and the evictions after the
// launch before it) find buffer's content dead: the pool holds no live block on it, or
// only blocks handed out since then that no work has used yet. from > until: the
// window wraps past the iteration's last launch. Fetches only before until: the one
// before until comes after the block that ends the window, and the swap engine copies
// it if any work that may write (a memset of the new block, say) came between.
struct dead_window {
  buffer_id buffer = 0;
  std::uint32_t from = 0, until = 0;
};

// One launch (kernel) of the iteration, in stream order.
struct model_launch {
  // How long it runs on a device with enough memory (ns), from the profile.
  std::uint64_t duration_ns = 0;
  // The buffers it reads or writes (each must be resident while it runs).
  std::vector<buffer_id> uses;
  // The buffers it writes, a subset of uses; meaningful only when writes_known
  // (otherwise every used buffer counts as written, which is always safe).
  std::vector<buffer_id> writes;
  bool writes_known = false;
  // Bytes it reaches in host memory over the link (0 but for a launch over the room,
  // see Note [Launches over the room] below), paid by the simulator at
  // cost_model::host_access_bytes_per_s on top of duration_ns.
  std::size_t host_bytes = 0;
};

// One learned iteration.
struct iteration_model {
  std::vector<model_buffer> buffers;
  std::vector<model_launch> launches;
  // First launch of the backward half (for vdnn_all, which offloads activations
  // after the forward half). Absent: the launch at which the per-iteration live
  // bytes peak (the end of the forward pass in a training step). Note [Halves].
  std::optional<std::uint32_t> backward_begin;
  // See Note [Dead gaps] in core/dead_gaps.cc: where a long-lived buffer's content is
  // dead, the moves that copy nothing (none known: empty).
  std::vector<dead_window> dead_windows;
};

// True when window w holds the moves before launch q (0 <= q <= the launches; the
// end's moves are the next iteration's first): evictions, or a fetch.
bool dead_window_holds(const dead_window& w, std::size_t q, std::size_t launches,
                       bool fetch = false);

// See Note [Dead gaps] in core/dead_gaps.cc: appends to out buffer b's dead windows from
// what happened to its blocks over an iteration of `launches` launches, in order:
// (position, vacated), position the launch the event came before (launches: after the
// last, before the next iteration's first), vacated false where a block came to it
// again. uses: its uses' positions, ascending, not empty. Each vacancy begins a window
// that ends at the first of its next block and its next use.
void add_dead_windows(buffer_id b, std::span<const std::pair<std::uint64_t, bool>> events,
                      std::span<const std::uint32_t> uses, std::size_t launches,
                      std::vector<dead_window>& out);

// Note [Memory of a per-iteration buffer]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// A per-iteration buffer takes device memory from its first use (when it gets
// content) to its last use (after which its content is dead). The framework may
// hold the address longer ([alloc_launch, free_launch]), but the swap backend maps
// memory behind it only while the content matters. peak_live_bytes (below) counts
// the framework's view, [alloc_launch, free_launch], which is what a device with
// enough memory needs.
//
// Note [Halves]
// ~~~~~~~~~~~~~
// vDNN's rule is stated in layers: offload a layer's input after its forward, fetch
// it back for its backward. In a launch sequence the forward/backward boundary is
// where live activations peak; a profiler that knows better (the loss kernel) sets
// backward_begin. An "activation" is then a per-iteration buffer used both before
// and at-or-after the boundary.

// Empty when the model is well formed; otherwise what is wrong (a buffer id out of
// range, a use outside a per-iteration buffer's [alloc_launch, free_launch], a
// write that is not a use, alloc_launch > free_launch or past the last launch).
std::string validate_model(const iteration_model& model);

// True when the launch writes the buffer (every use counts when writes are unknown).
bool launch_writes(const model_launch& launch, buffer_id buffer);

// The launch index at which the backward half begins (backward_begin or the peak
// of per-iteration live bytes).
std::uint32_t backward_begin_of(const iteration_model& model);

// The most bytes live at any launch with enough memory: every long-lived buffer
// plus the per-iteration buffers whose [alloc_launch, free_launch] contains it.
std::size_t peak_live_bytes(const iteration_model& model);

// The largest sum of bytes of one launch's distinct buffers, and that launch.
struct largest_launch {
  std::uint32_t launch = 0;
  std::size_t bytes = 0;
  std::size_t buffer_count = 0;
};
largest_launch largest_launch_footprint(const iteration_model& model);

// Note [Launches over the room]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// A launch whose buffers are more than swap holds runs with part of its memory reached
// where it is, in host memory over the link (Note [Larger than the capacity] in
// core/launch_residency.cc), while a plan needs every launch's buffers resident at
// once: one such launch left the whole iteration without a plan (plan_schedule's
// "alone needs" error), on demand in the library and "no schedule" in the simulator
// and in auto's prediction. ResNet-50 b128 at 1/8 with a cudaMallocAsync per tensor,
// at a tenth of what PyTorch's caching allocator holds: one kernel spans 79 pages where
// swap holds 78, and every iteration ran on demand, 266 ms against 106.7 unlimited.
// So a plan for swap gives such a launch no more of its buffers than the room holds,
// those the iteration uses most (the room then has no headroom at that launch, as for
// any launch that fills it: Note [Headroom] in policy/schedule.h); it may evict the
// others before the launch, which reaches them on the host as on demand. Their bytes
// become the launch's host_bytes. A launch that fits is planned as before. Dead windows
// are taken from every use before the trimming: the trimmed launch still reads those
// buffers where they are. um's driver has no such room, and its plans are not trimmed.

// What trim_launches_over_room took away.
struct trimmed_launches {
  std::size_t launches = 0;    // launches over the room
  std::size_t uses = 0;        // uses taken from them
  std::size_t host_bytes = 0;  // their bytes, over all of them
};

// Trims each launch whose distinct buffers exceed room_bytes to the buffers the
// iteration uses most that fit in it (ties: the lower id), and adds the rest to its
// host_bytes (its writes of them go too). Nothing when room_bytes is 0. See Note
// [Launches over the room].
trimmed_launches trim_launches_over_room(iteration_model& model, std::size_t room_bytes);

// model itself where every launch fits in room_bytes; otherwise scratch, made a copy of
// it and trimmed (trim_launches_over_room), what was taken in *taken.
const iteration_model& fitted_to_room(const iteration_model& model, std::size_t room_bytes,
                                      iteration_model& scratch,
                                      trimmed_launches* taken = nullptr);

}  // namespace oversub::policy

#endif  // OVERSUB_POLICY_ITERATION_MODEL_H
