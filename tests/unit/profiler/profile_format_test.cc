// The profile format: a profile round-trips exactly (a launch's flags included);
// a version 1 file (no launch flags) is still read, its launches with flags 0; a
// flipped byte anywhere, every truncation (of either version), a wrong magic, an
// unknown version, a launch flag this reader does not know and trailing bytes are
// each refused with a message saying so (never a crash).
#include "profiler/profile_format.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <string>
#include <variant>

namespace oversub::profiler {
namespace {

profile sample() {
  profile p;
  p.source = iteration_source::marker;
  p.iterations_seen = 7;
  p.total_launches = 1000;
  p.first_launch = 600;
  p.cupti = true;
  p.marker = "adam";
  p.program = "/usr/bin/python3";
  p.device = {80ull << 30, 50'000'000'000, 40'000'000'000, 123456};
  const std::uint32_t mod = p.intern("/lib/libtorch.so");
  const std::uint32_t sym = p.intern("at::empty");
  p.call_sites.push_back(call_site{{frame{mod, 0x1234, sym}, frame{mod, 0x99, no_index}}});
  p.allocations.push_back({0, 4096, 0x7f0000000000, 1, 3, false, 0});
  p.allocations.push_back({no_index, 1 << 20, 0x7f0000100000, 0, no_index, true, no_index});
  p.launches.push_back({p.intern("gemm(float*)"), 1500, 42, {0, 1}});
  p.launches.push_back({p.intern("relu(float*)"), 0, 43, {}, launch_unreadable});
  p.launches.push_back({p.intern("adam(float*)"), 20, 44, {1}});
  p.copies.push_back({0, copy_kind::h2d, 4096, 900, 0});
  p.copies.push_back({3, copy_kind::memset, 64, 0, no_index});
  return p;
}

// The same profile as version 1 writes it: no flags byte after each launch's buffer
// table (every flag must be 0), the header's version, length and CRC to match.
std::vector<std::uint8_t> as_version_1(profile p) {
  for (launch_record& l : p.launches) l.flags = 0;
  profile head = p;
  head.launches.clear();
  head.copies.clear();
  // Everything before the launch table: the payload of a profile without launches
  // and copies, less its two empty table counts.
  const std::size_t launches_at = encode(head).size() - 8;
  std::vector<std::uint8_t> v2 = encode(p);
  std::vector<std::uint8_t> v1(v2.begin(), v2.begin() + static_cast<long>(launches_at) + 4);
  std::size_t at = launches_at + 4;
  for (const launch_record& l : p.launches) {
    const std::size_t record = 4 + 8 + 4 + 4 + 4 * l.buffers.size();
    v1.insert(v1.end(), v2.begin() + static_cast<long>(at),
              v2.begin() + static_cast<long>(at + record));
    at += record + 1;  // the flags byte left out
  }
  v1.insert(v1.end(), v2.begin() + static_cast<long>(at), v2.end());
  const std::size_t payload = v1.size() - profile_header_bytes;
  const std::uint32_t crc = crc32(v1.data() + profile_header_bytes, payload);
  v1[8] = 1;
  for (int i = 0; i < 8; ++i) v1[16 + i] = static_cast<std::uint8_t>(std::uint64_t{payload} >> (8 * i));
  for (int i = 0; i < 4; ++i) v1[24 + i] = static_cast<std::uint8_t>(crc >> (8 * i));
  return v1;
}

std::string refusal(const std::vector<std::uint8_t>& bytes) {
  auto r = decode(bytes.data(), bytes.size());
  if (std::holds_alternative<profile>(r)) return "";
  return std::get<format_error>(r).message;
}

TEST(ProfileFormat, RoundTrips) {
  const profile p = sample();
  const std::vector<std::uint8_t> bytes = encode(p);
  auto r = decode(bytes.data(), bytes.size());
  ASSERT_TRUE(std::holds_alternative<profile>(r)) << std::get<format_error>(r).message;
  EXPECT_EQ(std::get<profile>(r), p);
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(bytes.data()), 7), "OVSPROF");
}

TEST(ProfileFormat, RoundTripsThroughAFile) {
  const std::string path = ::testing::TempDir() + "/roundtrip.oprof";
  std::string error;
  ASSERT_TRUE(write_file(sample(), path, &error)) << error;
  auto r = read_file(path);
  ASSERT_TRUE(std::holds_alternative<profile>(r));
  EXPECT_EQ(std::get<profile>(r), sample());
  std::remove(path.c_str());
  EXPECT_NE(std::get<format_error>(read_file(path)).message.find("No such file"),
            std::string::npos);
}

TEST(ProfileFormat, WritesVersion2) {
  const std::vector<std::uint8_t> bytes = encode(sample());
  EXPECT_EQ(bytes[8], 2);
  EXPECT_EQ(profile_version, 2u);
}

TEST(ProfileFormat, Version1IsStillRead) {
  const std::vector<std::uint8_t> v1 = as_version_1(sample());
  EXPECT_EQ(v1.size() + sample().launches.size(), encode(sample()).size());
  auto r = decode(v1.data(), v1.size());
  ASSERT_TRUE(std::holds_alternative<profile>(r)) << std::get<format_error>(r).message;
  profile want = sample();
  for (launch_record& l : want.launches) l.flags = 0;
  EXPECT_EQ(std::get<profile>(r), want);
  EXPECT_FALSE(std::get<profile>(r).launches[1].unreadable());
}

