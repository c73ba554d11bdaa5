// profile_format: the profile file, one learned training iteration, as plain C++.
//
// A profile says, for one iteration of a training job seen from outside: which
// buffers it allocates (ordinal within the iteration, size, lifetime in launch
// positions, call site) and which long-lived buffers it uses; every kernel launch
// in order (function name, the buffers its arguments point into, duration); every
// copy and memset (position, kind, bytes, duration); and the device and link
// figures measured. docs/profile-format.md is the byte-level specification; this
// header and profile_format.cc are its only C++ implementation, and
// scripts/lib/oprof.py its Python reader.
//
// No CUDA and no fmt here: the policy, the what-if simulator and the unit tests
// link this file alone. Reading never trusts the file: every count, index and
// length is checked, and a refusal says what was wrong.
#ifndef OVERSUB_PROFILER_PROFILE_FORMAT_H
#define OVERSUB_PROFILER_PROFILE_FORMAT_H

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

namespace oversub::profiler {

inline constexpr char profile_magic[8] = {'O', 'V', 'S', 'P', 'R', 'O', 'F', '\0'};
// The version writers write; readers accept profile_oldest_version to it (a
// version 1 file's launches read with flags 0). See docs/profile-format.md.
inline constexpr std::uint32_t profile_version = 2;
inline constexpr std::uint32_t profile_oldest_version = 1;
inline constexpr std::size_t profile_header_bytes = 32;
inline constexpr std::uint32_t no_index = 0xFFFFFFFFu;

// How the iteration's boundaries were found.
enum class iteration_source : std::uint8_t {
  automatic = 0,  // the repeating period of the launched-function sequence
  marker = 1,     // OVERSUB_ITERATION_MARKER: a kernel whose name contains it
  api = 2,        // oversub_iteration_begin() called by the program
  recorded = 3,   // one iteration recorded off the GPU (oversub trace-torch): modeled
                  // durations, no link measured
};
const char* to_string(iteration_source s);

// One native frame of an allocation's call site: the module (index into strings),
// the offset of the return address in it, and the dynamic symbol if one covered it.
struct frame {
  std::uint32_t module = no_index;
  std::uint64_t offset = 0;
  std::uint32_t symbol = no_index;
  bool operator==(const frame&) const = default;
};

struct call_site {
  std::vector<frame> frames;  // innermost first, oversub's own frames removed
  bool operator==(const call_site&) const = default;
};

// A buffer the iteration uses. Per-iteration buffers (allocated inside it) are
// identified across iterations by (ordinal, bytes); long-lived ones (allocated
// before it: weights, optimizer state, a caching allocator's segments) by address.
struct allocation_record {
  std::uint32_t ordinal = no_index;  // k-th allocation of the iteration; no_index: long-lived
  std::uint64_t bytes = 0;
  std::uint64_t address = 0;         // in the profiled run
  std::uint32_t alloc_at = 0;        // launches of the iteration before its allocation
  std::uint32_t free_at = no_index;  // launches before its free; no_index: not freed in it
  bool long_lived = false;
  std::uint32_t call_site = no_index;  // index into call_sites
  bool operator==(const allocation_record&) const = default;
};

// launch_record::flags bits. A reader refuses a launch with any other bit set.
//
// Note [A launch whose buffers are not known]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// When the profiler could not read a function's parameter layout (cudaFuncGetParamInfo,
// cuFuncGetParamInfo and cuKernelGetParamInfo all refused, or a runtime error was
// pending so the function could not be probed yet), none of the launch's argument
// words could be scanned: its buffer set is empty because it is unknown, not because
// the kernel uses nothing. Such a launch is marked launch_unreadable, and every
// reader takes it to use every buffer live at it (the policy's model, `oversub
// report`'s note), as swap mode does at run time (Note [A launch that may touch
// anything] in residency/swap_engine.h). It is never read as touching nothing.
inline constexpr std::uint8_t launch_unreadable = 1u << 0;
inline constexpr std::uint8_t launch_known_flags = launch_unreadable;

struct launch_record {
  std::uint32_t name = no_index;        // demangled function name, index into strings
  std::uint64_t duration_ns = 0;        // 0: not measured (no CUPTI activity)
  std::uint32_t correlation_id = 0;     // CUPTI's, 0 when seen through the hooks
  std::vector<std::uint32_t> buffers;   // indices into allocations, ascending
  std::uint8_t flags = 0;               // launch_unreadable (version 2; 0 in version 1)
  bool unreadable() const { return (flags & launch_unreadable) != 0; }
  bool operator==(const launch_record&) const = default;
};

enum class copy_kind : std::uint8_t { other = 0, h2d = 1, d2h = 2, d2d = 3, memset = 4 };
const char* to_string(copy_kind k);

struct copy_record {
  std::uint32_t before_launch = 0;   // launches of the iteration before it
  copy_kind kind = copy_kind::other;
  std::uint64_t bytes = 0;
  std::uint64_t duration_ns = 0;     // 0: not measured
  std::uint32_t buffer = no_index;   // the device-side allocation, if known
  bool operator==(const copy_record&) const = default;
};

struct device_figures {
  std::uint64_t capacity_bytes = 0;         // device total (the virtual one under a limit)
  std::uint64_t h2d_bytes_per_s = 0;        // measured from copy activity; 0: unknown
  std::uint64_t d2h_bytes_per_s = 0;
  std::uint64_t iteration_kernel_ns = 0;    // sum of the iteration's kernel durations
  bool operator==(const device_figures&) const = default;
};

struct profile {
  iteration_source source = iteration_source::automatic;
  std::uint32_t iterations_seen = 0;      // complete iterations observed
  std::uint64_t total_launches = 0;       // launches observed in the run
  std::uint64_t first_launch = 0;         // run-wide index of the iteration's first launch
  bool cupti = false;                     // launches seen through CUPTI (else the hooks)
  std::string marker;                     // OVERSUB_ITERATION_MARKER when used
  std::string program;                    // the profiled program (argv[0])
  device_figures device;
  std::vector<std::string> strings;
  std::vector<call_site> call_sites;
  std::vector<allocation_record> allocations;
  std::vector<launch_record> launches;
  std::vector<copy_record> copies;
  bool operator==(const profile&) const = default;

