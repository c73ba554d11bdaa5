// oversub-simulate: the what-if simulator on a profile. Reads a profile (.oprof),
// turns it into the policy's iteration model (Note [Profile to iteration model] in
// policy/profile_model.h), and for each capacity and policy asked plans, checks and
// replays the schedule in virtual time on a device model. docs/simulate.md.
//
//   oversub-simulate model.oprof [--device NAME|FILE] [--device-dir DIR]
//       [--capacity SIZE | --capacities A,B,... | --sweep N]
//       [--policy cost|vdnn-all|lru|um-naive|all] [--durations auto|model]
//       [--granularity buffer|page] [--json]
//
// --granularity page plans and replays the arena's 2 MiB pages as the library's swap
// mode moves them (Note [Page model] in policy/page_model.h); buffer (the default) plans
// the profile's buffers themselves.
//
// Exit status: 0 when at least one point was simulated, 1 when none could be (a
// refused profile, an unknown device, a capacity below the largest launch), 2 for
// a usage error.
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <string>
#include <variant>
#include <vector>

#include "common/options.h"
#include "common/units.h"
#include "profiler/profile_format.h"
#include "tools/simulate/device_model.h"
#include "policy/page_model.h"
#include "policy/profile_model.h"
#include "tools/simulate/what_if.h"

#ifndef OVERSUB_DEVICE_MODELS_DIR
#error "OVERSUB_DEVICE_MODELS_DIR must name tests/simgpu/devices"
#endif

namespace {

using namespace oversub;
using namespace oversub::tools;
using policy::duration_source;
using policy::model_from_profile;
using policy::page_model;
using policy::pages_of_profile;
using policy::profile_model;

constexpr const char* usage =
    "usage: oversub-simulate PROFILE [--device NAME|FILE] [--device-dir DIR]\n"
    "         [--capacity SIZE | --capacities A,B,... | --sweep N]\n"
    "         [--policy cost|vdnn-all|lru|um-naive|all] [--durations auto|model]\n"
    "         [--granularity buffer|page] [--json]\n";

struct options {
  std::string profile;
  std::string device = "h100-pcie";
  std::string device_dir = OVERSUB_DEVICE_MODELS_DIR;
  std::vector<std::size_t> capacities;  // empty: the device's memory (or the sweep)
  unsigned sweep = 0;
  std::vector<policy::policy_kind> policies = {policy::policy_kind::cost};
  duration_source durations = duration_source::automatic;
  bool pages = false;  // --granularity page
  bool json = false;
};

int usage_error(const std::string& message) {
  std::fprintf(stderr, "oversub-simulate: %s\n%s", message.c_str(), usage);
  return 2;
}

bool parse_capacity(const std::string& text, std::size_t& out) {
  const std::optional<std::uint64_t> v = parse_size(text);
  if (!v || *v == 0) return false;
  out = static_cast<std::size_t>(*v);
  return true;
}

// Parses argv into opts; returns -1 on success, else the exit status.
int parse_args(int argc, char** argv, options& opts) {
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    std::string value;
    bool has_value = false;
    if (arg.rfind("--", 0) == 0 && arg.find('=') != std::string::npos) {
      value = arg.substr(arg.find('=') + 1);
      arg = arg.substr(0, arg.find('='));
      has_value = true;
    }
    auto take = [&]() -> bool {
      if (has_value) return true;
      if (i + 1 >= argc) return false;
      value = argv[++i];
      return true;
    };
    if (arg == "-h" || arg == "--help") {
      std::fputs(usage, stdout);
      return 0;
    } else if (arg == "--json") {
      opts.json = true;
    } else if (arg == "--device" || arg == "--device-dir" || arg == "--capacity" ||
               arg == "--capacities" || arg == "--sweep" || arg == "--policy" ||
               arg == "--durations" || arg == "--granularity") {
      if (!take()) return usage_error(arg + " needs a value");
      if (arg == "--device") {
        opts.device = value;
      } else if (arg == "--device-dir") {
        opts.device_dir = value;
      } else if (arg == "--capacity" || arg == "--capacities") {
        std::size_t start = 0;
        while (start <= value.size()) {
          const std::size_t comma = std::min(value.find(',', start), value.size());
          const std::string item = value.substr(start, comma - start);
          std::size_t bytes = 0;
          if (!parse_capacity(item, bytes)) {
            return usage_error(arg + ": '" + item +
                               "' is not a capacity (a size such as 12GiB, 512MiB, 1.5GB or "
                               "a byte count, above 0)");
          }
          opts.capacities.push_back(bytes);
          start = comma + 1;
        }
      } else if (arg == "--sweep") {
        char* end = nullptr;
        const unsigned long n = std::strtoul(value.c_str(), &end, 10);
        if (value.empty() || *end != '\0' || n < 2 || n > 1000) {
          return usage_error("--sweep: '" + value + "' is not a point count from 2 to 1000");
        }
        opts.sweep = static_cast<unsigned>(n);
      } else if (arg == "--policy") {
        policy::policy_kind k{};
        if (value == "all") {
          opts.policies = all_policies();
        } else if (parse_policy(value, k)) {
          opts.policies = {k};
        } else {
          return usage_error("--policy: '" + value +
                             "' is not one of cost, vdnn-all, lru, um-naive, all");
        }
      } else if (arg == "--granularity") {
        if (value != "buffer" && value != "page") {
          return usage_error("--granularity: '" + value + "' is not buffer or page");
        }
        opts.pages = value == "page";
      } else if (arg == "--durations") {
        if (value == "auto") {
          opts.durations = duration_source::automatic;
        } else if (value == "model") {
          opts.durations = duration_source::model;
        } else {
          return usage_error("--durations: '" + value + "' is not auto or model");
        }
      }
    } else if (arg.rfind("-", 0) == 0 && arg.size() > 1) {
      return usage_error("unknown option " + arg);
    } else if (opts.profile.empty()) {
      opts.profile = arg;
    } else {
      return usage_error("one profile only (got '" + opts.profile + "' and '" + arg + "')");
    }
  }
  if (opts.profile.empty()) return usage_error("no profile given");
  if (opts.sweep != 0 && !opts.capacities.empty()) {
    return usage_error("--sweep and --capacity/--capacities exclude each other");
  }
  return -1;
}

