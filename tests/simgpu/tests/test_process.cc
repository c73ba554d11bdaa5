// Behaviour that ends or marks a whole process, checked by running simgpu_probe (path
// in $SIMGPU_PROBE) as a subprocess under chosen SIMGPU_* settings:
// - a kernel reading freed or unmapped memory is reported with its name and the
//   address, and the error is the sticky cudaErrorIllegalAddress;
// - so is a kernel reaching freed memory through a pointer held in device memory
//   (not in its footprint), and one reading a VMM range mapped without access;
// - host code touching device memory stops the process with simgpu's message;
// - the race detector reports an unordered cross-stream write/read (exit status 3
//   with SIMGPU_RACE=report, an abort with SIMGPU_RACE=abort, silence with off) and
//   stays silent for the same pair ordered by an event, by the host, by one stream or
//   by the legacy default stream, and for accesses that do not conflict; a
//   synchronous copy is not ordered with a non-blocking stream;
// - malformed settings stop the program with status 2 naming the variable;
// - the device model chosen with SIMGPU_DEVICE sets the name, memory size, SM count
//   and compute capability;
// - SIMGPU_REPORT=1 prints the virtual time and peak device memory at exit, and its
//   migration counters show managed pages moving on access and on prefetch.
#include <algorithm>
#include <csignal>
#include <cstdlib>
#include <dirent.h>
#include <string>

#include "simgpu_test.h"

