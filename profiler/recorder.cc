// The run's record and the profile of one iteration (see recorder.h).
#include "profiler/recorder.h"

#include <algorithm>
#include <unordered_map>

#include "profiler/period.h"

namespace oversub::profiler {

std::uint32_t recorder::add_function(const std::string& name) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = function_ids_.find(name);
  if (it != function_ids_.end()) return it->second;
  const auto id = static_cast<std::uint32_t>(functions_.size());
  functions_.push_back(name);
  is_marker_.push_back(!marker_.empty() && name.find(marker_) != std::string::npos);
  function_ids_.emplace(name, id);
  return id;
}

const std::string& recorder::function_name(std::uint32_t id) const {
  std::lock_guard<std::mutex> lock(mutex_);
  return functions_.at(id);
}

void recorder::on_alloc(std::uint64_t base, std::uint64_t bytes, const std::uintptr_t* frames,
                        std::size_t frame_count) {
  std::lock_guard<std::mutex> lock(mutex_);
  std::uint32_t site = no_index;
  if (frame_count != 0) {
    std::vector<std::uintptr_t> key(frames, frames + frame_count);
    auto [it, fresh] = site_ids_.emplace(std::move(key), static_cast<std::uint32_t>(sites_.size()));
    if (fresh) sites_.push_back(it->first);
    site = it->second;
  }
  mem_.push_back(mem_event{ev::alloc, copy_kind::other, site, 0, base, bytes, launch_count_});
}

void recorder::on_free(std::uint64_t base) {
  std::lock_guard<std::mutex> lock(mutex_);
  mem_.push_back(mem_event{ev::free, copy_kind::other, no_index, 0, base, 0, launch_count_});
}

void recorder::on_launch(std::uint32_t function, const std::uint64_t* bases, std::size_t count,
                         std::uint32_t correlation_id, bool unreadable) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (function < is_marker_.size() && is_marker_[function]) marker_marks_.push_back(launch_count_);
  ++launch_count_;
  if (launches_.size() >= max_launches_kept) return;
  launches_.push_back(launch_event{function, correlation_id,
                                   static_cast<std::uint32_t>(bases_.size()),
                                   static_cast<std::uint32_t>(count), unreadable ? 1u : 0u});
  bases_.insert(bases_.end(), bases, bases + count);
}

void recorder::on_iteration_begin() {
  std::lock_guard<std::mutex> lock(mutex_);
  api_marks_.push_back(launch_count_);
}

void recorder::on_copy(copy_kind kind, std::uint64_t bytes, std::uint64_t device_base,
                       std::uint32_t correlation_id) {
  std::lock_guard<std::mutex> lock(mutex_);
  mem_.push_back(
      mem_event{ev::copy, kind, no_index, correlation_id, device_base, bytes, launch_count_});
}

void recorder::on_kernel_time(std::uint32_t correlation_id, std::uint64_t ns) {
  std::lock_guard<std::mutex> lock(mutex_);
  kernel_ns_[correlation_id] += ns;
}

void recorder::on_copy_time(std::uint32_t correlation_id, copy_kind kind, std::uint64_t bytes,
                            std::uint64_t ns) {
  std::lock_guard<std::mutex> lock(mutex_);
  copy_ns_[correlation_id] += ns;
  // See Note [A link rate from large copies only] in profiler/recorder.h.
  if ((kind == copy_kind::h2d || kind == copy_kind::d2h) && ns > 0 &&
      bytes >= link_sample_min_bytes) {
    const int i = kind == copy_kind::h2d ? 0 : 1;
    link_bytes_[i] += bytes;
    link_ns_[i] += ns;
  }
}

std::uint64_t recorder::launches() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return launch_count_;
}

