// The recorder: the iteration it picks (automatic, marker, api), buffer identity
// (per-iteration buffers by ordinal and size, long-lived ones by address), lifetimes
// in launch positions, durations joined by correlation id, copies placed in order.
#include "profiler/recorder.h"

#include <gtest/gtest.h>

namespace oversub::profiler {
namespace {

constexpr std::uint64_t weights = 0x10000;

// Three launches per step: f(W, A), g(A, B), h(W, B); A and B are allocated in
// the step (at new addresses each time) and freed at its end.
void step(recorder& r, std::uint32_t f, std::uint32_t g, std::uint32_t h, int i,
          std::uint32_t& corr) {
  const std::uint64_t a = 0x100000 + 0x1000 * i;
  const std::uint64_t b = 0x200000 + 0x1000 * i;
  r.on_alloc(a, 256, nullptr, 0);
  r.on_copy(copy_kind::h2d, 256, a, 0);
  const std::uint64_t fa[] = {weights, a};
  r.on_launch(f, fa, 2, ++corr);
  r.on_alloc(b, 512, nullptr, 0);
  const std::uint64_t ga[] = {b, a};
  r.on_launch(g, ga, 2, ++corr);
  r.on_kernel_time(corr, 700);
  r.on_free(a);
  const std::uint64_t ha[] = {weights, b};
  r.on_launch(h, ha, 2, ++corr);
  r.on_free(b);
}

recorder::frame_resolver no_frames() { return {}; }

// A recorder that has seen the weights allocated and knows step()'s three kernels.
struct stepping {
  recorder r;
  std::uint32_t f = 0, g = 0, h = 0;
  std::uint32_t corr = 0;
  stepping() {
    r.on_alloc(weights, 4096, nullptr, 0);
    f = r.add_function("f(float*)");
    g = r.add_function("g(float*)");
    h = r.add_function("h(float*)");
  }
  void step(int i) { ::oversub::profiler::step(r, f, g, h, i, corr); }
};

// See Note [A link rate from large copies only] in profiler/recorder.h: small copies
// give no rate; large ones give bytes over time.
TEST(Recorder, LinkRateFromLargeCopiesOnly) {
  for (const bool large : {false, true}) {
    stepping t;
    for (int i = 0; i < 4; ++i) {
      t.step(i);
      // 16 KiB in 10 us (setup-bound), or 4 MiB in 84 us (50 GB/s).
      t.r.on_copy_time(t.corr, copy_kind::h2d, large ? 4u << 20 : 16u << 10,
                       large ? 83'886 : 10'000);
      t.r.on_copy_time(t.corr, copy_kind::d2h, 4, 5'000);  // a loss read back
    }
    std::string why;
    const auto p = t.r.build({}, true, "prog", no_frames(), &why);
    ASSERT_TRUE(p) << why;
    if (large) {
      EXPECT_NEAR(static_cast<double>(p->device.h2d_bytes_per_s), 50e9, 0.01e9);
    } else {
      EXPECT_EQ(p->device.h2d_bytes_per_s, 0u);
    }
    EXPECT_EQ(p->device.d2h_bytes_per_s, 0u);
  }
}

TEST(Recorder, AutomaticIterationAndBufferIdentity) {
  recorder r;
  const std::uintptr_t site[] = {0x1234, 0x5678};
  r.on_alloc(weights, 4096, site, 2);
  const std::uint32_t f = r.add_function("f(float*)");
  const std::uint32_t g = r.add_function("g(float*)");
  const std::uint32_t h = r.add_function("h(float*)");
  std::uint32_t corr = 0;
  for (int i = 0; i < 4; ++i) step(r, f, g, h, i, corr);
  std::string why;
  const auto p = r.build({}, true, "prog", no_frames(), &why);
  ASSERT_TRUE(p) << why;
  EXPECT_EQ(p->source, iteration_source::automatic);
  ASSERT_EQ(p->launches.size(), 3u);
  EXPECT_EQ(p->strings[p->launches[0].name], "f(float*)");
  EXPECT_EQ(p->first_launch, 6u);  // the last complete step but one
  ASSERT_EQ(p->allocations.size(), 3u);
  const allocation_record& a = p->allocations[0];
  const allocation_record& b = p->allocations[1];
  const allocation_record& w = p->allocations[2];
  EXPECT_EQ(a.ordinal, 0u);
  EXPECT_EQ(a.bytes, 256u);
  EXPECT_EQ(a.address, 0x102000u);
  EXPECT_EQ(a.alloc_at, 0u);
  EXPECT_EQ(a.free_at, 2u);
  EXPECT_EQ(b.ordinal, 1u);
  EXPECT_EQ(b.alloc_at, 1u);
  EXPECT_EQ(b.free_at, 3u);
  EXPECT_TRUE(w.long_lived);
  EXPECT_EQ(w.ordinal, no_index);
  EXPECT_EQ(w.address, weights);
  EXPECT_EQ(w.free_at, no_index);
  EXPECT_EQ(p->launches[0].buffers, (std::vector<std::uint32_t>{0, 2}));
  EXPECT_EQ(p->launches[1].buffers, (std::vector<std::uint32_t>{0, 1}));
  EXPECT_EQ(p->launches[2].buffers, (std::vector<std::uint32_t>{1, 2}));
  EXPECT_EQ(p->launches[1].duration_ns, 700u);
  EXPECT_EQ(p->launches[0].duration_ns, 0u);
  EXPECT_EQ(p->launches[1].correlation_id, 8u);
  ASSERT_EQ(p->copies.size(), 1u);
  EXPECT_EQ(p->copies[0].before_launch, 0u);
  EXPECT_EQ(p->copies[0].buffer, 0u);
  EXPECT_EQ(p->device.iteration_kernel_ns, 700u);
}

// See Note [A kernel's own duration] in profiler/recorder.cc: g took 900, 700, 800 and
// 1000 ns in the four steps (faults, say, in all but one); the profile's step (the third)
// gives it 700, the shortest at its place up to that step, and the iteration's kernel
// time with it.
TEST(Recorder, ALaunchTakesItsShortestDurationAtItsPlace) {
  stepping t;
  const std::uint64_t extra[] = {200, 0, 100, 300};
  for (int i = 0; i < 4; ++i) {
    t.step(i);
    t.r.on_kernel_time(t.corr - 1, extra[i]);  // g's
  }
  std::string why;
  const auto p = t.r.build({}, true, "prog", no_frames(), &why);
  ASSERT_TRUE(p) << why;
  EXPECT_EQ(p->first_launch, 6u);
  EXPECT_EQ(p->launches[1].duration_ns, 700u);
  EXPECT_EQ(p->launches[0].duration_ns, 0u);  // never timed
  EXPECT_EQ(p->device.iteration_kernel_ns, 700u);
  // Marked iterations: only those of the profile's length in a row count. The first
  // has one launch more (g took 700 ns there, at the place g has later), the second and
  // third took 1000 and 800: the third's profile gives g 800.
  stepping m;
  m.r.on_iteration_begin();
  const std::uint64_t lone[] = {weights};
  m.r.on_launch(m.g, lone, 1, ++m.corr);
  const std::uint64_t later[] = {0, 300, 100};
  for (int i = 0; i < 3; ++i) {
    if (i > 0) m.r.on_iteration_begin();
    m.step(i);
    m.r.on_kernel_time(m.corr - 1, later[i]);
  }
  m.r.on_iteration_begin();
  const auto marked = m.r.build({}, true, "prog", no_frames(), &why);
  ASSERT_TRUE(marked) << why;
  ASSERT_EQ(marked->launches.size(), 3u);
  EXPECT_EQ(marked->first_launch, 7u);
  EXPECT_EQ(marked->launches[1].duration_ns, 800u);
}

// See Note [A launch whose buffers are not known] in profiler/profile_format.h: a
// launch recorded as unreadable is marked in the profile, the others are not.
TEST(Recorder, UnreadableLaunchesAreMarked) {
  recorder r;
  r.on_alloc(weights, 4096, nullptr, 0);
  r.on_alloc(0x50000, 64, nullptr, 0);  // named by no readable launch
  const std::uint32_t f = r.add_function("f(float*)");
  const std::uint32_t u = r.add_function("opaque");
  for (int i = 0; i < 4; ++i) {
    const std::uint64_t fa[] = {weights};
    r.on_launch(f, fa, 1, 0);
    r.on_launch(u, nullptr, 0, 0, true);
    r.on_launch(u, nullptr, 0, 0, true);
  }
  std::string why;
  const auto p = r.build({}, false, "prog", no_frames(), &why);
  ASSERT_TRUE(p) << why;
  ASSERT_EQ(p->launches.size(), 3u);
  int marked = 0;
  for (const launch_record& l : p->launches) {
    const bool opaque = p->strings[l.name] == "opaque";
    EXPECT_EQ(l.unreadable(), opaque);
    EXPECT_EQ(l.flags, opaque ? launch_unreadable : 0);
    EXPECT_EQ(l.buffers.empty(), opaque);
    marked += l.unreadable() ? 1 : 0;
  }
  EXPECT_EQ(marked, 2);
  // Every allocation live at a marked launch is in the profile: it may be used.
  ASSERT_EQ(p->allocations.size(), 2u);
  EXPECT_EQ(p->allocations[0].address, weights);
  EXPECT_EQ(p->allocations[1].address, 0x50000u);
}

TEST(Recorder, MarkerAndApiMarks) {
  recorder by_marker("g(");
  recorder by_api;
  for (recorder* r : {&by_marker, &by_api}) {
    const std::uint32_t f = r->add_function("f(float*)");
    const std::uint32_t g = r->add_function("g(float*)");
    const std::uint32_t h = r->add_function("h(float*)");
    std::uint32_t corr = 0;
    for (int i = 0; i < 3; ++i) {
      if (r == &by_api) r->on_iteration_begin();
      step(*r, f, g, h, i, corr);
    }
  }
  std::string why;
  const auto m = by_marker.build({}, true, "", no_frames(), &why);
  ASSERT_TRUE(m) << why;
  EXPECT_EQ(m->source, iteration_source::marker);
  EXPECT_EQ(m->marker, "g(");
  ASSERT_EQ(m->launches.size(), 3u);
  EXPECT_EQ(m->strings[m->launches[0].name], "g(float*)");
  EXPECT_EQ(m->iterations_seen, 2u);
  const auto a = by_api.build({}, true, "", no_frames(), &why);
  ASSERT_TRUE(a) << why;
  EXPECT_EQ(a->source, iteration_source::api);
  EXPECT_EQ(a->first_launch, 3u);
  EXPECT_EQ(a->iterations_seen, 2u);
}

TEST(Recorder, NoIterationSaysWhy) {
  recorder r("never");
  const std::uint32_t f = r.add_function("f()");
  r.on_launch(f, nullptr, 0, 1);
  std::string why;
  EXPECT_FALSE(r.build({}, false, "", no_frames(), &why));
  EXPECT_NE(why.find("no repeating sequence"), std::string::npos) << why;
}

TEST(Recorder, CallSitesAreResolvedAndOwnFramesSkipped) {
  recorder r;
  const std::uintptr_t site[] = {0x1, 0x2, 0x3};
  r.on_alloc(weights, 4096, site, 3);
  const std::uint32_t f = r.add_function("f(float*)");
  const std::uint32_t g = r.add_function("g(float*)");
  const std::uint32_t h = r.add_function("h(float*)");
  std::uint32_t corr = 0;
  for (int i = 0; i < 3; ++i) step(r, f, g, h, i, corr);
  std::string why;
  const auto p = r.build({}, false, "", [](std::uintptr_t pc) {
    recorder::frame_info fi;
    fi.module = pc == 0x1 ? "liboversub.so" : "app";
    fi.offset = pc * 16;
    fi.symbol = pc == 0x3 ? "main" : "";
    fi.skip = pc == 0x1;
    return fi;
  }, &why);
  ASSERT_TRUE(p) << why;
  const allocation_record& w = p->allocations.back();
  ASSERT_NE(w.call_site, no_index);
  const call_site& c = p->call_sites[w.call_site];
  ASSERT_EQ(c.frames.size(), 2u);
  EXPECT_EQ(p->strings[c.frames[0].module], "app");
  EXPECT_EQ(c.frames[0].offset, 0x20u);
  EXPECT_EQ(c.frames[0].symbol, no_index);
  EXPECT_EQ(p->strings[c.frames[1].symbol], "main");
}

}  // namespace
}  // namespace oversub::profiler
