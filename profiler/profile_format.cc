// Encoding and validating decoding of profile files (docs/profile-format.md).
//
// Note [Reading untrusted profiles]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// Every count read from the file is checked
// against the bytes that remain before anything is reserved (an element needs at
// least its fixed part), every index against the table it points into, and the
// payload must end exactly at its declared length. So a flipped byte, a truncated
// file or a foreign file is refused with a message, never a crash or a huge
// allocation.
#include "profiler/profile_format.h"

#include <fcntl.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <cstdio>
#include <cstring>

namespace oversub::profiler {

const char* to_string(iteration_source s) {
  switch (s) {
    case iteration_source::automatic: return "automatic";
    case iteration_source::marker: return "marker";
    case iteration_source::api: return "api";
    case iteration_source::recorded: return "recorded";
  }
  return "?";
}

const char* to_string(copy_kind k) {
  switch (k) {
    case copy_kind::other: return "other";
    case copy_kind::h2d: return "h2d";
    case copy_kind::d2h: return "d2h";
    case copy_kind::d2d: return "d2d";
    case copy_kind::memset: return "memset";
  }
  return "?";
}

std::uint32_t profile::intern(std::string_view s) {
  for (std::size_t i = 0; i < strings.size(); ++i) {
    if (strings[i] == s) return static_cast<std::uint32_t>(i);
  }
  strings.emplace_back(s);
  return static_cast<std::uint32_t>(strings.size() - 1);
}

std::uint32_t crc32(const std::uint8_t* data, std::size_t size) {
  static const std::array<std::uint32_t, 256> table = [] {
    std::array<std::uint32_t, 256> t{};
    for (std::uint32_t i = 0; i < 256; ++i) {
      std::uint32_t c = i;
      for (int k = 0; k < 8; ++k) c = (c & 1) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
      t[i] = c;
    }
    return t;
  }();
  std::uint32_t c = 0xFFFFFFFFu;
  for (std::size_t i = 0; i < size; ++i) c = table[(c ^ data[i]) & 0xFF] ^ (c >> 8);
  return c ^ 0xFFFFFFFFu;
}

namespace {

class writer {
 public:
  void u8(std::uint8_t v) { out_.push_back(v); }
  void u32(std::uint32_t v) { put(v, 4); }
  void u64(std::uint64_t v) { put(v, 8); }
  void str(const std::string& s) {
    u32(static_cast<std::uint32_t>(s.size()));
    out_.insert(out_.end(), s.begin(), s.end());
  }
  std::vector<std::uint8_t>& bytes() { return out_; }

 private:
  void put(std::uint64_t v, int n) {
    for (int i = 0; i < n; ++i) out_.push_back(static_cast<std::uint8_t>(v >> (8 * i)));
  }
  std::vector<std::uint8_t> out_;
};

class reader {
 public:
  reader(const std::uint8_t* p, std::size_t n) : p_(p), n_(n) {}
  bool u8(std::uint8_t& v) { return get(v, 1); }
  bool u32(std::uint32_t& v) { return get(v, 4); }
  bool u64(std::uint64_t& v) { return get(v, 8); }
  bool str(std::string& s) {
    std::uint32_t len = 0;
    if (!u32(len) || len > left()) return false;
    s.assign(reinterpret_cast<const char*>(p_ + at_), len);
    at_ += len;
    return true;
  }
  // A count of elements each taking at least min_bytes: refused past the input.
  bool count(std::uint32_t& c, std::size_t min_bytes) {
    return u32(c) && std::uint64_t{c} * min_bytes <= left();
  }
  std::size_t left() const { return n_ - at_; }