std::uint32_t recorder::iterations(iteration_source* how, std::size_t* period) {
  std::lock_guard<std::mutex> lock(mutex_);
  const std::vector<std::uint64_t>* marks = !api_marks_.empty() ? &api_marks_
                                            : !marker_marks_.empty() ? &marker_marks_
                                                                     : nullptr;
  if (marks != nullptr) {
    if (how) *how = marks == &api_marks_ ? iteration_source::api : iteration_source::marker;
    if (period) *period = marks->size() >= 2 ? (*marks)[marks->size() - 1] - (*marks)[marks->size() - 2] : 0;
    return marks->size() < 2 ? 0 : static_cast<std::uint32_t>(marks->size() - 1);
  }
  const std::uint64_t n = launches_.size();
  if (n >= 16 && n >= searched_at_ + std::max<std::uint64_t>(8, searched_at_ / 8)) {
    std::vector<std::uint32_t> tokens(n);
    for (std::size_t i = 0; i < n; ++i) tokens[i] = launches_[i].function;
    const std::optional<periodic_stretch> s = find_period(tokens);
    searched_at_ = n;
    std::uint32_t reps = 0;
    if (s && steady_locked(*s)) reps = static_cast<std::uint32_t>(s->repetitions());
    const std::size_t p = reps != 0 ? s->period : 0;
    if (p != auto_period_) {
      auto_period_ = p;
      auto_since_ = n;
    }
    if (p < auto_longest_) auto_since_ = n;  // a shorter answer than before: not yet
    auto_longest_ = std::max(auto_longest_, p);
    auto_iterations_ = reps;
  }
  if (how) *how = iteration_source::automatic;
  if (period) *period = auto_period_;
  // Note [Trusting a period early]
  // ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
  // Before the run ends, a stretch of repeated
  // layers can look like an iteration. A period is counted only once it has stayed
  // the answer for two periods of launches and for the later half of the run, no
  // longer period was the answer before it, and the live bytes at its boundaries
  // are the same at the last two (a training step gives back what it took; a forward
  // block does not). The last repetition may be cut short by the phase: not counted.
  if (auto_period_ == 0 || n < auto_since_ + 2 * auto_period_ || n < 2 * auto_since_ ||
      auto_iterations_ < 2) {
    return 0;
  }
  return auto_iterations_ - 1;
}

bool recorder::steady_locked(const periodic_stretch& s) const {
  const std::vector<std::uint64_t> live = live_bytes_before_launches_locked(s.end);
  const std::size_t phase = choose_phase(s, live);
  // The last two boundaries: a caching allocator grows in the first iteration.
  std::size_t last = phase;
  while (last + s.period < s.end) last += s.period;
  return last >= phase + s.period && live[last] == live[last - s.period];
}

std::vector<std::uint64_t> recorder::live_bytes_before_launches_locked(std::size_t n) const {
  // live[i]: after the events that precede launch i, except those attributed to
  // launch i itself (launch_pos == i): the bytes live at the moment launch i - 1
  // has been issued, so a step that begins by allocating starts at a minimum.
  std::vector<std::uint64_t> live(n + 1, 0);
  std::unordered_map<std::uint64_t, std::uint64_t> bytes_of;
  std::uint64_t now = 0;
  std::size_t e = 0;
  for (std::size_t i = 0; i <= n; ++i) {
    for (; e < mem_.size() && mem_[e].launch_pos < i; ++e) {
      const mem_event& m = mem_[e];
      if (m.type == ev::alloc) {
        bytes_of[m.base] = m.bytes;
        now += m.bytes;
      } else if (m.type == ev::free) {
        auto it = bytes_of.find(m.base);
        if (it != bytes_of.end()) {
          now -= it->second;
          bytes_of.erase(it);
        }
      }
    }
    live[i] = now;
  }
  return live;
}

std::optional<recorder::window> recorder::find_iteration_locked(std::string* why) const {
  const std::uint64_t kept = launches_.size();
  const std::vector<std::uint64_t>& marks = !api_marks_.empty() ? api_marks_ : marker_marks_;
  if (!marks.empty()) {
    const iteration_source how =
        !api_marks_.empty() ? iteration_source::api : iteration_source::marker;
    std::vector<std::uint64_t> usable;
    for (std::uint64_t m : marks) {
      if (m <= kept && (usable.empty() || m > usable.back())) usable.push_back(m);
    }
    if (usable.size() < 2) {
      *why = "fewer than two iteration marks (" + std::string(to_string(how)) + ")";
      return std::nullopt;
    }
    window w{usable[usable.size() - 2], usable.back(), how,
             static_cast<std::uint32_t>(usable.size() - 1), usable[usable.size() - 2]};
    for (std::size_t k = usable.size() - 2; k > 0 && usable[k] - usable[k - 1] == w.end - w.begin;
         --k) {
      w.first = usable[k - 1];
    }
    return w;
  }
  std::vector<std::uint32_t> tokens(kept);
  for (std::size_t i = 0; i < kept; ++i) tokens[i] = launches_[i].function;
  const std::optional<periodic_stretch> s = find_period(tokens);
  if (!s) {
    *why = "no repeating sequence of launches (" + std::to_string(kept) + " launches seen)";
    return std::nullopt;
  }
  const std::vector<std::uint64_t> live = live_bytes_before_launches_locked(kept);
  const std::size_t phase = choose_phase(*s, live);
  // The last complete repetition, or the one before it when there is one: the
  // run's teardown (frees at exit) follows the last one and is not the step's.
  std::size_t begin = phase;
  while (begin + 3 * s->period <= s->end) begin += s->period;
  if (begin + s->period > s->end) {
    *why = "the repeating stretch holds no complete iteration";
    return std::nullopt;
  }
  return window{begin, begin + s->period, iteration_source::automatic,
                static_cast<std::uint32_t>((s->end - phase) / s->period), s->begin};
}