std::string json_string(const std::string& s) {
  std::string out = "\"";
  for (const char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", static_cast<unsigned>(c));
      out += buf;
    } else {
      out += c;
    }
  }
  return out + "\"";
}

std::string format_ns(std::uint64_t ns) {
  char buf[32];
  if (ns >= 1'000'000) {
    std::snprintf(buf, sizeof buf, "%.3f ms", static_cast<double>(ns) / 1e6);
  } else if (ns >= 1'000) {
    std::snprintf(buf, sizeof buf, "%.3f us", static_cast<double>(ns) / 1e3);
  } else {
    std::snprintf(buf, sizeof buf, "%" PRIu64 " ns", ns);
  }
  return buf;
}

std::string format_overhead(double overhead) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%+.1f%%", overhead * 100.0);
  return buf;
}

void print_json(const options& opts, const device_model& device, const profile_model& pm,
                const page_model* pages, const model_summary& s,
                const std::vector<what_if_point>& points) {
  std::printf("{\n  \"profile\": %s,\n", json_string(opts.profile).c_str());
  std::printf("  \"device\": {\"name\": %s, \"path\": %s, \"memory_bytes\": %" PRIu64 "},\n",
              json_string(device.name).c_str(), json_string(device.path).c_str(),
              device.memory_bytes);
  std::printf("  \"durations\": {\"source\": \"%s\", \"measured\": %u, \"modeled\": %u},\n",
              opts.durations == duration_source::model ? "model" : "auto",
              pm.durations_measured, pm.durations_modeled);
  std::printf("  \"launches\": %zu, \"buffers\": %zu, \"long_lived_buffers\": %u, "
              "\"unfreed_taken_as_long_lived\": %u, \"live_at_no_launch\": %u, "
              "\"unreadable_launches\": %u,\n",
              s.launches, s.buffers, pm.long_lived, pm.unfreed, pm.live_at_no_launch,
              pm.unreadable_launches);
  std::printf("  \"peak_live_bytes\": %zu,\n", s.peak_live_bytes);
  if (pages != nullptr) {
    std::printf("  \"granularity\": \"page\", \"pages\": %zu, \"page_bytes\": %zu, "
                "\"long_lived_zone_bytes\": %zu, \"planned_region_bytes\": %zu,\n",
                pages->pages, pages->page_bytes,
                pages->long_lived_bytes, pages->region_bytes);
  } else {
    std::printf("  \"granularity\": \"buffer\",\n");
  }
  std::printf("  \"largest_launch\": {\"launch\": %u, \"bytes\": %zu, \"buffers\": %zu},\n",
              s.largest.launch, s.largest.bytes, s.largest.buffer_count);
  std::printf("  \"unlimited_iteration_ns\": %" PRIu64 ",\n  \"points\": [", s.unlimited_ns);
  for (std::size_t i = 0; i < points.size(); ++i) {
    const what_if_point& p = points[i];
    std::printf("%s\n    {\"capacity_bytes\": %zu, \"policy\": \"%s\", \"ok\": %s, \"error\": %s, "
                "\"fits\": %s, ",
                i ? "," : "", p.capacity_bytes, std::string(policy::policy_name(p.policy)).c_str(),
                p.error.empty() ? "true" : "false", json_string(p.error).c_str(),
                p.fits ? "true" : "false");
    std::printf("\"iteration_ns\": %" PRIu64 ", \"unlimited_iteration_ns\": %" PRIu64
                ", \"transfer_bound_ns\": %" PRIu64 ", \"window_bound_ns\": %" PRIu64
                ", \"overhead\": %.6f, \"stall_ns\": %" PRIu64 ", ",
                p.sim.iteration_ns, p.unlimited_ns, p.transfer_bound_ns, p.window_bound_ns,
                p.overhead,
                p.sim.stall_ns);
    std::printf("\"peak_device_bytes\": %zu, \"peak_device_bytes_in_time\": %zu, "
                "\"h2d_bytes\": %" PRIu64 ", \"d2h_bytes\": %" PRIu64 ", \"h2d_copies\": %" PRIu64
                ", \"d2h_copies\": %" PRIu64,
                p.sim.peak_device_bytes, p.sim.peak_device_bytes_in_time, p.sim.h2d_bytes,
                p.sim.d2h_bytes, p.sim.h2d_copies, p.sim.d2h_copies);
    if (pages != nullptr) {
      // The mover's remaps (Note [Virtual time model] in policy/simulate.h).
      std::printf(", \"host_remap_ns\": %" PRIu64 ", \"remaps\": %" PRIu64 ", \"runs\": %" PRIu64,
                  p.sim.host_remap_ns, p.sim.remaps, p.sim.runs);
    }
    // See Note [Launches over the room] in policy/iteration_model.h.
    std::printf(", \"over_room_launches\": %zu, \"host_access_bytes\": %zu",
                p.over_room.launches, p.over_room.host_bytes);
    std::printf("}");
  }
  std::printf("\n  ]\n}\n");
}

