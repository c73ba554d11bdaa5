// Tests of the counters and the exit report: gauge arithmetic and peaks under
// threads, the JSON shape scripts rely on, the text form.
#include "common/stats.h"

#include <gtest/gtest.h>

#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <iterator>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "common/log.h"
#include "common/options.h"
#include "report_twins.h"

namespace oversub::stats {
namespace {

class StatsTest : public ::testing::Test {
 protected:
  void SetUp() override { reset_all(); }
  void TearDown() override { reset_all(); }
};

TEST_F(StatsTest, GaugeCurrentPeakTotal) {
  counter c;
  c.add(10);
  c.add(5);
  c.sub(12);
  c.add(2);
  EXPECT_EQ(c.current(), 5u);
  EXPECT_EQ(c.peak(), 15u);
  EXPECT_EQ(c.total(), 17u);
}

TEST_F(StatsTest, ConcurrentAddsLoseNothing) {
  counter c;
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 10000; ++i) {
        c.add(3);
        c.sub(3);
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(c.current(), 0u);
  EXPECT_EQ(c.total(), 8u * 10000 * 3);
  EXPECT_GE(c.peak(), 3u);
  EXPECT_LE(c.peak(), 8u * 3);
}

TEST_F(StatsTest, JsonShape) {
  static const char* const names[] = {"cudaMalloc", "cudaFree", "cudaLaunchKernel"};
  set_entry_points(names, 3);
  global().allocations.add(1);
  global().device_bytes.add(4096);
  global().launches.count(7);
  count_call(0);
  count_call(2);
  count_call(2);
  config cfg;
  cfg.limit = device_limit{device_limit::kind::bytes, 1ull << 30, 0.0};
  const std::string json = format_json(cfg, 42);
  EXPECT_EQ(json.rfind(R"({"oversub_stats":1,"pid":42,"mode":"track","device_limit":"1073741824",)", 0),
            0u)
      << json;
  EXPECT_NE(json.find(R"("allocations":{"current":1,"peak":1,"total":1})"), std::string::npos);
  EXPECT_NE(json.find(R"("device_bytes":{"current":4096,"peak":4096,"total":4096})"),
            std::string::npos);
  EXPECT_NE(json.find(R"("launches":{"total":7})"), std::string::npos);
  EXPECT_NE(json.find(R"("calls":{"cudaMalloc":1,"cudaLaunchKernel":2}})"), std::string::npos)
      << json;
  EXPECT_EQ(json.back(), '\n');
  EXPECT_EQ(json.find('\n'), json.size() - 1);  // one line
}

TEST_F(StatsTest, TextNamesEveryCounter) {
  config cfg;
  const std::string text = format_text(cfg, 7);
  for (const char* name : {"allocations", "frees", "device_bytes", "launches", "syncs"}) {
    EXPECT_NE(text.find(name), std::string::npos) << name;
  }
  EXPECT_EQ(text.rfind("oversub: stats (pid 7, mode track, device limit none)\n", 0), 0u) << text;
}

// OVERSUB_STATS_FILE that cannot be opened: a warning naming the file and the reason
// (as for OVERSUB_LOG_FILE), and the statistics where the log goes.
TEST_F(StatsTest, UnopenableStatsFileWarnsAndFallsBackToTheLog) {
  char path[] = "/tmp/oversub_stats_log_XXXXXX";
  const int log_fd = ::mkstemp(path);
  ASSERT_GE(log_fd, 0);
  log::set_fd(log_fd);
  config cfg;
  cfg.stats = stats_format::text;
  cfg.stats_file = "/nonexistent-oversub-dir/stats.txt";
  report(cfg);
  log::set_fd(-1);
  std::ifstream in(path);
  const std::string got((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  ::close(log_fd);
  std::remove(path);
  EXPECT_NE(got.find("oversub: warning: cannot open "
                     "OVERSUB_STATS_FILE='/nonexistent-oversub-dir/stats.txt' (No such file or "
                     "directory); printing the statistics to the log (OVERSUB_LOG_FILE)\n"),
            std::string::npos)
      << got;
  EXPECT_NE(got.find(fmt::format("oversub: stats (pid {}, mode track", ::getpid())),
            std::string::npos)
      << got;
}

TEST_F(StatsTest, FractionLimitKeepsItsDecimalPoint) {
  config cfg;
  cfg.limit = device_limit{device_limit::kind::fraction, 0, 16.0};
  EXPECT_NE(format_text(cfg, 1).find("device limit 16.0 of the device"), std::string::npos);
  EXPECT_NE(format_json(cfg, 1).find(R"("device_limit":"16.0")"), std::string::npos);
}

// Sections of every kind of field, nested as the pool's are (device0, its swap and
// planned objects after the device's own members).
bool pool_like_section(section& out) {
  out.begin("pool device 0", {"device0"})
      .bytes("reserved_bytes", std::uint64_t{80} << 30)
      .count("live_blocks", 3)
      .nanoseconds("setup_ns", 2000)
      .nanoseconds("iteration_ns", 8011000);
  out.begin("swap device 0", {"device0", "swap"})
      .bytes("capacity_bytes", 10u << 20)
      .count("evictions", 130)
      .flag("concurrent_access", false);
  out.begin("pool planned", {"device0", "planned"}).flag("learned", true).count("served", 136);
  return true;
}

bool schedule_like_section(section& out) {
  out.begin("schedule")
      .count("learned", 1)
      .word("cupti", "activity")
      .gbps("h2d_gbps", 25.5e9)
      .list("durations_ns", 3, "1,2,3")
      .list("trials", 1, R"({"rotation":2,"lend":true})");
  return true;
}

bool refusing_section(section& out) {
  out.begin("pool device 1", {"device1"}).count("grows", 1);
  return false;  // as when a lock is held: nothing of it is printed
}

class StatsReportTest : public StatsTest {
 protected:
  void TearDown() override {
    set_pool_section(nullptr);
    set_schedule_section(nullptr);
    StatsTest::TearDown();
  }
};

TEST_F(StatsReportTest, TextAndJsonAreWrittenFromOneList) {
  static const char* const names[] = {"cudaMalloc", "__cudaLaunchKernel"};
  set_entry_points(names, 2);
  global().allocations.add(3);
  global().allocations.sub(1);
  global().device_bytes.add(3u << 20);
  global().frees.count(1);
  count_call(0);
  count_call(1);
  set_pool_section(&pool_like_section);
  set_schedule_section(&schedule_like_section);
  for (const device_limit& limit : {device_limit{},
                                    device_limit{device_limit::kind::bytes, 1ull << 30, 0.0},
                                    device_limit{device_limit::kind::fraction, 0, 0.75}}) {
    config cfg;
    cfg.limit = limit;
    const std::vector<line> lines = report_lines(cfg, 42);
    const std::string text = render_text(lines);
    const std::string json = render_json(lines);
    std::size_t fields = 0;
    EXPECT_EQ(testing::twin_problems(text, json, &fields), std::vector<std::string>{})
        << text << json;
    EXPECT_GE(fields, 50u);  // the counters, the calls and the sections above
    EXPECT_EQ(format_text(cfg, 42), text);
    EXPECT_EQ(format_json(cfg, 42), json);
  }
  config cfg;
  const std::string text = format_text(cfg, 42);
  const std::string json = format_json(cfg, 42);
  EXPECT_NE(json.find(R"("pool":{"device0":{"reserved_bytes":85899345920,"live_blocks":3,)"
                      R"("setup_ns":2000,"iteration_ns":8011000,"swap":{"capacity_bytes":10485760,)"
                      R"("evictions":130,"concurrent_access":false},"planned":{"learned":true,)"
                      R"("served":136}}},"schedule":{"learned":1,"cupti":"activity",)"
                      R"("h2d_gbps":25.500,"durations_ns":[1,2,3],"trials":[{"rotation":2,)"
                      R"("lend":true}]}})"),
            std::string::npos)
      << json;
  EXPECT_NE(text.find("oversub:   pool device 0: reserved 80.00 GiB  live blocks 3  "
                      "setup 2000 ns  iteration 8.011 ms\n"
                      "oversub:   swap device 0: capacity 10.00 MiB  evictions 130  "
                      "concurrent access no\n"
                      "oversub:   pool planned: learned yes  served 136\n"
                      "oversub:   schedule: learned 1  cupti activity  h2d 25.500 GB/s  "
                      "durations 3 entries  trials 1 entry\n"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("oversub:   calls: cudaMalloc 1  __cudaLaunchKernel 1\n"), std::string::npos)
      << text;
  EXPECT_NE(text.find("oversub:   frees            1\n"), std::string::npos) << text;
  EXPECT_NE(text.find("oversub:   device_bytes     current 3.00 MiB  peak 3.00 MiB  total 3.00 MiB\n"),
            std::string::npos)
      << text;

  // The check itself: a value changed in one form, or a field in one form only, fails.
  std::string other = text;
  other.replace(other.find("evictions 130"), 13, "evictions 131");
  EXPECT_EQ(testing::twin_problems(other, json).size(), 1u);
  other = text;
  other.replace(other.find("  live blocks 3"), 15, "");
  EXPECT_EQ(testing::twin_problems(other, json).size(), 1u);
  other = text;
  other.replace(other.find("served 136"), 10, "served 136  spilled 2");
  EXPECT_EQ(testing::twin_problems(other, json).size(), 1u);
}

TEST_F(StatsReportTest, ASectionThatGivesUpAddsNothing) {
  set_pool_section(&refusing_section);
  config cfg;
  EXPECT_EQ(format_json(cfg, 1).find("\"pool\""), std::string::npos);
  EXPECT_EQ(format_text(cfg, 1).find("pool device"), std::string::npos);
}

}  // namespace
}  // namespace oversub::stats
