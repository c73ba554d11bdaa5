// oprof_check: the C++ reader's answer for each file, for tests/profiler/oprof_test.py
// (the Python reader must refuse exactly the same files with the same messages).
//   oprof_check FILE...          one line per file on stdout:
//                                  <FILE>: refused: <message>
//                                  <FILE>: ok launches N unreadable U flags F,F,...
//   oprof_check --rewrite IN OUT   IN decoded and encoded again by the C++ writer
// Exit status 0 (refusals are answers, not errors); 2 for a usage error or a
// rewrite that failed.
#include <cstdio>
#include <cstring>
#include <string>
#include <variant>

#include "profiler/profile_format.h"

namespace op = oversub::profiler;

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: oprof_check FILE... | oprof_check --rewrite IN OUT\n");
    return 2;
  }
  if (std::strcmp(argv[1], "--rewrite") == 0) {
    if (argc != 4) return 2;
    auto r = op::read_file(argv[2]);
    if (auto* e = std::get_if<op::format_error>(&r)) {
      std::fprintf(stderr, "%s: refused: %s\n", argv[2], e->message.c_str());
      return 2;
    }
    std::string error;
    if (!op::write_file(std::get<op::profile>(r), argv[3], &error)) {
      std::fprintf(stderr, "%s\n", error.c_str());
      return 2;
    }
    return 0;
  }
  for (int i = 1; i < argc; ++i) {
    auto r = op::read_file(argv[i]);
    if (auto* e = std::get_if<op::format_error>(&r)) {
      std::printf("%s: refused: %s\n", argv[i], e->message.c_str());
      continue;
    }
    const op::profile& p = std::get<op::profile>(r);
    std::size_t unreadable = 0;
    std::string flags;
    for (const op::launch_record& l : p.launches) {
      unreadable += l.unreadable() ? 1 : 0;
      if (!flags.empty()) flags += ',';
      flags += std::to_string(l.flags);
    }
    std::printf("%s: ok launches %zu unreadable %zu flags %s\n", argv[i], p.launches.size(),
                unreadable, flags.c_str());
  }
  return 0;
}