// See Note [Launches over the room] in policy/iteration_model.h.
void print_over_room(const what_if_point& p, const device_model& device) {
  if (p.over_room.launches == 0) return;
  std::printf("          %zu launches need more than the capacity: planned with %s of their "
              "memory read in host memory over the link (%.1f GB/s), which is slow\n",
              p.over_room.launches, format_bytes(p.over_room.host_bytes).c_str(),
              device.costs.host_access_bytes_per_s / 1e9);
}

void print_text(const options& opts, const device_model& device, const profile_model& pm,
                const page_model* pages, const model_summary& s,
                const std::vector<what_if_point>& points) {
  std::printf("profile   %s: %zu launches, %zu buffers (%u long-lived); durations: %u measured, "
              "%u modeled\n",
              opts.profile.c_str(), s.launches, s.buffers, pm.long_lived, pm.durations_measured,
              pm.durations_modeled);
  if (pm.unreadable_launches != 0) {
    // See Note [Profile to iteration model] in policy/profile_model.h.
    std::printf("launches  %u of %zu unreadable (parameter layout not read): each taken to use "
                "every buffer live at it\n",
                pm.unreadable_launches, s.launches);
  }
  std::printf("device    %s (%s): %s, link %.1f GB/s to the device, %.1f GB/s back\n",
              device.name.c_str(), device.path.c_str(), format_bytes(device.memory_bytes).c_str(),
              device.costs.h2d_bytes_per_s / 1e9, device.costs.d2h_bytes_per_s / 1e9);
  std::printf("memory    peak live %s (%zu bytes), largest launch %s (launch %u, %zu buffers)\n",
              format_bytes(s.peak_live_bytes).c_str(), s.peak_live_bytes,
              format_bytes(s.largest.bytes).c_str(), s.largest.launch, s.largest.buffer_count);
  if (pages != nullptr) {
    std::printf("pages     %zu pages of %s (%s): long-lived zone %s, planned region %s\n",
                pages->pages, format_bytes(pages->page_bytes).c_str(),
                format_bytes(pages->pages * pages->page_bytes).c_str(),
                format_bytes(pages->long_lived_bytes).c_str(),
                format_bytes(pages->region_bytes).c_str());
  }
  std::printf("unlimited %s per iteration\n", format_ns(s.unlimited_ns).c_str());
  if (points.size() == 1) {
    const what_if_point& p = points[0];
    std::printf("capacity  %s (%zu bytes)%s\n", format_bytes(p.capacity_bytes).c_str(),
                p.capacity_bytes, p.fits ? ": the iteration fits" : "");
    if (!p.error.empty()) return;
    std::printf("%-9s iteration %s, overhead %s against unlimited, transfer bound %s, "
                "window bound %s\n",
                std::string(policy::policy_name(p.policy)).c_str(),
                format_ns(p.sim.iteration_ns).c_str(), format_overhead(p.overhead).c_str(),
                format_ns(p.transfer_bound_ns).c_str(), format_ns(p.window_bound_ns).c_str());
    std::printf("          peak device %s (%zu bytes); moved to the device %s (%" PRIu64
                " bytes, %" PRIu64 " copies), to the host %s (%" PRIu64 " bytes, %" PRIu64
                " copies)\n",
                format_bytes(p.sim.peak_device_bytes).c_str(), p.sim.peak_device_bytes,
                format_bytes(p.sim.h2d_bytes).c_str(), p.sim.h2d_bytes, p.sim.h2d_copies,
                format_bytes(p.sim.d2h_bytes).c_str(), p.sim.d2h_bytes, p.sim.d2h_copies);
    if (p.sim.remaps != 0) {
      std::printf("          mover busy %s remapping %" PRIu64 " page moves in %" PRIu64 " runs\n",
                  format_ns(p.sim.host_remap_ns).c_str(), p.sim.remaps, p.sim.runs);
    }
    print_over_room(p, device);
    return;
  }
  std::printf("\n| capacity | policy | iteration | overhead | transfer bound | window bound | "
              "to device | to host | peak device |\n|---|---|---|---|---|---|---|---|---|\n");
  for (const what_if_point& p : points) {
    const std::string name(policy::policy_name(p.policy));
    if (!p.error.empty()) {
      std::printf("| %s | %s | no schedule: %s | | | | | | |\n",
                  format_bytes(p.capacity_bytes).c_str(), name.c_str(), p.error.c_str());
      continue;
    }
    const std::string over =
        p.over_room.launches == 0
            ? ""
            : " (" + std::to_string(p.over_room.launches) + " over the room)";
    std::printf("| %s | %s | %s%s | %s | %s | %s | %s | %s | %s |\n",
                format_bytes(p.capacity_bytes).c_str(), name.c_str(),
                format_ns(p.sim.iteration_ns).c_str(), over.c_str(),
                format_overhead(p.overhead).c_str(),
                format_ns(p.transfer_bound_ns).c_str(), format_ns(p.window_bound_ns).c_str(),
                format_bytes(p.sim.h2d_bytes).c_str(),
                format_bytes(p.sim.d2h_bytes).c_str(),
                format_bytes(p.sim.peak_device_bytes).c_str());
  }
}

}  // namespace

