// Unit tests of the race detector alone (race_detector.h): no device, no CUDA.
#include "race_detector.h"

#include <gtest/gtest.h>

#include <memory>

namespace simgpu {
namespace {

auto what(const char* s) { return std::make_shared<const std::string>(s); }

class RaceDetector : public ::testing::Test {
 protected:
  // Starts an operation on timeline t as an enqueue does: host program order, then
  // a new epoch.
  void op(int t) {
    d.join(t, race_detector::kHost);
    d.begin_op(t);
  }
  std::vector<race_report> access(int t, uintptr_t lo, uintptr_t hi, bool write,
                                  const char* name = "op") {
    std::vector<race_report> out;
    d.access(t, 1, lo, hi, write, what(name), out);
    return out;
  }
  race_detector d;
};

TEST_F(RaceDetector, UnorderedWriteThenReadOnAnotherTimelineIsARace) {
  int a = d.add_timeline(), b = d.add_timeline();
  op(a);
  EXPECT_TRUE(access(a, 0, 100, true, "kernel 'k' on stream 2").empty());
  op(b);
  auto r = access(b, 50, 150, false, "memcpy DtoH on stream 3");
  ASSERT_EQ(r.size(), 1u);
  EXPECT_EQ(r[0].lo, 50u);
  EXPECT_EQ(r[0].hi, 100u);
  EXPECT_EQ(r[0].first, "write by kernel 'k' on stream 2");
  EXPECT_EQ(r[0].second, "read by memcpy DtoH on stream 3");
}

TEST_F(RaceDetector, EventOrdersTheAccesses) {
  int a = d.add_timeline(), b = d.add_timeline();
  op(a);
  access(a, 0, 100, true);
  vclock event = d.clock(a);  // record after the write
  d.join_clock(b, event);     // wait
  op(b);
  EXPECT_TRUE(access(b, 0, 100, false).empty());
}

TEST_F(RaceDetector, EventRecordedBeforeTheWriteDoesNotOrderIt) {
  int a = d.add_timeline(), b = d.add_timeline();
  vclock event = d.clock(a);
  op(a);
  access(a, 0, 100, true);
  d.join_clock(b, event);
  op(b);
  EXPECT_EQ(access(b, 0, 100, false).size(), 1u);
}

TEST_F(RaceDetector, ReadsDoNotRaceAndDisjointRangesDoNotRace) {
  int a = d.add_timeline(), b = d.add_timeline();
  op(a);
  access(a, 0, 100, false);
  access(a, 200, 300, true);
  op(b);
  EXPECT_TRUE(access(b, 0, 100, false).empty());
  EXPECT_TRUE(access(b, 100, 200, true).empty());
}

TEST_F(RaceDetector, HostSynchronisationOrdersEverythingBefore) {
  int a = d.add_timeline(), b = d.add_timeline();
  op(a);
  access(a, 0, 100, true);
  d.join(race_detector::kHost, a);  // stream synchronise
  op(b);
  EXPECT_TRUE(access(b, 0, 100, true).empty());
  EXPECT_EQ(d.records(), 1u) << "the synchronised record is dropped";
}

TEST_F(RaceDetector, NewerCoveringAccessSupersedesOlderOne) {
  int a = d.add_timeline();
  for (int i = 0; i < 100; ++i) {
    op(a);
    access(a, 0, 100, true);
  }
  EXPECT_EQ(d.records(), 1u);
  op(a);
  access(a, 0, 100, false);  // a read does not supersede a write
  EXPECT_EQ(d.records(), 2u);
}

TEST_F(RaceDetector, HostReleaseOfRangeInUseIsReported) {
  int a = d.add_timeline();
  op(a);
  access(a, 0, 100, false, "kernel 'k' on stream 2");
  std::vector<race_report> out;
  d.host_release(1, 0, 4096, "cuMemUnmap by the host", out);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].second, "cuMemUnmap by the host");
  d.join(race_detector::kHost, a);
  out.clear();
  d.host_release(1, 0, 4096, "cuMemUnmap by the host", out);
  EXPECT_TRUE(out.empty());
}

// Taking write access away races only with unordered writes; taking all access away
// races with reads too; an ordered record is no race.
TEST_F(RaceDetector, HostRestrictionRacesWithWhatItForbids) {
  int a = d.add_timeline();
  op(a);
  access(a, 0, 100, false, "kernel 'r' on stream 2");
  op(a);
  access(a, 200, 300, true, "kernel 'w' on stream 2");
  std::vector<race_report> out;
  d.host_restrict(1, 0, 4096, false, "cuMemSetAccess by the host", out);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].first, "write by kernel 'w' on stream 2");
  EXPECT_EQ(out[0].second, "cuMemSetAccess by the host");
  out.clear();
  d.host_restrict(1, 0, 4096, true, "cuMemSetAccess by the host", out);
  ASSERT_EQ(out.size(), 1u) << "the write was reported once; the read remains";
  EXPECT_EQ(out[0].first, "read by kernel 'r' on stream 2");
  op(a);
  access(a, 0, 8, true);
  d.join(race_detector::kHost, a);
  out.clear();
  d.host_restrict(1, 0, 4096, true, "cuMemSetAccess by the host", out);
  EXPECT_TRUE(out.empty());
}

TEST_F(RaceDetector, TransitiveOrderingThroughAThirdTimeline) {
  int a = d.add_timeline(), b = d.add_timeline(), c = d.add_timeline();
  op(a);
  access(a, 0, 8, true);
  d.join(b, a);
  op(b);
  d.join(c, b);
  op(c);
  EXPECT_TRUE(access(c, 0, 8, true).empty());
}

}  // namespace
}  // namespace simgpu
