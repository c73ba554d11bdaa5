// Note [Pages that die] (see page_lifetimes.h).
#include "interpose/page_lifetimes.h"

#include <unordered_map>

namespace oversub::interpose {

namespace {

struct stretch {
  std::uint32_t deaths = 0;
  std::uint32_t first = 0;  // launch positions
  std::uint32_t last = 0;
};

}  // namespace

page_model model_page_lifetimes(std::span<const std::vector<page_use>> previous,
                                std::span<const std::vector<page_use>> current,
                                std::size_t page_bytes) {
  // The count at each page's last use in the period before.
  std::unordered_map<std::uintptr_t, std::uint32_t> before;
  for (const std::vector<page_use>& launch : previous) {
    for (const page_use& u : launch) before[u.page] = u.deaths;
  }
  // Each page's stretches, in order of first use.
  std::vector<std::uintptr_t> order;
  std::unordered_map<std::uintptr_t, std::vector<stretch>> stretches;
  for (std::size_t i = 0; i < current.size(); ++i) {
    const auto pos = static_cast<std::uint32_t>(i);
    for (const page_use& u : current[i]) {
      auto [it, added] = stretches.try_emplace(u.page);
      if (added) order.push_back(u.page);
      std::vector<stretch>& s = it->second;
      if (s.empty() || s.back().deaths != u.deaths) {
        s.push_back(stretch{u.deaths, pos, pos});
      } else {
        s.back().last = pos;
      }
    }
  }
  page_model out;
  // (page, stretch index) -> buffer id
  std::unordered_map<std::uintptr_t, std::vector<policy::buffer_id>> id_of;
  for (std::uintptr_t page : order) {
    const std::vector<stretch>& s = stretches[page];
    const auto b = before.find(page);
    // Died across the boundary: the count at the first use here differs from the
    // count at the last use in the period before. Unknown (no period before, or the
    // page unused there): taken as not, the safe way (one long-lived lifetime).
    const bool died_across = b != before.end() && b->second != s.front().deaths;
    std::vector<policy::buffer_id>& ids = id_of[page];
    ids.resize(s.size());
    const bool wraps = !died_across;  // the last stretch continues into the first
    const auto add = [&](bool long_lived, const stretch& st) {
      const auto id = static_cast<policy::buffer_id>(out.model.buffers.size());
      out.model.buffers.push_back(policy::model_buffer{page_bytes, long_lived,
                                                       long_lived ? 0 : st.first,
                                                       long_lived ? 0 : st.last});
      out.page_of_id.push_back(page);
      return id;
    };
    if (wraps) {
      // First and last stretches (the same one when there is one): long-lived.
      ids.front() = add(true, s.front());
      ids.back() = ids.front();
      for (std::size_t k = 1; k + 1 < s.size(); ++k) ids[k] = add(false, s[k]);
    } else {
      for (std::size_t k = 0; k < s.size(); ++k) ids[k] = add(false, s[k]);
    }
  }
  // Uses: the stretch each launch's page is in.
  std::unordered_map<std::uintptr_t, std::size_t> cursor;
  out.model.launches.resize(current.size());
  for (std::size_t i = 0; i < current.size(); ++i) {
    for (const page_use& u : current[i]) {
      const std::vector<stretch>& s = stretches[u.page];
      std::size_t& k = cursor[u.page];
      while (s[k].last < i) ++k;
      out.model.launches[i].uses.push_back(id_of[u.page][k]);
    }
  }
  return out;
}

}  // namespace oversub::interpose