  // Index of s in strings, appended when new (linear: for writers of small tables).
  std::uint32_t intern(std::string_view s);
};

// The file's bytes.
std::vector<std::uint8_t> encode(const profile& p);

// A refusal: why the bytes are not a profile this reader accepts.
struct format_error {
  std::string message;
};

// Decodes and validates everything (magic, version, header, length, checksum,
// every count, index and string). Never throws on bad input.
std::variant<profile, format_error> decode(const std::uint8_t* data, std::size_t size);

// Writes atomically (a temporary file renamed over path); false and *error set on
// failure.
bool write_file(const profile& p, const std::string& path, std::string* error);
std::variant<profile, format_error> read_file(const std::string& path);

// Note [Which program a profile is of]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// The summary's program is the profiled executable (/proc/self/exe). A profile
// given to OVERSUB_PROFILE_IN is of this program when the two executables have the
// same file name: the same program built or installed in another folder is still
// the same program, and so is a run with other arguments (another batch size lays
// its long-lived buffers out the same way). A profile with no program (a writer
// that knew none) is taken as any program's, so every profile written so far stays
// readable. What this cannot tell apart: two scripts run by the same interpreter
// (python3), whose executable is the interpreter.
//
// The file name of an executable path ("simtrain" for "/a/b/simtrain").
std::string_view program_name(std::string_view path);
// Whether p may be used by the program whose executable is exe (see the Note).
bool same_program(const profile& p, std::string_view exe);

// CRC-32 (IEEE 802.3, as zlib.crc32) of the payload.
std::uint32_t crc32(const std::uint8_t* data, std::size_t size);

}  // namespace oversub::profiler

#endif  // OVERSUB_PROFILER_PROFILE_FORMAT_H
