// The whole exit report of a real run, in both forms: simtrain under liboversub on
// simgpu, in swap and in um mode with the planned pool, long enough that the schedule
// is learned and variants are being timed. Every field of the text has its JSON twin
// with the same value and every JSON member is in the text (report_twins.h), across
// the counters, the calls, the pool's section (device, swap or um, planned) and the
// schedule's.
//
// One process prints one form, so the text comes from a second run of the same job:
// simgpu's virtual time makes the figures repeat run after run. The check trusts
// that only where a third run, again in JSON, repeats the first to the last figure
// (the pid aside); otherwise it runs the three again.
#include <gtest/gtest.h>

#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <regex>
#include <tuple>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "report_twins.h"

extern char** environ;

namespace oversub::stats {
namespace {

std::string slurp(const std::string& path) {
  std::ifstream in(path);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

// The report simtrain's run under liboversub writes in format (json or text); empty
// when the run failed.
std::string run(const std::string& mode, const std::string& format) {
  const char* simtrain = std::getenv("REPORT_TEST_SIMTRAIN");
  const char* lib = std::getenv("REPORT_TEST_LIB");
  if (simtrain == nullptr || lib == nullptr) return {};
  char path[] = "/tmp/oversub_report_test_XXXXXX";
  const int fd = ::mkstemp(path);
  if (fd < 0) return {};
  ::close(fd);
  std::vector<std::string> env;
  for (char** e = environ; *e != nullptr; ++e) {
    const std::string_view v(*e);
    if (!v.starts_with("OVERSUB_") && !v.starts_with("LD_PRELOAD=") &&
        !v.starts_with("SIMGPU_MEMORY=")) {
      env.emplace_back(v);
    }
  }
  for (const std::string& v : std::vector<std::string>{
           "LD_PRELOAD=" + std::string(lib), "SIMGPU_MEMORY=1GiB", "OVERSUB_DEVICE_LIMIT=4MiB",
           "OVERSUB_POOL=planned", "OVERSUB_MODE=" + mode, "OVERSUB_STATS=" + format,
           // The twins compare counts, and the mover thread's share of the moves
           // depends on how the two threads interleave: every remap inline here.
           "OVERSUB_MOVER=inline", "OVERSUB_STATS_FILE=" + std::string(path)}) {
    env.push_back(v);
  }
  std::vector<char*> envp;
  for (std::string& v : env) envp.push_back(v.data());
  envp.push_back(nullptr);
  std::vector<std::string> args = {simtrain, "--depth", "4",  "--width", "256",
                                   "--batch", "64",     "--iters", "10"};
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, "/dev/null", O_WRONLY, 0);
  pid_t pid = 0;
  int status = -1;
  if (posix_spawn(&pid, simtrain, &actions, nullptr, argv.data(), envp.data()) == 0) {
    ::waitpid(pid, &status, 0);
  }
  posix_spawn_file_actions_destroy(&actions);
  std::string report = WIFEXITED(status) && WEXITSTATUS(status) == 0 ? slurp(path) : "";
  std::remove(path);
  return report;
}

std::string without_pid(const std::string& json) {
  return std::regex_replace(json, std::regex(R"("pid":[0-9]+)"), R"("pid":0)");
}

// The time spent in each entry point ("call_ns", "time in calls") is wall time, which
// no two runs repeat: its values are set to 0 in both forms, its keys kept.
std::string without_wall_times(const std::string& report) {
  const std::regex json_block(R"("call_ns":\{[^}]*\})");
  const std::regex text_line(R"(oversub:   time in calls: [^\n]*)");
  const std::regex json_value(R"(:[0-9]+)");
  const std::regex text_value(R"( [0-9.]+ (ns|ms|s)\b)");
  std::string result = report;
  for (const auto& [block, value, zero] : {std::tuple{&json_block, &json_value, ":0"},
                                           std::tuple{&text_line, &text_value, " 0 ns"}}) {
    std::string rebuilt;
    std::string rest = result;
    std::smatch m;
    while (std::regex_search(rest, m, *block)) {
      rebuilt += m.prefix().str() + std::regex_replace(m.str(), *value, zero);
      rest = m.suffix().str();
    }
    result = rebuilt + rest;
  }
  return result;
}

void expect_twins(const std::string& mode) {
  for (int attempt = 0; attempt < 3; ++attempt) {
    const std::string json = without_wall_times(run(mode, "json"));
    const std::string text = without_wall_times(run(mode, "text"));
    const std::string again = without_wall_times(run(mode, "json"));
    ASSERT_FALSE(json.empty() || text.empty() || again.empty())
        << "simtrain failed under liboversub (OVERSUB_MODE=" << mode << ")";
    if (without_pid(json) != without_pid(again)) continue;  // figures that did not repeat
    // The text's run has a pid of its own.
    std::smatch pid;
    ASSERT_TRUE(std::regex_search(json, pid, std::regex(R"("pid":([0-9]+))"))) << json;
    const std::string same_pid =
        std::regex_replace(text, std::regex(R"(^oversub: stats \(pid [0-9]+)"),
                           "oversub: stats (pid " + pid[1].str());
    std::size_t fields = 0;
    EXPECT_EQ(testing::twin_problems(same_pid, json, &fields), std::vector<std::string>{})
        << text << json;
    // Populated: each section, a learned schedule, variants timed.
    for (const std::string& line : std::vector<std::string>{
             "oversub:   pool device 0: ", fmt::format("oversub:   {} device 0: ", mode),
             "oversub:   pool planned: ", "oversub:   schedule: learned 1  ",
             "oversub:   calls: "}) {
      EXPECT_NE(text.find(line), std::string::npos) << line << "\n" << text;
    }
    EXPECT_EQ(text.find("  trials 0 entries"), std::string::npos) << text;
    EXPECT_GT(fields, 90u);
    return;
  }
  FAIL() << "three times the JSON of two runs of the same job differed";
}

TEST(Report, SwapModesTextAndJsonAreTwins) { expect_twins("swap"); }

TEST(Report, UmModesTextAndJsonAreTwins) { expect_twins("um"); }

}  // namespace
}  // namespace oversub::stats
