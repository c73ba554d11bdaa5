// Tests of the logging funnel: prefix and level tags, the level threshold, lines
// cut at the fixed buffer, and one write per message.
#include "common/log.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <string>

namespace oversub::log {
namespace {

class LogTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_EQ(::pipe(fds_), 0);
    set_fd(fds_[1]);
    set_level(level::info);
  }
  void TearDown() override {
    set_fd(-1);
    set_level(level::warn);
    ::close(fds_[0]);
    ::close(fds_[1]);
  }
  std::string drain() {
    ::close(fds_[1]);
    fds_[1] = ::dup(2);
    std::string out;
    char buf[4096];
    ssize_t n;
    while ((n = ::read(fds_[0], buf, sizeof buf)) > 0) out.append(buf, static_cast<size_t>(n));
    return out;
  }
  int fds_[2] = {-1, -1};
};

TEST_F(LogTest, PrefixesAndLevels) {
  warn("limit {} passed", 42);
  info("plain {}", "info");
  error("bad");
  debug("hidden at level info");
  set_fd(-1);
  EXPECT_EQ(drain(),
            "oversub: warning: limit 42 passed\n"
            "oversub: plain info\n"
            "oversub: error: bad\n");
}

TEST_F(LogTest, LongLinesAreCut) {
  warn("{}", std::string(5000, 'x'));
  set_fd(-1);
  const std::string out = drain();
  EXPECT_EQ(out.size(), 1024u);
  EXPECT_EQ(out.substr(out.size() - 4), "...\n");
  EXPECT_EQ(out.rfind("oversub: warning: xxx", 0), 0u);
}

TEST_F(LogTest, ThresholdIsCheap) {
  set_level(level::error);
  EXPECT_TRUE(enabled(level::error));
  EXPECT_FALSE(enabled(level::warn));
  set_level(level::trace);
  EXPECT_TRUE(enabled(level::trace));
}

}  // namespace
}  // namespace oversub::log
