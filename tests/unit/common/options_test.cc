// Tests of the OVERSUB_* options table: value forms, defaults, errors that name the
// variable, and the closest-name suggestion for unknown variables.
#include "common/options.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

namespace oversub {
namespace {

TEST(ParseSize, PlainBytesAndUnits) {
  EXPECT_EQ(parse_size("4096"), 4096u);
  EXPECT_EQ(parse_size("12GiB"), 12ull << 30);
  EXPECT_EQ(parse_size("512MiB"), 512ull << 20);
  EXPECT_EQ(parse_size("512mib"), 512ull << 20);
  EXPECT_EQ(parse_size("1.5GB"), 1500000000ull);
  EXPECT_EQ(parse_size("1.5GiB"), 3ull << 29);
  EXPECT_EQ(parse_size("2G"), 2ull << 30);
  EXPECT_EQ(parse_size("64K"), 64ull << 10);
  EXPECT_EQ(parse_size("64 KB"), 64000u);
  EXPECT_EQ(parse_size("100B"), 100u);
  EXPECT_EQ(parse_size(" 1TiB "), 1ull << 40);
}

TEST(ParseSize, RejectsMalformed) {
  for (const char* bad : {"", "GiB", "12XB", "1.2.3", "-1", "12 GiB extra", "0x10", "1e9",
                          "99999999999999999999", "20000000TiB"}) {
    EXPECT_FALSE(parse_size(bad).has_value()) << bad;
  }
}

TEST(DeviceLimit, FractionBytesNone) {
  device_limit l;
  ASSERT_TRUE(parse_device_limit("0.75", l));
  EXPECT_EQ(l.how, device_limit::kind::fraction);
  EXPECT_DOUBLE_EQ(l.fraction, 0.75);
  EXPECT_EQ(l.resolve(80ull << 30), 60ull << 30);

  ASSERT_TRUE(parse_device_limit("12GiB", l));
  EXPECT_EQ(l.how, device_limit::kind::bytes);
  EXPECT_EQ(l.bytes, 12ull << 30);
  EXPECT_EQ(l.resolve(80ull << 30), 12ull << 30);

  ASSERT_TRUE(parse_device_limit("1.5GB", l));
  EXPECT_EQ(l.bytes, 1500000000ull);

  ASSERT_TRUE(parse_device_limit("268435456", l));
  EXPECT_EQ(l.bytes, 256ull << 20);

  ASSERT_TRUE(parse_device_limit("none", l));
  EXPECT_EQ(l.how, device_limit::kind::none);
  ASSERT_TRUE(parse_device_limit("", l));
  EXPECT_EQ(l.how, device_limit::kind::none);
}

TEST(DeviceLimit, Bounds) {
  device_limit l;
  EXPECT_FALSE(parse_device_limit("12XB", l));
  EXPECT_FALSE(parse_device_limit("0.0", l));
  EXPECT_FALSE(parse_device_limit("16.5", l));
  EXPECT_TRUE(parse_device_limit("16.0", l));
  EXPECT_TRUE(parse_device_limit("2.0", l));
  EXPECT_FALSE(parse_device_limit("0", l));          // bytes below 1 MiB
  EXPECT_FALSE(parse_device_limit("1000", l));
  EXPECT_TRUE(parse_device_limit("1MiB", l));
  EXPECT_FALSE(parse_device_limit("2PiB", l));       // no unit P, and past 2^50
  EXPECT_FALSE(parse_device_limit("75%", l));
}

TEST(ScalarOptions, ModesLevelsBoolsStats) {
  run_mode m = run_mode::off;
  EXPECT_TRUE(parse_mode("track", m));
  EXPECT_EQ(m, run_mode::track);
  EXPECT_TRUE(parse_mode("OFF", m));
  EXPECT_EQ(m, run_mode::off);
  EXPECT_FALSE(parse_mode("swapp", m));

  log::level lv = log::level::warn;
  EXPECT_TRUE(parse_log_level("debug", lv));
  EXPECT_EQ(lv, log::level::debug);
  EXPECT_TRUE(parse_log_level("warning", lv));
  EXPECT_EQ(lv, log::level::warn);
  EXPECT_FALSE(parse_log_level("loud", lv));

  bool b = false;
  EXPECT_TRUE(parse_bool("yes", b));
  EXPECT_TRUE(b);
  EXPECT_TRUE(parse_bool("0", b));
  EXPECT_FALSE(b);
  EXPECT_FALSE(parse_bool("2", b));

  stats_format s = stats_format::none;
  EXPECT_TRUE(parse_stats("json", s));
  EXPECT_EQ(s, stats_format::json);
  EXPECT_TRUE(parse_stats("1", s));
  EXPECT_EQ(s, stats_format::text);
  EXPECT_TRUE(parse_stats("0", s));
  EXPECT_EQ(s, stats_format::none);
  EXPECT_FALSE(parse_stats("xml", s));
}

TEST(ParseOptions, DefaultsWhenEmpty) {
  parse_outcome o = parse_options({});
  EXPECT_TRUE(o.errors.empty());
  EXPECT_TRUE(o.unknown.empty());
  EXPECT_EQ(o.cfg.mode, run_mode::track);
  EXPECT_EQ(o.cfg.limit.how, device_limit::kind::none);
  EXPECT_EQ(o.cfg.log_level, log::level::warn);
  EXPECT_FALSE(o.cfg.verbose);
  EXPECT_EQ(o.cfg.stats, stats_format::none);
  EXPECT_TRUE(o.cfg.log_file.empty());
}

TEST(ParseOptions, ReadsKnownIgnoresOthers) {
  parse_outcome o = parse_options({"PATH=/usr/bin", "OVERSUB_MODE=off",
                                   "OVERSUB_DEVICE_LIMIT=512MiB", "OVERSUB_STATS=json",
                                   "OVERSUB_LOG_FILE=/tmp/x-%p.log", "OVERSUB_VERBOSE=1",
                                   "OVERSUB_LOG=trace", "NOT_OVERSUB_MODE=x"});
  EXPECT_TRUE(o.errors.empty());
  EXPECT_TRUE(o.unknown.empty());
  EXPECT_EQ(o.cfg.mode, run_mode::off);
  EXPECT_EQ(o.cfg.limit.bytes, 512ull << 20);
  EXPECT_EQ(o.cfg.stats, stats_format::json);
  EXPECT_EQ(o.cfg.log_file, "/tmp/x-%p.log");
  EXPECT_TRUE(o.cfg.verbose);
  EXPECT_EQ(o.cfg.log_level, log::level::trace);
}

TEST(ParseOptions, MalformedValueNamesVariableValueAndForms) {
  parse_outcome o = parse_options({"OVERSUB_DEVICE_LIMIT=12XB", "OVERSUB_MODE=fast"});
  ASSERT_EQ(o.errors.size(), 2u);
  EXPECT_EQ(o.errors[0].name, "OVERSUB_DEVICE_LIMIT");
  EXPECT_EQ(o.errors[0].value, "12XB");
  const std::string message = describe(o.errors[0]);
  EXPECT_EQ(message.find("OVERSUB_DEVICE_LIMIT='12XB' is not valid: "), 0u) << message;
  EXPECT_NE(message.find("12GiB"), std::string::npos) << message;
  EXPECT_NE(describe(o.errors[1]).find("off | track"), std::string::npos);
}

// A byte count below the minimum: the message says which bound it crosses, and
// every example of an accepted form it lists is itself accepted.
TEST(ParseOptions, DeviceLimitBelowTheMinimumSaysSo) {
  parse_outcome o = parse_options({"OVERSUB_DEVICE_LIMIT=4096"});
  ASSERT_EQ(o.errors.size(), 1u);
  const std::string message = describe(o.errors[0]);
  EXPECT_EQ(message.find("OVERSUB_DEVICE_LIMIT='4096' is not valid: 4096 bytes is below the "
                         "minimum of 1 MiB (1048576 bytes); a fraction of the device is "
                         "written with a decimal point, as 0.5. Accepted: none | "),
            0u)
      << message;
  EXPECT_EQ(message.find("4096 (bytes)"), std::string::npos) << message;
  device_limit l;
  for (const char* example : {"none", "12GiB", "512MiB", "1.5GB", "1048576", "1MiB", "1024TiB",
                              "0.75", "2.0", "16.0"}) {
    EXPECT_TRUE(parse_device_limit(example, l)) << example;
  }
  for (const char* below : {"1048575", "0.0", "16.5", "1025TiB"}) {
    EXPECT_FALSE(parse_device_limit(below, l)) << below;
  }
  EXPECT_EQ(refusal_reason("OVERSUB_DEVICE_LIMIT", "16.5"),
            "a fraction must be above 0 and at most 16.0");
  EXPECT_EQ(refusal_reason("OVERSUB_DEVICE_LIMIT", "1025TiB"), "above the maximum of 1024 TiB");
  EXPECT_EQ(refusal_reason("OVERSUB_DEVICE_LIMIT", "lots"), "neither none, a size nor a fraction");
  EXPECT_EQ(refusal_reason("OVERSUB_HOST_LIMIT", "1.5"), "a fraction must be above 0 and at most 1.0");
  EXPECT_EQ(refusal_reason("OVERSUB_HOST_LIMIT", "1K"),
            "1024 bytes is below the minimum of 1 MiB (1048576 bytes)");
  EXPECT_EQ(refusal_reason("OVERSUB_POOL_LARGE", "1MiB"),
            "1048576 bytes is below the minimum of 2 MiB (2097152 bytes)");
  EXPECT_EQ(refusal_reason("OVERSUB_MODE", "fast"), "not one of the accepted forms");
}

TEST(ParseOptions, UnknownNameGetsClosest) {
  parse_outcome o = parse_options({"OVERSUB_DEVICE_LIMT=1GiB", "OVERSUB_STAT=1",
                                   "OVERSUB_MOD=off", "OVERSUB_LOGFILE=x"});
  ASSERT_EQ(o.unknown.size(), 4u);
  EXPECT_EQ(o.unknown[0].closest, "OVERSUB_DEVICE_LIMIT");
  EXPECT_EQ(o.unknown[1].closest, "OVERSUB_STATS");
  EXPECT_EQ(o.unknown[2].closest, "OVERSUB_MODE");
  EXPECT_EQ(o.unknown[3].closest, "OVERSUB_LOG_FILE");
  EXPECT_EQ(o.cfg.mode, run_mode::track);  // the misspelt one is not applied
}

TEST(EditDistance, Classic) {
  EXPECT_EQ(edit_distance("", ""), 0u);
  EXPECT_EQ(edit_distance("abc", ""), 3u);
  EXPECT_EQ(edit_distance("kitten", "sitting"), 3u);
  EXPECT_EQ(edit_distance("OVERSUB_LOG", "OVERSUB_LOG"), 0u);
  EXPECT_EQ(edit_distance("flaw", "lawn"), 2u);
}

TEST(ClosestName, PicksNearest) {
  EXPECT_EQ(closest_option_name("OVERSUB_VERBOS"), "OVERSUB_VERBOSE");
  EXPECT_EQ(closest_option_name("OVERSUB_STATS_FIL"), "OVERSUB_STATS_FILE");
  EXPECT_EQ(closest_option_name("OVERSUB_LIMIT"), "OVERSUB_DEVICE_LIMIT");
  EXPECT_EQ(closest_option_name("OVERSUB_FILE"), "OVERSUB_LOG_FILE");
  EXPECT_EQ(closest_option_name("OVERSUB_LOGG"), "OVERSUB_LOG");
}

TEST(DescribeConfig, OneLinePerOption) {
  parse_outcome o = parse_options({"OVERSUB_DEVICE_LIMIT=0.5"});
  std::vector<std::string> lines = describe_config(o.cfg);
  ASSERT_EQ(lines.size(), option_table().size());
  EXPECT_EQ(lines[0], "OVERSUB_MODE=track");
  EXPECT_EQ(lines[1], "OVERSUB_DEVICE_LIMIT=0.5");
}

// A fraction is printed as written: OVERSUB_DEVICE_LIMIT=16 (bytes, refused) and
// =16.0 (sixteen times the device) must not read the same.
TEST(DescribeConfig, FractionsKeepTheirDecimalPoint) {
  for (const auto& [given, shown] : std::vector<std::pair<std::string, std::string>>{
           {"16.0", "16.0"}, {"1.", "1.0"}, {"2.50", "2.5"}, {"0.75", "0.75"}}) {
    parse_outcome o = parse_options({"OVERSUB_DEVICE_LIMIT=" + given, "OVERSUB_HOST_LIMIT=1.0"});
    ASSERT_TRUE(o.errors.empty()) << given;
    const std::vector<std::string> lines = describe_config(o.cfg);
    EXPECT_EQ(lines[1], "OVERSUB_DEVICE_LIMIT=" + shown);
    EXPECT_NE(std::find(lines.begin(), lines.end(), "OVERSUB_HOST_LIMIT=1.0"), lines.end());
    // What is printed reads back as the same limit.
    parse_outcome again = parse_options({lines[1]});
    EXPECT_EQ(again.cfg.limit, o.cfg.limit) << lines[1];
  }
}


TEST(PoolOptions, ModesOrderedAndPoolSettings) {
  run_mode m = run_mode::off;
  EXPECT_TRUE(parse_mode("pool", m));
  EXPECT_EQ(m, run_mode::pool);
  EXPECT_TRUE(run_mode::off < run_mode::track && run_mode::track < run_mode::pool);
  parse_outcome o = parse_options({"OVERSUB_MODE=pool", "OVERSUB_POOL=planned",
                                   "OVERSUB_HOST_LIMIT=16GiB", "OVERSUB_POOL_LARGE=64M"});
  ASSERT_TRUE(o.errors.empty());
  EXPECT_EQ(o.cfg.mode, run_mode::pool);
  EXPECT_EQ(o.cfg.pool, pool_kind::planned);
  EXPECT_EQ(o.cfg.host.value.how, device_limit::kind::bytes);
  EXPECT_EQ(o.cfg.host.value.bytes, 16ULL << 30);
  EXPECT_EQ(o.cfg.pool_large_bytes, 64ULL << 20);
  parse_outcome d = parse_options({});
  EXPECT_EQ(d.cfg.pool, pool_kind::online);
  EXPECT_EQ(d.cfg.host.value.how, device_limit::kind::fraction);
  EXPECT_DOUBLE_EQ(d.cfg.host.value.fraction, 0.5);
  EXPECT_EQ(d.cfg.pool_large_bytes, 32ULL << 20);
  parse_outcome bad = parse_options({"OVERSUB_POOL=offline", "OVERSUB_HOST_LIMIT=1.5",
                                     "OVERSUB_POOL_LARGE=1M"});
  ASSERT_EQ(bad.errors.size(), 3u);
  EXPECT_EQ(bad.errors[0].name, "OVERSUB_POOL");
  EXPECT_EQ(bad.errors[1].name, "OVERSUB_HOST_LIMIT");
  EXPECT_EQ(bad.errors[2].name, "OVERSUB_POOL_LARGE");
  host_limit none;
  EXPECT_TRUE(parse_host_limit("none", none));
  EXPECT_EQ(none.value.how, device_limit::kind::none);
}


TEST(ParseOptions, ProfilingOptions) {
  parse_outcome o = parse_options({"OVERSUB_PROFILE_OUT=/tmp/m-%p.oprof",
                                   "OVERSUB_ITERATION_MARKER=adam_step",
                                   "OVERSUB_PROFILE_ITERATIONS=3", "OVERSUB_PROFILE_IN=in.oprof"});
  EXPECT_TRUE(o.errors.empty());
  EXPECT_TRUE(o.unknown.empty());
  EXPECT_EQ(o.cfg.profile_out, "/tmp/m-%p.oprof");
  EXPECT_EQ(o.cfg.iteration_marker, "adam_step");
  EXPECT_EQ(o.cfg.profile_iterations, 3u);
  EXPECT_EQ(o.cfg.profile_in, "in.oprof");
  parse_outcome d = parse_options({});
  EXPECT_TRUE(d.cfg.profile_out.empty());
  EXPECT_EQ(d.cfg.profile_iterations, 0u);
}

// See Note [One profile path] in common/options.h.
TEST(ParseOptions, OneProfilePathIsReadWhenThereAndWrittenOtherwise) {
  const std::string path = ::testing::TempDir() + "oversub_one_profile_path.oprof";
  std::remove(path.c_str());
  parse_outcome o = parse_options({"OVERSUB_PROFILE=" + path});
  ASSERT_TRUE(o.errors.empty());
  ASSERT_TRUE(o.unknown.empty());
  config absent = o.cfg;
  resolve_profile_path(absent);
  EXPECT_EQ(absent.profile_out, path);
  EXPECT_TRUE(absent.profile_in.empty());
  std::FILE* f = std::fopen(path.c_str(), "w");
  ASSERT_NE(f, nullptr);
  std::fclose(f);
  config present = o.cfg;
  resolve_profile_path(present);
  EXPECT_EQ(present.profile_in, path);
  EXPECT_TRUE(present.profile_out.empty());
  // An explicit OVERSUB_PROFILE_IN wins.
  parse_outcome both = parse_options({"OVERSUB_PROFILE=" + path, "OVERSUB_PROFILE_IN=mine.oprof"});
  resolve_profile_path(both.cfg);
  EXPECT_EQ(both.cfg.profile_in, "mine.oprof");
  EXPECT_TRUE(both.cfg.profile_out.empty());
  std::remove(path.c_str());
  config none = parse_options({}).cfg;
  resolve_profile_path(none);
  EXPECT_TRUE(none.profile_in.empty());
  EXPECT_TRUE(none.profile_out.empty());
}

TEST(ParseOptions, ProfileIterationsRejectsNonCounts) {
  std::uint64_t n = 7;
  EXPECT_TRUE(parse_count("0", n));
  EXPECT_EQ(n, 0u);
  EXPECT_TRUE(parse_count(" 1000000 ", n));
  EXPECT_EQ(n, 1000000u);
  EXPECT_FALSE(parse_count("1000001", n));
  EXPECT_FALSE(parse_count("-1", n));
  EXPECT_FALSE(parse_count("3x", n));
  EXPECT_FALSE(parse_count("", n));
  parse_outcome o = parse_options({"OVERSUB_PROFILE_ITERATIONS=many"});
  ASSERT_EQ(o.errors.size(), 1u);
  EXPECT_NE(describe(o.errors[0]).find("OVERSUB_PROFILE_ITERATIONS='many'"), std::string::npos);
}

TEST(ClosestName, ProfilingNames) {
  EXPECT_EQ(closest_option_name("OVERSUB_PROFILE"), "OVERSUB_PROFILE_OUT");
  EXPECT_EQ(closest_option_name("OVERSUB_MARKER"), "OVERSUB_ITERATION_MARKER");
  EXPECT_EQ(closest_option_name("OVERSUB_PROFILE_ITERATION"), "OVERSUB_PROFILE_ITERATIONS");
}

TEST(SwapOptions, ModePolicyPrefetchAndThePlannedPoolDefault) {
  run_mode m{};
  ASSERT_TRUE(parse_mode("swap", m));
  EXPECT_TRUE(run_mode::pool < run_mode::swap);
  parse_outcome o = parse_options({"OVERSUB_MODE=swap", "OVERSUB_POLICY=vdnn-all",
                                   "OVERSUB_PREFETCH=8"});
  ASSERT_TRUE(o.errors.empty());
  EXPECT_EQ(o.cfg.mode, run_mode::swap);
  EXPECT_EQ(o.cfg.policy, swap_policy::vdnn_all);
  EXPECT_EQ(o.cfg.prefetch_launches, 8u);
  EXPECT_EQ(o.cfg.pool, pool_kind::planned) << "swap mode plans its pool by default";
  parse_outcome explicit_online =
      parse_options({"OVERSUB_MODE=swap", "OVERSUB_POOL=online"});
  EXPECT_EQ(explicit_online.cfg.pool, pool_kind::online) << "an explicit OVERSUB_POOL wins";
  parse_outcome d = parse_options({});
  EXPECT_EQ(d.cfg.policy, swap_policy::cost);
  EXPECT_EQ(d.cfg.prefetch_launches, 0u);
  EXPECT_TRUE(d.cfg.tune) << "the schedule's variants are timed unless told not to";
  EXPECT_TRUE(parse_options({"OVERSUB_TUNE=1"}).cfg.tune);
  EXPECT_TRUE(parse_options({"OVERSUB_TUNE=on"}).cfg.tune);
  EXPECT_EQ(d.cfg.pool, pool_kind::online);
  EXPECT_FALSE(parse_options({"OVERSUB_TUNE=off"}).cfg.tune);
  EXPECT_FALSE(parse_options({"OVERSUB_TUNE=0"}).cfg.tune);
  parse_outcome um = parse_options({"OVERSUB_MODE=um", "OVERSUB_POLICY=naive"});
  ASSERT_TRUE(um.errors.empty());
  EXPECT_EQ(um.cfg.mode, run_mode::um);
  EXPECT_EQ(um.cfg.policy, swap_policy::naive);
  EXPECT_TRUE(run_mode::swap < run_mode::um);
  for (const char* bad : {"OVERSUB_POLICY=belady", "OVERSUB_PREFETCH=0",
                          "OVERSUB_PREFETCH=-3", "OVERSUB_PREFETCH=1000000", "OVERSUB_TUNE=auto",
                          "OVERSUB_TUNE=2"}) {
    parse_outcome b = parse_options({bad});
    EXPECT_EQ(b.errors.size(), 1u) << bad;
  }
}

}  // namespace
}  // namespace oversub
