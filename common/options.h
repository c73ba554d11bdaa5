// oversub options: every OVERSUB_* environment variable, declared once.
//
// OVERSUB_OPTIONS below is the only list of options. From it come the parser, the
// effective-configuration printout (OVERSUB_VERBOSE=1), the unknown-name check and
// the options reference in the docs (tools/options_doc.cc prints it for
// `scripts/oversub options --markdown`; scripts/update-options-doc puts it into
// README.md and the user guides, and a test fails when they differ). Values are read once, from the
// environment, the first time current_config() is called (liboversub's
// constructor calls it before main). A malformed value stops the program with
// exit status 2 and a message naming the variable, the value and the accepted
// forms; an unknown OVERSUB_* name gets a warning naming the closest known one.
//
// parse_options() is pure (it takes the environment as a list of NAME=value
// strings) so the parsing rules are unit-tested without touching the process.
#ifndef OVERSUB_COMMON_OPTIONS_H
#define OVERSUB_COMMON_OPTIONS_H

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/log.h"

namespace oversub {

// What the library does with the calls it intercepts: one line here per mode (its
// enumerator, the word OVERSUB_MODE takes, its behaviour behind the core). The modes
// are ordered: each does what the one before it does, and more, so code tests
// `mode >= run_mode::pool`. automatic (OVERSUB_MODE=auto) is swap or um, decided
// once, before the pool is built (Note [Choosing the mode] in core/mode_choice.h); it
// comes after both so that `mode >= run_mode::swap` holds for it before and after.
#define OVERSUB_MODES(X)                                                         \
  X(off, "off", "pure pass-through: every call goes to CUDA untouched, nothing counted") \
  X(track, "track", "track live allocations, enforce OVERSUB_DEVICE_LIMIT, count calls") \
  X(pool, "pool", "track, and serve device allocations from oversub's arena (pool/)") \
  X(swap, "swap", "pool, and swap pages to host memory to run past the device's memory: " \
          "OVERSUB_DEVICE_LIMIT bounds what is resident")                          \
  X(um, "um", "device allocations as managed memory, each launch's buffers prefetched " \
        "and the least recently used sent back to the host")                       \
  X(automatic, "auto", "swap or um, whichever a saved profile's iteration is predicted " \
        "to run faster in at the device's capacity; swap without a profile")

enum class run_mode : std::uint8_t {
#define OVERSUB_MODE_ENUM(name, word, doc) name,
  OVERSUB_MODES(OVERSUB_MODE_ENUM)
#undef OVERSUB_MODE_ENUM
};

// How the device arena places blocks (OVERSUB_POOL): online best fit, or the
// lifetime-planned placement learned from the iteration.
enum class pool_kind : std::uint8_t { online, planned };

// Which schedule drives swap mode (OVERSUB_POLICY; policy/schedule.h): cost-aware
// (farthest next use, prefetch ahead), vDNN's offload-all-activations, or on-demand
// least-recently-used only; naive: um mode without prefetches or hints (the
// driver pages on demand), the baseline the others are measured against.
enum class swap_policy : std::uint8_t { cost, vdnn_all, lru, naive };

// How OVERSUB_STATS asks for the statistics printed at exit.
enum class stats_format : std::uint8_t { none, text, json };

// OVERSUB_DEVICE_LIMIT: no limit, an absolute size, or a fraction of the real
// device's total memory resolved at first use (the real cudaMemGetInfo).
struct device_limit {
  enum class kind : std::uint8_t { none, bytes, fraction };
  kind how = kind::none;
  std::uint64_t bytes = 0;  // when how == bytes
  double fraction = 0.0;    // when how == fraction

