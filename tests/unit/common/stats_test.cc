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

#include "common/log.h"
#include "common/options.h"

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
  const std::string text = format_text(cfg);
  for (const char* name : {"allocations", "frees", "device_bytes", "launches", "syncs"}) {
    EXPECT_NE(text.find(name), std::string::npos) << name;
  }
  EXPECT_EQ(text.rfind("oversub: stats (mode track, device limit none)", 0), 0u) << text;
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
  EXPECT_NE(got.find("oversub: stats (mode track"), std::string::npos) << got;
}

TEST_F(StatsTest, FractionLimitKeepsItsDecimalPoint) {
  config cfg;
  cfg.limit = device_limit{device_limit::kind::fraction, 0, 16.0};
  EXPECT_NE(format_text(cfg).find("device limit 16.0 of the device"), std::string::npos);
  EXPECT_NE(format_json(cfg, 1).find(R"("device_limit":"16.0")"), std::string::npos);
}

}  // namespace
}  // namespace oversub::stats