TEST(ProfileFormat, TheUnreadableFlagRoundTrips) {
  const std::vector<std::uint8_t> bytes = encode(sample());
  auto r = decode(bytes.data(), bytes.size());
  ASSERT_TRUE(std::holds_alternative<profile>(r));
  const profile& p = std::get<profile>(r);
  EXPECT_FALSE(p.launches[0].unreadable());
  EXPECT_TRUE(p.launches[1].unreadable());
  EXPECT_EQ(p.launches[1].flags, launch_unreadable);
  EXPECT_FALSE(p.launches[2].unreadable());
}

TEST(ProfileFormat, UnknownLaunchFlagsAreRefused) {
  for (int bit = 1; bit < 8; ++bit) {
    profile p = sample();
    p.launches[2].flags = static_cast<std::uint8_t>(1u << bit);
    EXPECT_EQ(refusal(encode(p)), "corrupt payload: launch flags") << "bit " << bit;
    p.launches[2].flags |= launch_unreadable;
    EXPECT_EQ(refusal(encode(p)), "corrupt payload: launch flags") << "bit " << bit;
  }
}

TEST(ProfileFormat, EveryFlippedByteIsRefused) {
  for (const std::vector<std::uint8_t>& good : {encode(sample()), as_version_1(sample())}) {
    for (std::size_t i = 0; i < good.size(); ++i) {
      std::vector<std::uint8_t> bad = good;
      bad[i] ^= 0x10;
      EXPECT_NE(refusal(bad), "") << "version " << int{good[8]} << ": byte " << i
                                  << " flipped was accepted";
    }
    std::vector<std::uint8_t> bad = good;
    bad[profile_header_bytes + 5] ^= 1;
    EXPECT_EQ(refusal(bad), "checksum mismatch: the file is corrupt");
  }
}

TEST(ProfileFormat, EveryTruncationIsRefused) {
  for (const std::vector<std::uint8_t>& good : {encode(sample()), as_version_1(sample())}) {
    for (std::size_t n = 0; n < good.size(); ++n) {
      std::vector<std::uint8_t> cut(good.begin(), good.begin() + static_cast<long>(n));
      EXPECT_NE(refusal(cut), "") << "version " << int{good[8]} << ": truncated to " << n
                                  << " bytes was accepted";
    }
    std::vector<std::uint8_t> cut(good.begin(), good.end() - 1);
    EXPECT_NE(refusal(cut).find("truncated"), std::string::npos) << refusal(cut);
  }
}

TEST(ProfileFormat, ForeignFilesAreRefused) {
  std::vector<std::uint8_t> good = encode(sample());
  std::vector<std::uint8_t> png = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n', 0, 0, 0, 13};
  EXPECT_EQ(refusal(png), "not an oversub profile (wrong magic number)");
  std::vector<std::uint8_t> v3 = good;
  v3[8] = 3;
  EXPECT_EQ(refusal(v3), "format version 3, this reader knows versions 1 and 2");
  std::vector<std::uint8_t> v0 = good;
  v0[8] = 0;
  EXPECT_EQ(refusal(v0), "format version 0, this reader knows versions 1 and 2");
  std::vector<std::uint8_t> longer = good;
  longer.push_back(0);
  EXPECT_EQ(refusal(longer), "trailing bytes after the declared payload length");
}

TEST(ProfileFormat, BadIndexWithValidChecksumIsRefused) {
  profile p = sample();
  p.launches[0].buffers = {5};  // only two allocations
  const std::vector<std::uint8_t> bytes = encode(p);
  EXPECT_EQ(refusal(bytes), "corrupt payload: launch buffer index");
}

// See Note [Which program a profile is of] in profiler/profile_format.h.
TEST(ProfileFormat, AProfileIsOfTheExecutableWithTheSameFileName) {
  profile p = sample();
  p.program = "/build/tests/workloads/simtrain";
  EXPECT_EQ(program_name(p.program), "simtrain");
  EXPECT_EQ(program_name("simtrain"), "simtrain");
  EXPECT_TRUE(same_program(p, "/build/tests/workloads/simtrain"));
  EXPECT_TRUE(same_program(p, "/other-build/tests/workloads/simtrain"));
  EXPECT_TRUE(same_program(p, "/usr/local/bin/simtrain"));
  EXPECT_FALSE(same_program(p, "/build/tests/workloads/randprog"));
  EXPECT_FALSE(same_program(p, "/build/tests/workloads/simtrain2"));
  EXPECT_FALSE(same_program(p, "/usr/bin/python3.12"));
  // A profile that names no program (a writer that knew none) is any program's.
  p.program.clear();
  EXPECT_TRUE(same_program(p, "/usr/bin/python3.12"));
  // It survives the file: the identity is read back as written.
  p.program = "/usr/bin/python3.12";
  const std::vector<std::uint8_t> bytes = encode(p);
  const auto r = decode(bytes.data(), bytes.size());
  ASSERT_TRUE(std::holds_alternative<profile>(r));
  EXPECT_TRUE(same_program(std::get<profile>(r), "/opt/conda/bin/python3.12"));
  EXPECT_FALSE(same_program(std::get<profile>(r), "/build/simtrain"));
}

TEST(ProfileFormat, Crc32MatchesZlib) {
  const std::uint8_t text[] = "123456789";
  EXPECT_EQ(crc32(text, 9), 0xCBF43926u);
}

}  // namespace
}  // namespace oversub::profiler