namespace {

using simgpu_test::addresses_after;
using simgpu_test::describe;
using simgpu_test::device_model;
using simgpu_test::field;
using simgpu_test::process_result;

using env_map = simgpu_test::env_settings;

std::string probe_path() {
  const char* p = std::getenv("SIMGPU_PROBE");
  return p != nullptr ? p : "";
}

process_result probe(const std::string& scenario, env_map env = {}) {
  // Defaults that the scenario's own settings override; a caller's SIMGPU_* from the
  // outside (e.g. SIMGPU_FAIL) must not leak into these runs.
  env_map all = {{"SIMGPU_FAIL", std::nullopt}, {"SIMGPU_REPORT", std::nullopt},
                 {"SIMGPU_RACE", std::nullopt}, {"SIMGPU_MEMORY", std::nullopt},
                 {"SIMGPU_DEVICE", std::nullopt}};
  for (auto& [k, v] : env) all[k] = v;
  return simgpu_test::run_process({probe_path(), scenario}, all);
}

std::uintptr_t hex(const std::string& s) {
  return static_cast<std::uintptr_t>(std::strtoull(s.c_str(), nullptr, 16));
}

class Process : public ::testing::Test {
 protected:
  void SetUp() override {
    if (probe_path().empty()) GTEST_FAIL() << "SIMGPU_PROBE is not set";
  }
};

// ---- Kernels touching memory they must not -----------------------------------------

TEST_F(Process, KernelReadingFreedMemoryIsReportedWithItsName) {
  process_result r = probe("kernel-after-free");
  ASSERT_FALSE(r.signaled) << describe(r);
  ASSERT_EQ(r.exit_code, 0) << describe(r);
  std::uintptr_t ptr = hex(field(r.out, "ptr"));
  ASSERT_NE(ptr, 0u) << describe(r);

  // `simgpu: kernel '<name>' accessed <addr>: <why>`; the name may be mangled.
  EXPECT_NE(r.err.find("simgpu: kernel '"), std::string::npos) << describe(r);
  EXPECT_NE(r.err.find("probe_read_freed_kernel"), std::string::npos) << describe(r);
  auto addrs = addresses_after(r.err, "accessed ");
  ASSERT_FALSE(addrs.empty()) << describe(r);
  EXPECT_GE(addrs[0], ptr) << describe(r);
  EXPECT_LT(addrs[0], ptr + 1024 * sizeof(float)) << describe(r);

  // The launch may report it at once (kernels run eagerly) or succeed as an
  // asynchronous launch does on a GPU; the synchronize must report it, and the error
  // is sticky: later calls fail with it too.
  int launched = std::atoi(field(r.out, "launch").c_str());
  EXPECT_TRUE(launched == cudaSuccess || launched == cudaErrorIllegalAddress) << describe(r);
  EXPECT_EQ(std::atoi(field(r.out, "sync").c_str()), cudaErrorIllegalAddress) << describe(r);
  EXPECT_EQ(std::atoi(field(r.out, "malloc_after").c_str()), cudaErrorIllegalAddress)
      << describe(r);
  EXPECT_EQ(std::atoi(field(r.out, "sync_again").c_str()), cudaErrorIllegalAddress)
      << describe(r);
}

TEST_F(Process, KernelReachingFreedMemoryThroughAPointerIsReported) {
  // The footprint does not name the freed buffer; the access itself must fault.
  process_result r = probe("kernel-pointer-chase-freed");
  ASSERT_FALSE(r.signaled) << describe(r);
  ASSERT_EQ(r.exit_code, 0) << describe(r);
  std::uintptr_t ptr = hex(field(r.out, "ptr"));
  EXPECT_NE(r.err.find("probe_pointer_chase_kernel"), std::string::npos) << describe(r);
  auto addrs = addresses_after(r.err, "accessed ");
  ASSERT_FALSE(addrs.empty()) << describe(r);
  EXPECT_GE(addrs[0], ptr) << describe(r);
  EXPECT_LT(addrs[0], ptr + 1024 * sizeof(float)) << describe(r);
  int launched = std::atoi(field(r.out, "launch").c_str());
  EXPECT_TRUE(launched == cudaSuccess || launched == cudaErrorIllegalAddress) << describe(r);
  EXPECT_EQ(std::atoi(field(r.out, "sync").c_str()), cudaErrorIllegalAddress) << describe(r);
}

TEST_F(Process, KernelReadingUnmappedVmmRangeIsReported) {
  process_result r = probe("kernel-unmapped-vmm");
  ASSERT_FALSE(r.signaled) << describe(r);
  ASSERT_EQ(r.exit_code, 0) << describe(r);
  std::uintptr_t ptr = hex(field(r.out, "ptr"));
  EXPECT_NE(r.err.find("probe_read_freed_kernel"), std::string::npos) << describe(r);
  auto addrs = addresses_after(r.err, "accessed ");
  ASSERT_FALSE(addrs.empty()) << describe(r);
  EXPECT_GE(addrs[0], ptr) << describe(r);
  EXPECT_LT(addrs[0], ptr + 1024 * sizeof(float)) << describe(r);
  EXPECT_EQ(std::atoi(field(r.out, "sync").c_str()), cudaErrorIllegalAddress) << describe(r);
}

TEST_F(Process, KernelReadingVmmRangeWithoutAccessIsReported) {
  // Mapped, but cuMemSetAccess never granted the device access: a GPU faults.
  process_result r = probe("kernel-vmm-no-access");
  ASSERT_FALSE(r.signaled) << describe(r);
  ASSERT_EQ(r.exit_code, 0) << describe(r);
  EXPECT_NE(r.err.find("probe_read_freed_kernel"), std::string::npos) << describe(r);
  EXPECT_EQ(std::atoi(field(r.out, "sync").c_str()), cudaErrorIllegalAddress) << describe(r);
}

// ---- Host code touching device memory ----------------------------------------------

void expect_host_fault(const process_result& r) {
  // The process must not get past the access.
  EXPECT_EQ(field(r.out, "survived"), "") << describe(r);
  EXPECT_TRUE(r.signaled || r.exit_code != 0) << describe(r);
  // On a GPU machine such a load is a SIGSEGV; simgpu may also abort after its message.
  if (r.signaled) {
    EXPECT_TRUE(r.signal == SIGSEGV || r.signal == SIGABRT) << describe(r);
  }
  EXPECT_NE(r.err.find("simgpu: host code accessed device memory at "), std::string::npos)
      << describe(r);
  auto addrs = addresses_after(r.err, "device memory at ");
  ASSERT_FALSE(addrs.empty()) << describe(r);
  EXPECT_EQ(addrs[0], hex(field(r.out, "ptr"))) << describe(r);
}

TEST_F(Process, HostCodeReadingDeviceMemoryFaults) { expect_host_fault(probe("host-read")); }

TEST_F(Process, HostCodeWritingDeviceMemoryFaults) { expect_host_fault(probe("host-write")); }

// ---- Race detector -------------------------------------------------------------------

void expect_race(const process_result& r, const char* first_op, const char* second_op) {
  EXPECT_FALSE(r.signaled) << describe(r);
  EXPECT_EQ(r.exit_code, 3) << describe(r);
  std::size_t at = r.err.find("simgpu: race on [");
  ASSERT_NE(at, std::string::npos) << describe(r);
  std::string line = r.err.substr(at, r.err.find('\n', at) - at);
  // The reported bytes lie within the overlap: ints [50,100) of buf.
  std::uintptr_t buf = hex(field(r.out, "buf"));
  auto range = addresses_after(line, "[");
  auto end = addresses_after(line, ",");
  ASSERT_FALSE(range.empty()) << line;
  ASSERT_FALSE(end.empty()) << line;
  EXPECT_GE(range[0], buf + 50 * sizeof(int)) << line;
  EXPECT_LE(end[0], buf + 100 * sizeof(int)) << line;
  EXPECT_LT(range[0], end[0]) << line;
  // Both operations are named.
  EXPECT_NE(r.err.find(first_op, at), std::string::npos) << describe(r);
  EXPECT_NE(r.err.find(second_op, at), std::string::npos) << describe(r);
}

void expect_no_race(const process_result& r) {
  EXPECT_FALSE(r.signaled) << describe(r);
  EXPECT_EQ(r.exit_code, 0) << describe(r);
  EXPECT_EQ(r.err.find("race"), std::string::npos) << describe(r);
}

const env_map kReport = {{"SIMGPU_RACE", "report"}};

TEST_F(Process, UnorderedCrossStreamWriteReadIsARace) {
  expect_race(probe("race-unordered", kReport), "race_writer_kernel", "race_reader_kernel");
}

TEST_F(Process, RaceDetectorReportsByDefault) {
  process_result r = probe("race-unordered");
  EXPECT_EQ(r.exit_code, 3) << describe(r);
  EXPECT_NE(r.err.find("simgpu: race on ["), std::string::npos) << describe(r);
}

TEST_F(Process, SamePairOrderedByEventIsNotARace) {
  expect_no_race(probe("race-event-ordered", kReport));
}

TEST_F(Process, EventRecordedBeforeTheWriteDoesNotOrderIt) {
  expect_race(probe("race-event-too-early", kReport), "race_writer_kernel", "race_reader_kernel");
}

TEST_F(Process, HostSynchronizationOrdersStreams) {
  expect_no_race(probe("race-host-synchronized", kReport));
}

TEST_F(Process, OneStreamIsOrdered) { expect_no_race(probe("race-same-stream", kReport)); }

TEST_F(Process, AdjacentRangesDoNotRace) { expect_no_race(probe("race-adjacent", kReport)); }

TEST_F(Process, TwoReadsDoNotRace) { expect_no_race(probe("race-read-read", kReport)); }

TEST_F(Process, AsyncCopyAgainstKernelOnAnotherStreamIsARace) {
  process_result r = probe("race-copy-kernel", kReport);
  EXPECT_EQ(r.exit_code, 3) << describe(r);
  EXPECT_NE(r.err.find("simgpu: race on ["), std::string::npos) << describe(r);
  EXPECT_NE(r.err.find("race_reader_kernel"), std::string::npos) << describe(r);
}

TEST_F(Process, BlockingStreamIsOrderedWithLegacyDefaultStream) {
  expect_no_race(probe("race-legacy-default-blocking", kReport));
}

TEST_F(Process, NonBlockingStreamIsNotOrderedWithLegacyDefaultStream) {
  process_result r = probe("race-legacy-default-nonblocking", kReport);
  EXPECT_EQ(r.exit_code, 3) << describe(r);
  EXPECT_NE(r.err.find("simgpu: race on ["), std::string::npos) << describe(r);
}

TEST_F(Process, HostWaitOnEventOrdersStreams) {
  expect_no_race(probe("race-event-host-synchronized", kReport));
}

TEST_F(Process, SynchronousCopyIsNotOrderedWithNonBlockingStream) {
  process_result r = probe("race-kernel-sync-memcpy", kReport);
  EXPECT_EQ(r.exit_code, 3) << describe(r);
  EXPECT_NE(r.err.find("simgpu: race on ["), std::string::npos) << describe(r);
  EXPECT_NE(r.err.find("race_writer_kernel"), std::string::npos) << describe(r);
}

TEST_F(Process, RaceAbortModeAborts) {
  process_result r = probe("race-unordered", {{"SIMGPU_RACE", "abort"}});
  EXPECT_TRUE(r.signaled) << describe(r);
  EXPECT_EQ(r.signal, SIGABRT) << describe(r);
  EXPECT_NE(r.err.find("simgpu: race on ["), std::string::npos) << describe(r);
}

TEST_F(Process, RaceOffModeIsSilent) {
  process_result r = probe("race-unordered", {{"SIMGPU_RACE", "off"}});
  expect_no_race(r);
}

// ---- Settings -----------------------------------------------------------------------

TEST_F(Process, MalformedMemorySettingStopsWithStatus2) {
  for (const char* bad : {"12XB", "lots", "-5MiB"}) {
    process_result r = probe("props", {{"SIMGPU_MEMORY", bad}});
    EXPECT_FALSE(r.signaled) << bad << ": " << describe(r);
    EXPECT_EQ(r.exit_code, 2) << bad << ": " << describe(r);
    EXPECT_NE(r.err.find("SIMGPU_MEMORY"), std::string::npos) << bad << ": " << describe(r);
    EXPECT_NE(r.err.find(bad), std::string::npos) << "names the value: " << describe(r);
  }
}

TEST_F(Process, OtherMalformedSettingsStopWithStatus2) {
  const std::pair<const char*, const char*> bad[] = {
      {"SIMGPU_FAIL", "alloc"},        {"SIMGPU_FAIL", "explode:1"},
      {"SIMGPU_FAIL", "alloc:0"},      {"SIMGPU_FAIL", "copy:2:NOT_A_CODE"},
      {"SIMGPU_RACE", "sometimes"},    {"SIMGPU_REPORT", "maybe"},
  };
  for (const auto& [var, value] : bad) {
    process_result r = probe("props", {{var, value}});
    EXPECT_EQ(r.exit_code, 2) << var << "=" << value << ": " << describe(r);
    EXPECT_NE(r.err.find(var), std::string::npos) << var << "=" << value << ": " << describe(r);
  }
}

TEST_F(Process, UnknownDeviceModelStopsWithStatus2) {
  process_result r = probe("props", {{"SIMGPU_DEVICE", "no-such-gpu"}});
  EXPECT_EQ(r.exit_code, 2) << describe(r);
  EXPECT_NE(r.err.find("SIMGPU_DEVICE"), std::string::npos) << describe(r);
}

TEST_F(Process, MemorySettingSetsCapacity) {
  process_result r = probe("props", {{"SIMGPU_MEMORY", "256MiB"}});
  ASSERT_EQ(r.exit_code, 0) << describe(r);
  EXPECT_EQ(field(r.out, "totalGlobalMem"), std::to_string(256ull << 20)) << describe(r);
  EXPECT_EQ(field(r.out, "meminfo_total"), std::to_string(256ull << 20)) << describe(r);
  r = probe("props", {{"SIMGPU_MEMORY", "1GiB"}});
  ASSERT_EQ(r.exit_code, 0) << describe(r);
  EXPECT_EQ(field(r.out, "totalGlobalMem"), std::to_string(1ull << 30)) << describe(r);
}

// The device models shipped beside the libraries.
std::vector<std::string> model_names() {
  std::vector<std::string> names;
  const char* dir = std::getenv("SIMGPU_DEVICE_DIR");
  if (dir == nullptr) return names;
  if (DIR* d = opendir(dir)) {
    while (dirent* e = readdir(d)) {
      std::string n = e->d_name;
      if (n.size() > 6 && n.substr(n.size() - 6) == ".model")
        names.push_back(n.substr(0, n.size() - 6));
    }
    closedir(d);
  }
  return names;
}

TEST_F(Process, DeviceModelSetsNameAndMemory) {
  std::vector<std::string> names = model_names();
  for (const char* required : {"h100-pcie", "a100", "titanx-maxwell", "k40"}) {
    EXPECT_NE(std::find(names.begin(), names.end(), required), names.end())
        << "missing device model " << required;
  }
  std::map<std::string, std::string> seen_names;  // reported name -> model
  for (const std::string& name : names) {
    device_model m = device_model::load(name);
    process_result r = probe("props", {{"SIMGPU_DEVICE", name}});
    ASSERT_EQ(r.exit_code, 0) << name << ": " << describe(r);
    std::size_t at = r.out.find("NAME:");
    ASSERT_NE(at, std::string::npos) << describe(r);
    std::string reported = r.out.substr(at + 5, r.out.find('\n', at) - at - 5);
    EXPECT_EQ(reported, m.text("name")) << m.path();
    EXPECT_FALSE(reported.empty()) << name;
    EXPECT_EQ(seen_names.count(reported), 0u)
        << name << " and " << seen_names[reported] << " report the same name " << reported;
    seen_names[reported] = name;
    EXPECT_EQ(field(r.out, "sm_count"), m.text("sm_count")) << m.path();
    EXPECT_EQ(field(r.out, "compute_capability"), m.text("compute_capability")) << m.path();
    EXPECT_EQ(field(r.out, "concurrentManagedAccess"), m.text("concurrent_managed_access"))
        << m.path();
    double bytes = m.number({"memory"});
    EXPECT_EQ(field(r.out, "totalGlobalMem"),
              std::to_string(static_cast<unsigned long long>(bytes)))
        << m.path();
  }
  // The 12 GB Titan X and the 12 GB K40 differ from the 80 GB H100 by their memory.
  EXPECT_LT(device_model::load("k40").number({"memory"}),
            device_model::load("h100-pcie").number({"memory"}));
}

TEST_F(Process, ReportPrintsVirtualTimeAndPeakMemory) {
  process_result r = probe("report", {{"SIMGPU_REPORT", "1"}});
  ASSERT_EQ(r.exit_code, 0) << describe(r);
  std::size_t at = r.err.find("simgpu: device ");
  ASSERT_NE(at, std::string::npos) << describe(r);
  std::string line = r.err.substr(at, r.err.find('\n', at) - at);
  std::size_t vt = line.find("virtual time ");
  ASSERT_NE(vt, std::string::npos) << line;
  double ms = std::strtod(line.c_str() + vt + 13, nullptr);
  EXPECT_GT(ms, 0.0) << line;
  std::size_t pk = line.find("peak device memory ");
  ASSERT_NE(pk, std::string::npos) << line;
  unsigned long long peak = std::strtoull(line.c_str() + pk + 19, nullptr, 10);
  // 3 MiB and 5 MiB were live together; allocation rounding may add a little.
  EXPECT_GE(peak, 8ull << 20) << line;
  EXPECT_LT(peak, 10ull << 20) << line;

  process_result quiet = probe("report");
  ASSERT_EQ(quiet.exit_code, 0) << describe(quiet);
  EXPECT_EQ(quiet.err.find("peak device memory"), std::string::npos) << describe(quiet);
}

// The report's migration counters show managed pages moving on kernel access, on
// host access and on prefetch (see the probe's managed-migrations scenario).
TEST_F(Process, ManagedPagesMigrateOnAccessAndPrefetch) {
  process_result r =
      probe("managed-migrations", {{"SIMGPU_REPORT", "1"}, {"SIMGPU_DEVICE", "h100-pcie"}});
  ASSERT_EQ(r.exit_code, 0) << describe(r);
  EXPECT_EQ(field(r.out, "sum"), std::to_string(1 << 18)) << describe(r);
  const auto page = static_cast<unsigned long long>(
      device_model::load("h100-pcie").number({"managed_page_size"}));
  ASSERT_LE(page, 256u << 10) << "the scenario touches pages 256 KiB apart";
  auto counter = [&](const char* label) {
    std::size_t at = r.err.find(label);
    return at == std::string::npos ? ~0ull : std::strtoull(r.err.c_str() + at + std::strlen(label),
                                                          nullptr, 10);
  };
  // 1 MiB on the kernel's first touch, then the 4 host-touched pages by prefetch.
  EXPECT_EQ(counter("migrated to device "), (1ull << 20) + 4 * page) << describe(r);
  EXPECT_EQ(counter("to host "), 4 * page) << describe(r);
}

}  // namespace
