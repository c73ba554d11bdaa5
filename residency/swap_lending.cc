// The swap engine's lending of an evicting page's memory to a fetch: the switch, which
// pages may lend, and finishing a lender's eviction (see Note [Lending an evicting
// page's memory] in residency/swap_engine.h).
#include "residency/swap_engine.h"

#include <algorithm>
#include <utility>

namespace oversub::residency {

void swap_engine::set_lending(bool on) {
  std::lock_guard<std::mutex> lock(mutex_);
  lending_ = on;
}

// Up to n evicting pages whose copies out are under way and whose memory is not lent
// yet, the oldest copy first (Note [Lending an evicting page's memory] in
// residency/swap_engine.h).
std::vector<std::uintptr_t> swap_engine::lenders_locked(std::size_t n,
                                                             const victim_rank& rank,
                                                             bool planned_only) {
  std::vector<std::pair<std::uint64_t, std::uintptr_t>> all;
  for (auto& [va, p] : pages_) {
    // An eviction known complete is finished by make_room_locked (its memory a spare).
    if (p.where != state::evicting || p.lent_to != 0 || p.device == 0 || p.copy < 0 ||
        copies_[p.copy].done || (planned_only && !p.planned) || (rank && rank(va) == 0)) {
      continue;
    }
    all.emplace_back(copies_[p.copy].seq, va);
  }
  std::sort(all.begin(), all.end());
  std::vector<std::uintptr_t> out;
  for (std::size_t i = 0; i < all.size() && i < n; ++i) out.push_back(all[i].second);
  return out;
}

// The lender at va, if it still is one, waits for its copy out and finishes its
// eviction: its address maps its host handle again.
CUresult swap_engine::finish_lender_locked(std::uintptr_t va) {
  page* l = find_locked(va);
  if (l == nullptr || l->lent_to == 0) return CUDA_SUCCESS;
  if (l->copy >= 0 && !copies_[l->copy].done) ++stats_.waits;
  if (CUresult r = wait_copy_locked(*l); r != CUDA_SUCCESS) return r;
  const std::uintptr_t one[] = {va};
  return evict_finish_locked(one);
}

}  // namespace oversub::residency
