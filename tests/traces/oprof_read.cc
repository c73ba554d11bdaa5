// oprof_read: reads profiles with the C++ reader (profiler/profile_format.h) and
// prints, per file, what the trace tests compare with the Python reader:
//   <path>: launches N allocations M long_lived L copies C peak_bytes P kernel_ns K
// Exit status 1 (with the refusal's message) when any file is refused.
// Peak: the most bytes live before any launch, long-lived buffers counted throughout
// and a per-iteration buffer over [alloc_at, free_at), as scripts/oversub report does.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <variant>
#include <vector>

#include "profiler/profile_format.h"

namespace op = oversub::profiler;

static std::uint64_t peak_live_bytes(const op::profile& p) {
  const std::size_t n = p.launches.size();
  std::vector<std::int64_t> delta(n + 2, 0);
  for (const op::allocation_record& a : p.allocations) {
    const std::size_t start = a.long_lived ? 0 : a.alloc_at;
    const std::size_t end = a.free_at == op::no_index ? n + 1 : a.free_at;
    if (end <= start) continue;
    delta[start] += static_cast<std::int64_t>(a.bytes);
    delta[std::min(end, n + 1)] -= static_cast<std::int64_t>(a.bytes);
  }
  std::int64_t now = 0, peak = 0;
  for (std::size_t i = 0; i <= n; ++i) {
    now += delta[i];
    peak = std::max(peak, now);
  }
  return static_cast<std::uint64_t>(peak);
}

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: oprof_read PROFILE...\n");
    return 2;
  }
  int status = 0;
  for (int i = 1; i < argc; ++i) {
    auto result = op::read_file(argv[i]);
    if (auto* err = std::get_if<op::format_error>(&result)) {
      std::fprintf(stderr, "%s: refused: %s\n", argv[i], err->message.c_str());
      status = 1;
      continue;
    }
    const op::profile& p = std::get<op::profile>(result);
    std::size_t long_lived = 0;
    for (const auto& a : p.allocations) long_lived += a.long_lived ? 1 : 0;
    std::printf("%s: launches %zu allocations %zu long_lived %zu copies %zu peak_bytes %llu "
                "kernel_ns %llu\n",
                argv[i], p.launches.size(), p.allocations.size(), long_lived, p.copies.size(),
                static_cast<unsigned long long>(peak_live_bytes(p)),
                static_cast<unsigned long long>(p.device.iteration_kernel_ns));
  }
  return status;
}
