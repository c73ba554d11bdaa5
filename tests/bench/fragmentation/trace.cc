// Reading allocation traces (docs/trace-format.md) and the planner's view of them.
#include "trace.h"

#include <algorithm>
#include <fstream>
#include <random>
#include <sstream>
#include <unordered_map>

namespace oversub::bench {

bool read_trace(const std::string& path, trace* out, std::string* error) {
  std::ifstream in(path);
  if (!in) {
    *error = "cannot open " + path;
    return false;
  }
  trace t;
  const auto slash = path.find_last_of('/');
  t.name = path.substr(slash == std::string::npos ? 0 : slash + 1);
  t.name = t.name.substr(0, t.name.find(".trace"));
  std::unordered_map<std::string, std::uint32_t> live;  // trace id -> buffer
  std::uint32_t next = 0;
  std::string line;
  for (std::size_t number = 1; std::getline(in, line); ++number) {
    if (line.empty()) continue;
    if (line[0] == '#') {
      const std::string key = "# source: ";
      if (t.source.empty() && line.compare(0, key.size(), key) == 0) t.source = line.substr(key.size());
      continue;
    }
    std::istringstream fields(line);
    std::string kind, id;
    fields >> kind >> id;
    auto bad = [&](const std::string& why) {
      *error = path + ":" + std::to_string(number) + ": " + why + ": '" + line + "'";
      return false;
    };
    if (kind == "a") {
      unsigned long long bytes = 0;
      if (!(fields >> bytes)) return bad("an allocation needs an id and a size");
      if (!live.emplace(id, next).second) return bad("id allocated twice");
      t.events.push_back({true, next++, static_cast<std::size_t>(bytes)});
    } else if (kind == "f") {
      auto it = live.find(id);
      if (it == live.end()) return bad("free of an id not live");
      t.events.push_back({false, it->second, 0});
      live.erase(it);
    } else if (kind == "i") {
      ++t.iterations;
    } else {
      return bad("unknown record");
    }
  }
  *out = std::move(t);
  return true;
}

std::vector<policy::buffer_lifetime> lifetimes_of(const trace& t) {
  std::vector<policy::buffer_lifetime> out;
  const auto end = static_cast<std::uint32_t>(t.events.size());
  for (std::uint32_t time = 0; time < t.events.size(); ++time) {
    const trace_event& e = t.events[time];
    if (e.alloc) {
      out.push_back({e.bytes, time, end});
    } else {
      out[e.buffer].free_time = time;
    }
  }
  return out;
}

std::size_t max_live_bytes(const trace& t, std::size_t alignment_bytes) {
  std::vector<std::size_t> size;
  std::size_t live = 0, peak = 0;
  for (const trace_event& e : t.events) {
    if (e.alloc) {
      size.push_back((e.bytes + alignment_bytes - 1) / alignment_bytes * alignment_bytes);
      live += size.back();
      peak = std::max(peak, live);
    } else {
      live -= size[e.buffer];
    }
  }
  return peak;
}

trace random_trace(std::size_t n, std::uint32_t seed) {
  std::mt19937 rng(seed);
  trace t;
  t.name = "random-" + std::to_string(n);
  t.source = "synthetic: random sizes and frees, seed " + std::to_string(seed);
  std::vector<std::uint32_t> live;
  std::uint32_t next = 0;
  while (next < n || !live.empty()) {
    const bool alloc = next < n && (live.empty() || rng() % 100 < 55);
    if (alloc) {
      const std::size_t bytes = (std::size_t{1} << (rng() % 20 + 6)) + rng() % 1000;
      t.events.push_back({true, next, bytes});
      live.push_back(next++);
    } else {
      const std::size_t pick = rng() % live.size();
      const std::uint32_t b = live[pick];
      live.erase(live.begin() + static_cast<std::ptrdiff_t>(pick));
      if (rng() % 50 != 0) t.events.push_back({false, b, 0});  // else: never freed
    }
  }
  return t;
}

}  // namespace oversub::bench