  // The limit for a device whose real total is total_bytes; UINT64_MAX if none.
  std::uint64_t resolve(std::uint64_t total_bytes) const;
  bool operator==(const device_limit&) const = default;
};

// OVERSUB_HOST_LIMIT: the pinned host budget, as a size or a fraction of physical
// RAM (same forms as device_limit, fractions at most 1.0; none: no budget).
struct host_limit {
  device_limit value{device_limit::kind::fraction, 0, 0.5};
  bool operator==(const host_limit&) const = default;
};

// The effective configuration.
struct config {
  run_mode mode = run_mode::track;
  device_limit limit;
  pool_kind pool = pool_kind::online;
  std::uint64_t pool_large_bytes = std::uint64_t{32} << 20;
  host_limit host;
  swap_policy policy = swap_policy::cost;
  std::uint64_t prefetch_launches = 0;  // 0: as far ahead as capacity allows
  bool tune = true;  // Note [Choosing among schedules by measured time] in core/tuning.cc
  bool mover_thread = true;  // Note [The mover] in residency/swap_mover.cc
  log::level log_level = log::level::warn;
  std::string log_file;    // empty: stderr. "%p" is replaced by the pid.
  bool verbose = false;
  stats_format stats = stats_format::none;
  std::string stats_file;  // empty: stderr. "%p" is replaced by the pid.
  std::string profile_out;        // non-empty: profile (mode >= track), write here
  std::string iteration_marker;   // kernel-name substring starting an iteration
  std::uint64_t profile_iterations = 0;  // write the profile after this many; 0: at exit
  std::string profile_in;         // a profile to load at start (validated)
  std::string profile;            // read if there, else written (Note [One profile path])
};

// X(NAME, field, parser, default, accepted forms, doc). NAME is the part after
// OVERSUB_; parser is a parse_* function below taking (text, field&).
#define OVERSUB_OPTIONS(X)                                                          \
  X(MODE, mode, parse_mode, "track", "off | track | pool | swap | um | auto",       \
    "what oversub does with intercepted calls (off: pass-through; track: track "    \
    "allocations and enforce the device limit; pool: track and serve device "       \
    "allocations from oversub's arena; swap: pool, and move pages to host memory "  \
    "so the job may own more than the device holds; um: managed memory prefetched " \
    "ahead of each launch; auto: swap or um, whichever the profile loaded at start " \
    "(OVERSUB_PROFILE) predicts faster at the device's capacity, um without one (swap without concurrent managed access); " \
    "to run past the device's memory without knowing which to choose, take auto "  \
    "with OVERSUB_PROFILE)")                                                       \
  X(DEVICE_LIMIT, limit, parse_device_limit, "none",                                \
    "none | a size from 1MiB to 1024TiB such as 12GiB, 512MiB, 1.5GB or 1048576 (a "   \
    "number without a unit is bytes) | a fraction of the device's memory such as "  \
    "0.75 or 2.0 (a number with a decimal point, above 0 and at most 16.0)",        \
    "virtual capacity per device: allocations past it fail with "                   \
    "cudaErrorMemoryAllocation, cudaMemGetInfo reports it")                         \
  X(POOL, pool, parse_pool_kind, "online", "online | planned",                      \
    "pool mode's placement: online best fit, or planned from the learned iteration") \
  X(POOL_LARGE, pool_large_bytes, parse_pool_large, "32MiB",                        \
    "a size such as 32MiB, 64M (at least 2 MiB)",                                   \
    "pool mode: allocations at least this big get a mapping of their own")          \
  X(HOST_LIMIT, host, parse_host_limit, "0.5",                                      \
    "none | a size from 1MiB to 1024TiB such as 16GiB | a fraction of physical RAM "  \
    "such as 0.5 (a number with a decimal point, above 0 and at most 1.0)",         \
    "budget of pinned host memory the pool may hold")                               \
  X(POLICY, policy, parse_swap_policy, "cost", "cost | vdnn-all | lru | naive",     \
    "swap mode's schedule once the iteration is learned: cost-aware, vDNN's "      \
    "offload of every activation, or least-recently-used on demand only; naive: "  \
    "um mode without prefetches or hints (swap mode: as lru)")                     \
  X(PREFETCH, prefetch_launches, parse_prefetch, "auto",                            \
    "auto | a number of launches (1 to 100000)",                                    \
    "swap mode, cost policy: how far ahead fetches may start (auto: as far as "    \
    "the capacity allows)")                                                         \
  X(TUNE, tune, parse_bool, "1", "0 | 1 | off | on | no | yes | false | true",      \
    "swap and um modes, cost policy: once the iteration is learned, follow 24 "     \
    "variants of its schedule (where the loop body starts, pages left free; in "    \
    "swap mode then the fastest lending evicting pages' memory) for "              \
    "about two iterations each, timed on the device by CUPTI's kernel records, "    \
    "and keep the fastest (without CUPTI: the plan as learned)")                    \
  X(MOVER, mover_thread, parse_mover, "thread", "inline | thread",                  \
    "who makes the moves off the launch path: in swap mode the remaps of pages "     \
    "(unmapping and mapping device memory or the host copy at a page's address, "   \
    "granting access) for evictions and the schedule's fetches, and the evictions' "\
    "copies; in um mode the schedule's prefetches. Threads of oversub's own, or the "\
    "launching thread (inline)")                                                    \
  X(LOG, log_level, parse_log_level, "warn", "error | warn | info | debug | trace", \
    "lowest level of message printed")                                              \
  X(LOG_FILE, log_file, parse_path, "", "a file path (%p is replaced by the pid)",  \
    "append messages to this file instead of stderr")                               \
  X(VERBOSE, verbose, parse_bool, "0", "0 | 1 | off | on | no | yes | false | true",\
    "print the effective configuration at start")                                   \
  X(STATS, stats, parse_stats, "0", "0 | 1 | json",                                 \
    "print statistics at exit (1: text, json: one JSON object on one line)")        \
  X(STATS_FILE, stats_file, parse_path, "", "a file path (%p is replaced by the pid)",\
    "append the exit statistics to this file instead of stderr")                  \
  X(PROFILE_OUT, profile_out, parse_path, "",                                       \
    "a file path (%p is replaced by the pid)",                                      \
    "profile the run (any mode but off) and write the learned iteration there "     \
    "(docs/profile-format.md)")                                                     \
  X(ITERATION_MARKER, iteration_marker, parse_path, "",                             \
    "a substring of a kernel name",                                                 \
    "profiling: an iteration begins at each launch of a kernel whose name contains " \
    "it (default: found from the repeating launch sequence)")                       \
  X(PROFILE_ITERATIONS, profile_iterations, parse_count, "0",                       \
    "0 | a number of iterations (at most 1000000)",                                 \
    "profiling: write the profile once this many iterations are seen (0: at exit)") \
  X(PROFILE_IN, profile_in, parse_path, "", "a file path",                          \
    "a profile to load at start; in swap mode its long-lived buffers are laid out by " \
    "it; a corrupt or foreign one is refused with a warning and the run goes on "     \
    "without it")                                                                     \
  X(PROFILE, profile, parse_path, "", "a file path",                                \
    "start from the profile there when the file exists (as OVERSUB_PROFILE_IN), "   \
    "else profile this run and write it there (as OVERSUB_PROFILE_OUT); those two, " \
    "when set, win")

// Value parsers: true and out set when text is an accepted form.
bool parse_mode(std::string_view text, run_mode& out);
bool parse_device_limit(std::string_view text, device_limit& out);
bool parse_pool_kind(std::string_view text, pool_kind& out);
bool parse_swap_policy(std::string_view text, swap_policy& out);
bool parse_prefetch(std::string_view text, std::uint64_t& out);
bool parse_pool_large(std::string_view text, std::uint64_t& out);
bool parse_host_limit(std::string_view text, host_limit& out);
bool parse_log_level(std::string_view text, log::level& out);
bool parse_path(std::string_view text, std::string& out);
bool parse_bool(std::string_view text, bool& out);
bool parse_mover(std::string_view text, bool& out);
bool parse_stats(std::string_view text, stats_format& out);
bool parse_count(std::string_view text, std::uint64_t& out);

// A size with an optional unit: B, K/KB/KiB, M/MB/MiB, G/GB/GiB, T/TB/TiB (binary
// for the bare letter and *iB, decimal for *B), case-insensitive, fractional
// mantissa allowed ("1.5GB"). nullopt when malformed or past 2^63.
std::optional<std::uint64_t> parse_size(std::string_view text);

// Levenshtein distance (insert, delete, substitute each cost 1).
std::size_t edit_distance(std::string_view a, std::string_view b);

// The known OVERSUB_* name closest to name (full names, with the prefix).
std::string_view closest_option_name(std::string_view name);

// Problems found in the environment.
struct option_error {
  std::string name;      // full variable name
  std::string value;
  std::string accepted;  // accepted forms, from the table
  std::string reason;    // what is wrong with value (refusal_reason)
};
struct unknown_option {
  std::string name;
  std::string closest;
};
struct parse_outcome {
  config cfg;
  std::vector<option_error> errors;
  std::vector<unknown_option> unknown;
};

// Reads the OVERSUB_* entries of env ("NAME=value" strings); others are ignored.
parse_outcome parse_options(const std::vector<std::string_view>& env);

// What is wrong with a value the parser of option name (the full variable name)
// refused: the bound it crosses ("4096 bytes is below the minimum of 1 MiB"), else
// that it is none of the accepted forms.
std::string refusal_reason(std::string_view name, std::string_view value);

// The message for one malformed value, without the "oversub: " prefix:
// NAME='value' is not valid: <reason>. Accepted: <forms>
std::string describe(const option_error& e);

// The effective configuration, one "OVERSUB_NAME=value" line each.
std::vector<std::string> describe_config(const config& cfg);

// Names and docs for the reference table (docs, --help).
struct option_info {
  std::string_view name;
  std::string_view default_value;
  std::string_view accepted;
  std::string_view doc;
};
const std::vector<option_info>& option_table();

std::string_view to_string(run_mode m);
// path with every "%p" replaced by the process id (OVERSUB_LOG_FILE,
// OVERSUB_STATS_FILE, OVERSUB_PROFILE_OUT).
std::string expand_pid(std::string_view path);

std::string_view to_string(pool_kind k);
std::string_view to_string(swap_policy p);
std::string_view to_string(stats_format s);

// The process's configuration, parsed from environ on first call. Reports
// unknown names through the log, and on malformed values prints every problem
// and ends the process with status 2. Thread-safe; never destroyed.
const config& current_config();
// The mode actually run, where the device cannot give the one asked (Note [Swap needs
// host-located VMM] in core/device_pool.cc). Called once, before any allocation is
// served in that mode.
void set_effective_mode(run_mode m);
// A line the user asked for with OVERSUB_VERBOSE=1 (the choices oversub makes: the
// mode, the layout, the schedule's sources): written as "oversub: <line>" when
// verbose, else logged at OVERSUB_LOG=info.
void say(const std::string& line) noexcept;

// Opens cfg.stats_file for appending ("%p" expanded); -1 when unset or failing, and
// on failure warns, naming the file and the reason, as OVERSUB_LOG_FILE does.
int open_stats_destination(const config& cfg);

// Note [One profile path]
// ~~~~~~~~~~~~~~~~~~~~~~~
// OVERSUB_PROFILE=path is OVERSUB_PROFILE_IN=path when a file
// is there (readable) and OVERSUB_PROFILE_OUT=path otherwise, so the same command
// profiles its first run and starts every later one from that profile. An explicit
// OVERSUB_PROFILE_IN or OVERSUB_PROFILE_OUT is kept. Applied once, when the
// configuration is loaded.
void resolve_profile_path(config& cfg);

}  // namespace oversub

#endif  // OVERSUB_COMMON_OPTIONS_H
