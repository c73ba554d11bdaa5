// The swap engine's page table: the pages the arena creates and destroys (a page born
// on the host when there is no room), the pages a request's ranges cover (required,
// and the optional windows' pages in the order they are taken), and the live blocks
// on each page that tell a dead one
// (Note [Dead pages] in residency/swap_engine.h).
#include "residency/swap_engine.h"

#include <algorithm>

#include "pool/driver_api.h"

namespace oversub::residency {

swap_engine::page* swap_engine::find_locked(std::uintptr_t va) {
  auto it = pages_.find(va);
  return it == pages_.end() ? nullptr : &it->second;
}

bool swap_engine::owns_page(std::uintptr_t va) const {
  std::lock_guard<std::mutex> lock(mutex_);
  return pages_.count(va) != 0;
}


bool swap_engine::create_page(std::uintptr_t va) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (!ensure_ready_locked()) return false;
  if (make_room_locked(cfg_.page_bytes) != CUDA_SUCCESS) return create_on_host_locked(va);
  page p;
  if (take_device_locked(p.device) != CUDA_SUCCESS) return false;
  if (map_locked(va, p.device) != CUDA_SUCCESS) {
    give_device_locked(p.device);
    return false;
  }
  p.last_use = ++tick_;
  pages_.emplace(va, std::move(p));
  ++stats_.pages;
  stats_.resident_bytes += cfg_.page_bytes;
  stats_.peak_resident_bytes = std::max(stats_.peak_resident_bytes, stats_.resident_bytes);
  return true;
}

// Note [Pages born on the host]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// When no room can be made for a new page (no page may
// move while a stream that used them captures a graph, Note [No moves while a user
// captures] in residency/swap_engine.h; or every page is pinned), the page starts on the
// host: its host handle is mapped at its address, as for an evicted page, and the first
// prepare() that needs it fetches it. Its bytes are undefined until written, as for any
// new allocation.
bool swap_engine::create_on_host_locked(std::uintptr_t va) {
  page p;
  if (ensure_host_handle_locked(p) != CUDA_SUCCESS) return false;
  if (map_locked(va, p.host) != CUDA_SUCCESS) {
    pool::driver().cuMemUnmap(p.shadow, cfg_.page_bytes);
    pool::driver().cuMemRelease(p.host);
    free_shadow_.push_back(p.shadow);
    stats_.host_bytes -= cfg_.page_bytes;
    return false;
  }
  p.where = state::on_host;
  p.last_use = ++tick_;
  pages_.emplace(va, std::move(p));
  ++stats_.pages;
  ++stats_.born_on_host;
  return true;
}

void swap_engine::destroy_page(std::uintptr_t va) {
  std::lock_guard<std::mutex> lock(mutex_);
  await_page_locked(va);  // Note [The mover] in residency/swap_mover.cc
  page* p = find_locked(va);
  if (p == nullptr) return;
  const pool::driver_table& d = pool::driver();
  // See Note [Lending an evicting page's memory] in residency/swap_engine.h: the memory
  // this page borrowed leaves no other address mapping it; a lender's memory is its
  // borrower's, not released here.
  if (p->lender != 0) finish_lender_locked(p->lender);
  wait_copy_locked(*p);
  unmap_locked(va);
  if (p->lent_to != 0) {
    if (page* b = find_locked(p->lent_to); b != nullptr && b->lender == va) b->lender = 0;
    p->lent_to = 0;
    p->device = 0;
    --lent_pages_;
  }
  if (p->device != 0) {
    // The arena gives memory back (its trim): release it, no spare.
    ++stats_.mapping_calls;
    d.cuMemRelease(p->device);
    stats_.resident_bytes -= cfg_.page_bytes;
  }
  if (p->host != 0) {
    d.cuMemUnmap(p->shadow, cfg_.page_bytes);
    d.cuMemRelease(p->host);
    free_shadow_.push_back(p->shadow);
    stats_.host_bytes -= cfg_.page_bytes;
  }
  release_copy_locked(*p);
  pages_.erase(va);
  --stats_.pages;
}

// ---- The pages a request covers ----

// The engine's pages under the required (or, with optional, the optional) ranges,
// sorted, each once.
std::vector<std::uintptr_t> swap_engine::pages_of(std::span<const byte_range> ranges,
                                                       bool optional) const {
  std::vector<std::uintptr_t> out;
  const std::uintptr_t mask = ~(std::uintptr_t{cfg_.page_bytes} - 1);
  for (const byte_range& r : ranges) {
    if (r.bytes == 0 || r.reach || r.optional != optional) continue;
    for (std::uintptr_t a = r.addr & mask; a < r.addr + r.bytes; a += cfg_.page_bytes) {
      if (pages_.count(a) != 0) out.push_back(a);
    }
  }
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

// The pages under the optional ranges, each once: every range's first page (sorted),
// then the others (sorted). When the room runs out part way, the pages the argument
// words point at are the ones made resident.
std::vector<std::uintptr_t> swap_engine::optional_pages_of(
    std::span<const byte_range> ranges) const {
  std::vector<std::uintptr_t> all = pages_of(ranges, true);
  std::vector<std::uintptr_t> out;
  const std::uintptr_t mask = ~(std::uintptr_t{cfg_.page_bytes} - 1);
  for (const byte_range& r : ranges) {
    if (r.bytes == 0 || r.reach || !r.optional || pages_.count(r.addr & mask) == 0) continue;
    out.push_back(r.addr & mask);
  }
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  const std::size_t firsts = out.size();
  for (std::uintptr_t va : all) {
    if (!std::binary_search(out.begin(), out.begin() + static_cast<std::ptrdiff_t>(firsts), va)) {
      out.push_back(va);
    }
  }
  return out;
}

// ---- Live blocks (Note [Dead pages] in residency/swap_engine.h) ----

template <typename F>
void swap_engine::for_pages_locked(std::uintptr_t addr, std::size_t bytes, F&& f) {
  if (bytes == 0) return;
  const std::uintptr_t mask = ~(std::uintptr_t{cfg_.page_bytes} - 1);
  for (std::uintptr_t a = addr & mask; a < addr + bytes; a += cfg_.page_bytes) {
    if (page* p = find_locked(a)) f(a, *p);
  }
}

void swap_engine::occupy(std::uintptr_t addr, std::size_t bytes) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (bytes == 0 || !occupied_.emplace(addr, bytes).second) return;
  for_pages_locked(addr, bytes, [&](std::uintptr_t va, page& p) {
    if (p.occupants++ != 0) return;
    p.fresh_epoch = write_epoch_;
    if (p.dead) log_vacancy_locked({va, false});
  });
}

void swap_engine::vacate(std::uintptr_t addr) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = occupied_.find(addr);
  if (it == occupied_.end()) return;
  const std::size_t bytes = it->second;
  occupied_.erase(it);
  for_pages_locked(addr, bytes, [&](std::uintptr_t va, page& p) {
    if (p.occupants == 0 || --p.occupants != 0) return;
    p.dead = true;
    log_vacancy_locked({va, true});
  });
}

// Kept for the learner (take_vacancies); a log nobody takes stays bounded.
void swap_engine::log_vacancy_locked(vacancy v) {
  if (vacancies_.size() >= kMaxVacancies) vacancies_.clear();
  vacancies_.push_back(v);
}

void swap_engine::take_vacancies(std::vector<vacancy>& out) {
  std::lock_guard<std::mutex> lock(mutex_);
  out.insert(out.end(), vacancies_.begin(), vacancies_.end());
  vacancies_.clear();
}

}  // namespace oversub::residency