// Note [A kernel's own duration]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// CUPTI times a kernel from its start to its end, and under oversub that can include
// more than its work: in um mode the page faults of what was not prefetched, in swap
// mode the pages it read over the link. A profile recorded under um (OVERSUB_MODE=auto's
// first run, with no profile yet) took them for the kernels' own time, and every
// prediction made from it inherited them: ResNet-152 b32 at 1/8 of its bytes, 1.5x, on
// the H200's measured model with the VMM waits, the profile's iteration was 114.7 ms of
// kernels where the unlimited run takes 101.1, and auto predicted um at that, no slower
// than with enough memory, and took it (127.2 ms; swap ran 115.3). Such costs only
// lengthen a kernel, so a launch's duration in the profile is the shortest CUPTI gave
// at its place in the iterations recorded (the same kernel at the same offset from the
// iteration's start, in the iterations before it that repeat it launch for launch: the
// periodic stretch, or the marked iterations of its length in a row): the iterations
// before a schedule was learned prefetch each launch's buffers before it and fault on
// nothing.
std::uint64_t recorder::own_kernel_ns_locked(std::uint64_t i, const window& w) const {
  const std::uint64_t period = w.end - w.begin;
  std::uint64_t best = 0;
  for (std::uint64_t j = i;; j -= period) {
    const launch_event& l = launches_[j];
    if (l.function != launches_[i].function) break;
    auto ns = kernel_ns_.find(l.correlation_id);
    if (l.correlation_id != 0 && ns != kernel_ns_.end() && ns->second != 0)
      best = best == 0 ? ns->second : std::min(best, ns->second);
    if (period == 0 || j < w.first + period) break;
  }
  return best;
}

