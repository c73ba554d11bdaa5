// The profile format: a profile round-trips exactly; a flipped byte anywhere,
// every truncation, a wrong magic, a newer version and trailing bytes are each
// refused with a message saying so (never a crash).
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
  p.launches.push_back({p.intern("relu(float*)"), 0, 43, {}});
  p.launches.push_back({p.intern("adam(float*)"), 20, 44, {1}});
  p.copies.push_back({0, copy_kind::h2d, 4096, 900, 0});
  p.copies.push_back({3, copy_kind::memset, 64, 0, no_index});
  return p;
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

TEST(ProfileFormat, EveryFlippedByteIsRefused) {
  const std::vector<std::uint8_t> good = encode(sample());
  for (std::size_t i = 0; i < good.size(); ++i) {
    std::vector<std::uint8_t> bad = good;
    bad[i] ^= 0x10;
    EXPECT_NE(refusal(bad), "") << "byte " << i << " flipped was accepted";
  }
  std::vector<std::uint8_t> bad = good;
  bad[profile_header_bytes + 5] ^= 1;
  EXPECT_EQ(refusal(bad), "checksum mismatch: the file is corrupt");
}

TEST(ProfileFormat, EveryTruncationIsRefused) {
  const std::vector<std::uint8_t> good = encode(sample());
  for (std::size_t n = 0; n < good.size(); ++n) {
    std::vector<std::uint8_t> cut(good.begin(), good.begin() + static_cast<long>(n));
    EXPECT_NE(refusal(cut), "") << "truncated to " << n << " bytes was accepted";
  }
  std::vector<std::uint8_t> cut(good.begin(), good.end() - 1);
  EXPECT_NE(refusal(cut).find("truncated"), std::string::npos) << refusal(cut);
}

TEST(ProfileFormat, ForeignFilesAreRefused) {
  std::vector<std::uint8_t> good = encode(sample());
  std::vector<std::uint8_t> png = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n', 0, 0, 0, 13};
  EXPECT_EQ(refusal(png), "not an oversub profile (wrong magic number)");
  std::vector<std::uint8_t> v2 = good;
  v2[8] = 2;
  EXPECT_EQ(refusal(v2), "format version 2, this reader knows version 1");
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