int main(int argc, char** argv) {
  options opts;
  if (const int status = parse_args(argc, argv, opts); status >= 0) return status;

  const device_model_result device = read_device_model(opts.device, opts.device_dir);
  if (!device.error.empty()) {
    std::fprintf(stderr, "oversub-simulate: %s\n", device.error.c_str());
    return 1;
  }
  std::variant<profiler::profile, profiler::format_error> read = profiler::read_file(opts.profile);
  if (const auto* e = std::get_if<profiler::format_error>(&read)) {
    std::fprintf(stderr, "oversub-simulate: %s refused: %s\n", opts.profile.c_str(),
                 e->message.c_str());
    return 1;
  }
  const profile_model pm =
      model_from_profile(std::get<profiler::profile>(read), device.value, opts.durations);
  if (!pm.error.empty()) {
    std::fprintf(stderr, "oversub-simulate: %s: cannot be simulated: %s\n",
                 opts.profile.c_str(), pm.error.c_str());
    return 1;
  }
  const model_summary summary = summarize(pm.model, device.value.costs);
  page_model pages;
  if (opts.pages) {
    pages = pages_of_profile(std::get<profiler::profile>(read), pm.model);
    if (!pages.error.empty()) {
      std::fprintf(stderr, "oversub-simulate: %s: no page model: %s\n", opts.profile.c_str(),
                   pages.error.c_str());
      return 1;
    }
  }
  const policy::iteration_model& planned = opts.pages ? pages.model : pm.model;
  // Pages are remapped by the library's mover; buffers are not charged for it (Note
  // [Virtual time model] in policy/simulate.h).
  policy::cost_model costs = device.value.costs;
  if (opts.pages) costs.mover = device.value.mover;
  std::vector<std::size_t> capacities = opts.capacities;
  if (opts.sweep != 0) capacities = sweep_capacities(summary, opts.sweep);
  if (capacities.empty()) capacities = {static_cast<std::size_t>(device.value.memory_bytes)};

  std::vector<what_if_point> points;
  bool any_ok = false;
  for (std::size_t capacity : capacities) {
    for (policy::policy_kind kind : opts.policies) {
      points.push_back(run_point(planned, capacity, costs, kind, opts.pages));
      any_ok = any_ok || points.back().error.empty();
    }
  }
  if (opts.json) {
    print_json(opts, device.value, pm, opts.pages ? &pages : nullptr, summary, points);
  } else {
    print_text(opts, device.value, pm, opts.pages ? &pages : nullptr, summary, points);
  }
  if (!any_ok && !opts.json) {
    // Every point failed; a launch larger than the capacity fails every policy
    // alike, so one message per capacity says it.
    std::string last;
    for (const what_if_point& p : points) {
      if (p.error == last) continue;
      last = p.error;
      std::fprintf(stderr, "oversub-simulate: no schedule in %s (%zu bytes): %s\n",
                   format_bytes(p.capacity_bytes).c_str(), p.capacity_bytes, p.error.c_str());
    }
  }
  return any_ok ? 0 : 1;
}