std::optional<profile> recorder::build(const device_figures& device, bool cupti,
                                       const std::string& program, const frame_resolver& resolve,
                                       std::string* why) const {
  std::lock_guard<std::mutex> lock(mutex_);
  std::string reason;
  const std::optional<window> w = find_iteration_locked(&reason);
  if (!w) {
    if (why) *why = reason;
    return std::nullopt;
  }
  profile p;
  p.source = w->how;
  p.iterations_seen = w->iterations;
  p.total_launches = launch_count_;
  p.first_launch = w->begin;
  p.cupti = cupti;
  p.marker = w->how == iteration_source::marker ? marker_ : std::string();
  p.program = program;
  p.device = device;
  for (int i = 0; i < 2; ++i) {
    const std::uint64_t rate = link_ns_[i] == 0 ? 0 : link_bytes_[i] * 1'000'000'000 / link_ns_[i];
    (i == 0 ? p.device.h2d_bytes_per_s : p.device.d2h_bytes_per_s) = rate;
  }

  // Replay the run up to the iteration's end: which allocation instance each
  // address names at each moment (addresses can be reused after a free).
  struct instance {
    std::uint64_t base = 0, bytes = 0, alloc_pos = 0, free_pos = ~std::uint64_t{0};
    std::uint32_t site = no_index;
    std::uint32_t record = no_index;
  };
  std::vector<instance> inst;
  std::unordered_map<std::uint64_t, std::uint32_t> live;  // base -> instance
  std::vector<std::uint32_t> used;                        // instances the iteration touches
  auto touch = [&](std::uint32_t k) {
    if (inst[k].record == no_index) {
      inst[k].record = 0;  // marked; numbered below
      used.push_back(k);
    }
  };
  struct pending_copy {
    copy_record rec;
    std::uint32_t inst = no_index;
    std::uint32_t correlation_id = 0;
  };
  std::vector<pending_copy> copies;
  std::vector<std::vector<std::uint32_t>> launch_inst(w->end - w->begin);
  std::size_t e = 0;
  auto apply_until = [&](std::uint64_t pos) {  // events with launch_pos <= pos
    for (; e < mem_.size() && mem_[e].launch_pos <= pos; ++e) {
      const mem_event& m = mem_[e];
      if (m.type == ev::alloc) {
        live[m.base] = static_cast<std::uint32_t>(inst.size());
        inst.push_back(instance{m.base, m.bytes, m.launch_pos, ~std::uint64_t{0}, m.site});
        if (m.launch_pos >= w->begin && m.launch_pos < w->end) touch(live[m.base]);
      } else if (m.type == ev::free) {
        auto it = live.find(m.base);
        if (it != live.end()) {
          inst[it->second].free_pos = m.launch_pos;
          live.erase(it);
        }
      } else if (m.launch_pos >= w->begin && m.launch_pos < w->end) {
        pending_copy c;
        c.rec.before_launch = static_cast<std::uint32_t>(m.launch_pos - w->begin);
        c.rec.kind = m.kind;
        c.rec.bytes = m.bytes;
        auto ns = copy_ns_.find(m.correlation_id);
        c.rec.duration_ns = m.correlation_id != 0 && ns != copy_ns_.end() ? ns->second : 0;
        auto it = live.find(m.base);
        if (m.base != 0 && it != live.end()) {
          c.inst = it->second;
          touch(c.inst);
        }
        copies.push_back(c);
      }
    }
  };
  for (std::uint64_t i = 0; i < w->end; ++i) {
    apply_until(i);
    if (i < w->begin) continue;
    const launch_event& l = launches_[i];
    // See Note [A launch whose buffers are not known] in profiler/profile_format.h:
    // every allocation live at it may be used, so each is kept in the profile (its
    // buffer set stays empty: unknown).
    if (l.unreadable != 0) {
      for (const auto& [base, k] : live) touch(k);
    }
    for (std::uint32_t b = 0; b < l.base_count; ++b) {
      auto it = live.find(bases_[l.first_base + b]);
      if (it == live.end()) continue;
      touch(it->second);
      launch_inst[i - w->begin].push_back(it->second);
    }
  }
  // Frees and allocations after the last launch but at the iteration's end.
  for (; e < mem_.size() && mem_[e].launch_pos <= w->end; ++e) {
    const mem_event& m = mem_[e];
    if (m.type != ev::free) continue;
    auto it = live.find(m.base);
    if (it != live.end()) {
      inst[it->second].free_pos = m.launch_pos;
      live.erase(it);
    }
  }
  // Later frees of the iteration's buffers only matter as "not freed in it".

  // Per-iteration buffers by ordinal first, then long-lived ones by address.
  std::vector<std::uint32_t> fresh, old;
  for (std::uint32_t k : used) (inst[k].alloc_pos >= w->begin ? fresh : old).push_back(k);
  std::sort(fresh.begin(), fresh.end());
  std::sort(old.begin(), old.end(),
            [&](std::uint32_t a, std::uint32_t b) { return inst[a].base < inst[b].base; });
  std::unordered_map<std::uint32_t, std::uint32_t> site_record;
  auto site_of = [&](std::uint32_t site) -> std::uint32_t {
    if (site == no_index || !resolve) return no_index;
    auto it = site_record.find(site);
    if (it != site_record.end()) return it->second;
    call_site c;
    for (std::uintptr_t pc : sites_[site]) {
      const frame_info f = resolve(pc);
      if (f.skip) continue;
      c.frames.push_back(frame{p.intern(f.module), f.offset,
                               f.symbol.empty() ? no_index : p.intern(f.symbol)});
    }
    p.call_sites.push_back(std::move(c));
    const auto id = static_cast<std::uint32_t>(p.call_sites.size() - 1);
    site_record.emplace(site, id);
    return id;
  };
  std::uint32_t ordinal = 0;
  for (const auto* group : {&fresh, &old}) {
    for (std::uint32_t k : *group) {
      instance& in = inst[k];
      allocation_record a;
      a.long_lived = in.alloc_pos < w->begin;
      a.ordinal = a.long_lived ? no_index : ordinal++;
      a.bytes = in.bytes;
      a.address = in.base;
      a.alloc_at = a.long_lived ? 0 : static_cast<std::uint32_t>(in.alloc_pos - w->begin);
      a.free_at = in.free_pos <= w->end && in.free_pos >= w->begin
                      ? static_cast<std::uint32_t>(in.free_pos - w->begin)
                      : no_index;
      a.call_site = site_of(in.site);
      in.record = static_cast<std::uint32_t>(p.allocations.size());
      p.allocations.push_back(a);
    }
  }
  for (std::uint64_t i = w->begin; i < w->end; ++i) {
    const launch_event& l = launches_[i];
    launch_record r;
    r.name = p.intern(functions_[l.function]);
    r.correlation_id = l.correlation_id;
    r.flags = l.unreadable != 0 ? launch_unreadable : 0;
    r.duration_ns = own_kernel_ns_locked(i, *w);
    p.device.iteration_kernel_ns += r.duration_ns;
    for (std::uint32_t k : launch_inst[i - w->begin]) r.buffers.push_back(inst[k].record);
    std::sort(r.buffers.begin(), r.buffers.end());
    r.buffers.erase(std::unique(r.buffers.begin(), r.buffers.end()), r.buffers.end());
    p.launches.push_back(std::move(r));
  }
  for (pending_copy& c : copies) {
    c.rec.buffer = c.inst == no_index ? no_index : inst[c.inst].record;
    p.copies.push_back(c.rec);
  }
  return p;
}

}  // namespace oversub::profiler
