// write_profile: writes a profile from a small text description with the C++
// writer (profiler::write_file), for the simulator's tests. Usage:
//   write_profile SPEC OUT.oprof
// SPEC lines (# starts a comment), buffers numbered from 0 in the order given:
//   long BYTES                       a long-lived allocation
//   iter BYTES ALLOC_AT FREE_AT|-    a per-iteration one; '-': not freed in the iteration
//   launch DURATION_NS NAME [BUFFER ...]
//   unreadable DURATION_NS NAME [BUFFER ...]   a launch marked unreadable (its parameter
//                                    layout could not be read; the buffers are those seen)
// The profile stores per-iteration allocations first (docs/profile-format.md); the
// buffer numbers of the launches are mapped accordingly.
#include <algorithm>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "profiler/profile_format.h"

int main(int argc, char** argv) {
  using namespace oversub::profiler;
  if (argc != 3) {
    std::fprintf(stderr, "usage: write_profile SPEC OUT.oprof\n");
    return 2;
  }
  std::ifstream in(argv[1]);
  if (!in) {
    std::fprintf(stderr, "write_profile: cannot open %s\n", argv[1]);
    return 2;
  }
  std::vector<allocation_record> spec_buffers;
  std::vector<std::pair<std::string, launch_record>> launches;
  std::string line;
  int line_no = 0;
  while (std::getline(in, line)) {
    ++line_no;
    line = line.substr(0, line.find('#'));
    std::istringstream words(line);
    std::string kind;
    if (!(words >> kind)) continue;
    bool ok = true;
    if (kind == "long" || kind == "iter") {
      allocation_record a;
      ok = static_cast<bool>(words >> a.bytes);
      a.long_lived = kind == "long";
      if (!a.long_lived) {
        std::string free_at;
        ok = ok && static_cast<bool>(words >> a.alloc_at >> free_at);
        if (ok && free_at != "-") a.free_at = static_cast<std::uint32_t>(std::stoul(free_at));
      }
      a.address = 0x7f0000000000ull + (static_cast<std::uint64_t>(spec_buffers.size()) << 24);
      spec_buffers.push_back(a);
    } else if (kind == "launch" || kind == "unreadable") {
      launch_record l;
      if (kind == "unreadable") l.flags = launch_unreadable;
      std::string name;
      ok = static_cast<bool>(words >> l.duration_ns >> name);
      std::uint32_t b = 0;
      while (ok && words >> b) {
        ok = b < spec_buffers.size();
        l.buffers.push_back(b);
      }
      launches.emplace_back(name, l);
    } else {
      ok = false;
    }
    if (!ok) {
      std::fprintf(stderr, "write_profile: %s:%d: cannot read '%s'\n", argv[1], line_no,
                   line.c_str());
      return 2;
    }
  }
  profile p;
  p.source = iteration_source::api;
  p.iterations_seen = 3;
  p.program = "write_profile";
  std::vector<std::uint32_t> index_of(spec_buffers.size());
  std::uint32_t ordinal = 0;
  for (int pass = 0; pass < 2; ++pass) {
    for (std::size_t i = 0; i < spec_buffers.size(); ++i) {
      allocation_record a = spec_buffers[i];
      if (a.long_lived != (pass == 1)) continue;
      if (!a.long_lived) a.ordinal = ordinal++;
      index_of[i] = static_cast<std::uint32_t>(p.allocations.size());
      p.allocations.push_back(a);
    }
  }
  for (auto& [name, l] : launches) {
    l.name = p.intern(name);
    for (std::uint32_t& b : l.buffers) b = index_of[b];
    std::sort(l.buffers.begin(), l.buffers.end());
    p.device.iteration_kernel_ns += l.duration_ns;
    p.launches.push_back(l);
  }
  p.total_launches = p.launches.size() * 3;
  std::string error;
  if (!write_file(p, argv[2], &error)) {
    std::fprintf(stderr, "write_profile: %s\n", error.c_str());
    return 1;
  }
  return 0;
}