 private:
  template <typename T>
  bool get(T& v, int n) {
    if (left() < static_cast<std::size_t>(n)) return false;
    std::uint64_t x = 0;
    for (int i = 0; i < n; ++i) x |= std::uint64_t{p_[at_ + i]} << (8 * i);
    at_ += n;
    v = static_cast<T>(x);
    return true;
  }
  const std::uint8_t* p_;
  std::size_t n_;
  std::size_t at_ = 0;
};

void put_header(std::vector<std::uint8_t>& file, std::uint64_t payload_bytes, std::uint32_t crc) {
  writer h;
  for (char c : profile_magic) h.u8(static_cast<std::uint8_t>(c));
  h.u32(profile_version);
  h.u32(static_cast<std::uint32_t>(profile_header_bytes));
  h.u64(payload_bytes);
  h.u32(crc);
  h.u32(0);
  std::memcpy(file.data(), h.bytes().data(), profile_header_bytes);
}

format_error fail(std::string what) { return format_error{std::move(what)}; }

}  // namespace

std::vector<std::uint8_t> encode(const profile& p) {
  writer w;
  w.u8(static_cast<std::uint8_t>(p.source));
  w.u8(p.cupti ? 1 : 0);
  w.u32(p.iterations_seen);
  w.u64(p.total_launches);
  w.u64(p.first_launch);
  w.str(p.marker);
  w.str(p.program);
  w.u64(p.device.capacity_bytes);
  w.u64(p.device.h2d_bytes_per_s);
  w.u64(p.device.d2h_bytes_per_s);
  w.u64(p.device.iteration_kernel_ns);
  w.u32(static_cast<std::uint32_t>(p.strings.size()));
  for (const std::string& s : p.strings) w.str(s);
  w.u32(static_cast<std::uint32_t>(p.call_sites.size()));
  for (const call_site& c : p.call_sites) {
    w.u32(static_cast<std::uint32_t>(c.frames.size()));
    for (const frame& f : c.frames) {
      w.u32(f.module);
      w.u64(f.offset);
      w.u32(f.symbol);
    }
  }
  w.u32(static_cast<std::uint32_t>(p.allocations.size()));
  for (const allocation_record& a : p.allocations) {
    w.u32(a.ordinal);
    w.u64(a.bytes);
    w.u64(a.address);
    w.u32(a.alloc_at);
    w.u32(a.free_at);
    w.u8(a.long_lived ? 1 : 0);
    w.u32(a.call_site);
  }
  w.u32(static_cast<std::uint32_t>(p.launches.size()));
  for (const launch_record& l : p.launches) {
    w.u32(l.name);
    w.u64(l.duration_ns);
    w.u32(l.correlation_id);
    w.u32(static_cast<std::uint32_t>(l.buffers.size()));
    for (std::uint32_t b : l.buffers) w.u32(b);
    w.u8(l.flags);
  }
  w.u32(static_cast<std::uint32_t>(p.copies.size()));
  for (const copy_record& c : p.copies) {
    w.u32(c.before_launch);
    w.u8(static_cast<std::uint8_t>(c.kind));
    w.u64(c.bytes);
    w.u64(c.duration_ns);
    w.u32(c.buffer);
  }
  std::vector<std::uint8_t> file(profile_header_bytes, 0);
  const std::vector<std::uint8_t>& payload = w.bytes();
  file.insert(file.end(), payload.begin(), payload.end());
  put_header(file, payload.size(), crc32(payload.data(), payload.size()));
  return file;
}

std::variant<profile, format_error> decode(const std::uint8_t* data, std::size_t size) {
  if (size < sizeof profile_magic || std::memcmp(data, profile_magic, sizeof profile_magic) != 0) {
    return fail("not an oversub profile (wrong magic number)");
  }
  if (size < profile_header_bytes) return fail("truncated: the header is incomplete");
  reader h(data + sizeof profile_magic, profile_header_bytes - sizeof profile_magic);
  std::uint32_t version = 0, header_bytes = 0, crc = 0, reserved = 0;
  std::uint64_t payload_bytes = 0;
  h.u32(version);
  h.u32(header_bytes);
  h.u64(payload_bytes);
  h.u32(crc);
  h.u32(reserved);
  if (version < profile_oldest_version || version > profile_version) {
    return fail("format version " + std::to_string(version) + ", this reader knows versions " +
                std::to_string(profile_oldest_version) +
                (profile_version == profile_oldest_version + 1 ? " and " : " to ") +
                std::to_string(profile_version));
  }
  if (header_bytes != profile_header_bytes || reserved != 0) return fail("corrupt header");
  if (payload_bytes > size - profile_header_bytes) {
    return fail("truncated: the header announces " + std::to_string(payload_bytes) +
                " payload bytes, the file has " + std::to_string(size - profile_header_bytes));
  }
  if (payload_bytes < size - profile_header_bytes) {
    return fail("trailing bytes after the declared payload length");
  }
  const std::uint8_t* payload = data + profile_header_bytes;
  if (crc32(payload, payload_bytes) != crc) return fail("checksum mismatch: the file is corrupt");

  profile p;
  reader r(payload, payload_bytes);
  auto bad = [](const char* what) { return fail(std::string("corrupt payload: ") + what); };
  std::uint8_t source = 0, cupti = 0;
  if (!r.u8(source) || !r.u8(cupti) || !r.u32(p.iterations_seen) || !r.u64(p.total_launches) ||
      !r.u64(p.first_launch) || !r.str(p.marker) || !r.str(p.program) ||
      !r.u64(p.device.capacity_bytes) || !r.u64(p.device.h2d_bytes_per_s) ||
      !r.u64(p.device.d2h_bytes_per_s) || !r.u64(p.device.iteration_kernel_ns)) {
    return bad("summary");
  }
  if (source > 3 || cupti > 1) return bad("summary flags");
  p.source = static_cast<iteration_source>(source);
  p.cupti = cupti == 1;
  std::uint32_t n = 0;
  if (!r.count(n, 4)) return bad("string count");
  p.strings.resize(n);
  for (std::string& s : p.strings) {
    if (!r.str(s)) return bad("string table");
  }
  auto string_ok = [&](std::uint32_t i) { return i == no_index || i < p.strings.size(); };
  if (!r.count(n, 4)) return bad("call-site count");
  p.call_sites.resize(n);
  for (call_site& c : p.call_sites) {
    std::uint32_t frames = 0;
    if (!r.count(frames, 16)) return bad("frame count");
    c.frames.resize(frames);
    for (frame& f : c.frames) {
      if (!r.u32(f.module) || !r.u64(f.offset) || !r.u32(f.symbol)) return bad("frame");
      if (!string_ok(f.module) || !string_ok(f.symbol)) return bad("frame string index");
    }
  }
  if (!r.count(n, 33)) return bad("allocation count");
  p.allocations.resize(n);
  for (allocation_record& a : p.allocations) {
    std::uint8_t ll = 0;
    if (!r.u32(a.ordinal) || !r.u64(a.bytes) || !r.u64(a.address) || !r.u32(a.alloc_at) ||
        !r.u32(a.free_at) || !r.u8(ll) || !r.u32(a.call_site)) {
      return bad("allocation");
    }
    if (ll > 1) return bad("allocation flags");
    a.long_lived = ll == 1;
    if (a.call_site != no_index && a.call_site >= p.call_sites.size()) {
      return bad("allocation call-site index");
    }
  }
  // Version 2 adds the launch's flags byte after its buffer table.
  const bool launch_flags = version >= 2;
  if (!r.count(n, launch_flags ? 21 : 20)) return bad("launch count");
  p.launches.resize(n);
  for (launch_record& l : p.launches) {
    std::uint32_t buffers = 0;
    if (!r.u32(l.name) || !r.u64(l.duration_ns) || !r.u32(l.correlation_id) ||
        !r.count(buffers, 4)) {
      return bad("launch");
    }
    if (l.name >= p.strings.size()) return bad("launch name index");
    l.buffers.resize(buffers);
    for (std::uint32_t& b : l.buffers) {
      if (!r.u32(b) || b >= p.allocations.size()) return bad("launch buffer index");
    }
    if (launch_flags) {
      if (!r.u8(l.flags)) return bad("launch");
      if ((l.flags & ~launch_known_flags) != 0) return bad("launch flags");
    }
  }
  if (!r.count(n, 25)) return bad("copy count");
  p.copies.resize(n);
  for (copy_record& c : p.copies) {
    std::uint8_t kind = 0;
    if (!r.u32(c.before_launch) || !r.u8(kind) || !r.u64(c.bytes) || !r.u64(c.duration_ns) ||
        !r.u32(c.buffer)) {
      return bad("copy");
    }
    if (kind > 4) return bad("copy kind");
    c.kind = static_cast<copy_kind>(kind);
    if (c.buffer != no_index && c.buffer >= p.allocations.size()) return bad("copy buffer index");
    if (c.before_launch > p.launches.size()) return bad("copy position");
  }
  if (r.left() != 0) return bad("bytes after the last table");
  return p;
}

bool write_file(const profile& p, const std::string& path, std::string* error) {
  const std::vector<std::uint8_t> bytes = encode(p);
  const std::string tmp = path + ".tmp" + std::to_string(::getpid());
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) {
    if (error) *error = tmp + ": " + std::strerror(errno);
    return false;
  }
  std::size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      if (error) *error = tmp + ": " + std::strerror(errno);
      ::close(fd);
      ::unlink(tmp.c_str());
      return false;
    }
    done += static_cast<std::size_t>(n);
  }
  ::close(fd);
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    if (error) *error = path + ": " + std::strerror(errno);
    ::unlink(tmp.c_str());
    return false;
  }
  return true;
}

std::variant<profile, format_error> read_file(const std::string& path) {
  FILE* f = std::fopen(path.c_str(), "rb");
  if (f == nullptr) return fail(path + ": " + std::strerror(errno));
  std::vector<std::uint8_t> bytes;
  std::uint8_t buf[65536];
  std::size_t n = 0;
  while ((n = std::fread(buf, 1, sizeof buf, f)) > 0) bytes.insert(bytes.end(), buf, buf + n);
  std::fclose(f);
  return decode(bytes.data(), bytes.size());
}

std::string_view program_name(std::string_view path) {
  const std::size_t slash = path.rfind('/');
  return slash == std::string_view::npos ? path : path.substr(slash + 1);
}

// See Note [Which program a profile is of] in profiler/profile_format.h.
bool same_program(const profile& p, std::string_view exe) {
  return p.program.empty() || program_name(p.program) == program_name(exe);
}

}  // namespace oversub::profiler
