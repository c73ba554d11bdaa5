// The host's cost of each driver call family against the device model (run once per
// model, as test_timing.cc): VMM calls per call and per 2 MiB page, and a call that
// repeats its thread's family at the repeat figure; events, stream waits, copy and
// launch enqueues; a clock per host thread, and the VMM calls of two threads one at a
// time.
#include <latch>
#include <thread>

#include "timing_fixture.h"

namespace {

// Device memory on device 0, as cuMemCreate takes it.
CUmemAllocationProp device_memory() {
  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  return prop;
}

// Host time taken by one driver call, in ns of virtual time.
template <typename F>
double host_ns_of(F&& call) {
  static auto now = simgpu_test::driver<uint64_t (*)()>("simgpuVirtualTimeNs");
  uint64_t before = now();
  call();
  return static_cast<double>(now() - before);
}

#define EXPECT_NS(got, want) EXPECT_NEAR((got), (want), 1.0) << #got " vs model " #want

// cuMemCreate, cuMemMap, cuMemSetAccess, cuMemUnmap and cuMemRelease cost their
// model's per-call part plus their part per 2 MiB page, here for 3 pages.
TEST_F(Timing, VmmCallsCostTheModelsFigures) {
  auto m = simgpu_test::device_model::current();
  auto cost = [&](const std::string& family, double pages) {
    return m.number({(family + "_ns").c_str()}) +
           pages * m.number({(family + "_per_2mib_ns").c_str()});
  };
  const size_t bytes = 6ull << 20;
  const vmm_calls vmm;
  CUDA_OK(cudaDeviceSynchronize());
  const CUmemAllocationProp prop = device_memory();
  CUmemGenericAllocationHandle h = 0;
  CUdeviceptr va = 0;
  ASSERT_EQ(vmm.reserve(&va, bytes, 0, 0, 0), CUDA_SUCCESS);
  EXPECT_NS(host_ns_of([&] { ASSERT_EQ(vmm.create(&h, bytes, &prop, 0), CUDA_SUCCESS); }),
            cost("vmm_create", 3));
  EXPECT_NS(host_ns_of([&] { ASSERT_EQ(vmm.map(va, bytes, 0, h, 0), CUDA_SUCCESS); }),
            cost("vmm_map", 3));
  CUmemAccessDesc d{};
  d.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  d.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  EXPECT_NS(host_ns_of([&] { ASSERT_EQ(vmm.access(va, bytes, &d, 1), CUDA_SUCCESS); }),
            cost("vmm_set_access", 3));
  EXPECT_NS(host_ns_of([&] { ASSERT_EQ(vmm.unmap(va, bytes), CUDA_SUCCESS); }),
            cost("vmm_unmap", 3));
  EXPECT_NS(host_ns_of([&] { ASSERT_EQ(vmm.release(h), CUDA_SUCCESS); }), cost("vmm_release", 3));
  ASSERT_EQ(vmm.address_free(va, bytes), CUDA_SUCCESS);
}

// See Note [Repeated VMM calls] in tests/simgpu/driver/device_model.cc: a cuMemMap
// right after another (a stream query between them allowed) costs the model's
// vmm_map_repeat_ns (vmm_map_ns where the model has none); one after another family's
// call, or after more than 5 us of other calls, costs vmm_map_ns.
TEST_F(Timing, VmmCallsRepeatingTheirFamilyCostTheRepeatFigure) {
  auto m = simgpu_test::device_model::current();
  const double page = m.number({"vmm_map_per_2mib_ns"});
  const double first = m.number({"vmm_map_ns"}) + page;
  const double repeat = m.number({"vmm_map_repeat_ns", "vmm_map_ns"}) + page;
  const size_t bytes = 2ull << 20;
  auto reserve = SIMGPU_DRV(cuMemAddressReserve);
  auto create = SIMGPU_DRV(cuMemCreate);
  auto map = SIMGPU_DRV(cuMemMap);
  auto unmap = SIMGPU_DRV(cuMemUnmap);
  auto release = SIMGPU_DRV(cuMemRelease);
  auto address_free = SIMGPU_DRV(cuMemAddressFree);
  auto record = SIMGPU_DRV(cuEventRecord);
  CUDA_OK(cudaDeviceSynchronize());
  const CUmemAllocationProp prop = device_memory();
  constexpr int kPages = 5;
  CUmemGenericAllocationHandle h[kPages] = {};
  CUdeviceptr va = 0;
  ASSERT_EQ(reserve(&va, kPages * bytes, 0, 0, 0), CUDA_SUCCESS);
  for (auto& handle : h) ASSERT_EQ(create(&handle, bytes, &prop, 0), CUDA_SUCCESS);
  EXPECT_NS(host_ns_of([&] { ASSERT_EQ(map(va, bytes, 0, h[0], 0), CUDA_SUCCESS); }), first);
  EXPECT_NS(host_ns_of([&] { ASSERT_EQ(map(va + bytes, bytes, 0, h[1], 0), CUDA_SUCCESS); }),
            repeat);
  EXPECT_EQ(cudaStreamQuery(nullptr), cudaSuccess);  // another call between: still a run
  EXPECT_NS(host_ns_of([&] { ASSERT_EQ(map(va + 2 * bytes, bytes, 0, h[2], 0), CUDA_SUCCESS); }),
            repeat);
  // More than 5 us of other calls: the next map pays in full.
  cudaEvent_t e = nullptr;
  CUDA_OK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
  const double record_ns = m.number({"event_record_ns"});
  for (int i = 0; i < static_cast<int>(5000 / std::max(record_ns, 1.0)) + 2; ++i) {
    ASSERT_EQ(record(reinterpret_cast<CUevent>(e), nullptr), CUDA_SUCCESS);
  }
  EXPECT_NS(host_ns_of([&] { ASSERT_EQ(map(va + 3 * bytes, bytes, 0, h[3], 0), CUDA_SUCCESS); }),
            first);
  // Another family's call between: in full too.
  ASSERT_EQ(unmap(va, bytes), CUDA_SUCCESS);
  EXPECT_NS(host_ns_of([&] { ASSERT_EQ(map(va + 4 * bytes, bytes, 0, h[4], 0), CUDA_SUCCESS); }),
            first);
  for (int k = 1; k < kPages; ++k) ASSERT_EQ(unmap(va + k * bytes, bytes), CUDA_SUCCESS);
  for (auto handle : h) ASSERT_EQ(release(handle), CUDA_SUCCESS);
  ASSERT_EQ(address_free(va, kPages * bytes), CUDA_SUCCESS);
  CUDA_OK(cudaEventDestroy(e));
}

// Event record, query and synchronize, a stream's wait, a copy's and a kernel's
// enqueue and a graph launch each cost the host their model figure.
TEST_F(Timing, EventStreamCopyAndLaunchCallsCostTheModelsFigures) {
  auto m = simgpu_test::device_model::current();
  auto record = SIMGPU_DRV(cuEventRecord);
  auto query = SIMGPU_DRV(cuEventQuery);
  auto sync = SIMGPU_DRV(cuEventSynchronize);
  auto wait = SIMGPU_DRV(cuStreamWaitEvent);
  CUDA_OK(cudaDeviceSynchronize());
  CUevent e = reinterpret_cast<CUevent>(e0_);
  CUstream s = reinterpret_cast<CUstream>(s_);
  EXPECT_NS(host_ns_of([&] { ASSERT_EQ(record(e, s), CUDA_SUCCESS); }),
            m.number({"event_record_ns"}));
  EXPECT_NS(host_ns_of([&] { ASSERT_EQ(query(e), CUDA_SUCCESS); }), m.number({"event_query_ns"}));
  EXPECT_NS(host_ns_of([&] { ASSERT_EQ(sync(e), CUDA_SUCCESS); }), m.number({"event_sync_ns"}));
  EXPECT_NS(host_ns_of([&] { ASSERT_EQ(wait(reinterpret_cast<CUstream>(s2_), e, 0), CUDA_SUCCESS); }),
            m.number({"stream_wait_event_ns"}));
  void* host = nullptr;
  CUDA_OK(cudaMallocHost(&host, 4096));
  EXPECT_NS(host_ns_of([&] {
              ASSERT_EQ(cudaMemcpyAsync(scratch_, host, 256, cudaMemcpyHostToDevice, s_),
                        cudaSuccess);
            }),
            f_.copy_enqueue_s * 1e9);
  EXPECT_NS(host_ns_of([&] { flops_on(s_, 1e3); }), f_.launch_enqueue_s * 1e9);
  // A graph of three kernels is one launch enqueue.
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  CUDA_OK(cudaStreamBeginCapture(s_, cudaStreamCaptureModeGlobal));
  for (int i = 0; i < 3; ++i) flops_on(s_, 1e3);
  CUDA_OK(cudaStreamEndCapture(s_, &graph));
  CUDA_OK(cudaGraphInstantiate(&exec, graph, 0));
  EXPECT_NS(host_ns_of([&] { ASSERT_EQ(cudaGraphLaunch(exec, s_), cudaSuccess); }),
            f_.launch_enqueue_s * 1e9);
  CUDA_OK(cudaStreamSynchronize(s_));
  CUDA_OK(cudaGraphExecDestroy(exec));
  CUDA_OK(cudaGraphDestroy(graph));
  CUDA_OK(cudaFreeHost(host));
}

// See Note [A clock per host thread] in tests/simgpu/driver/clock.h: another thread's
// calls cost its own clock, not this one's; a thread starts at the latest host time any
// thread reached; and a thread that waits on an event another thread recorded is moved
// to the host time at which that record was issued.
TEST_F(Timing, EachHostThreadHasItsOwnClock) {
  static auto now = simgpu_test::driver<uint64_t (*)()>("simgpuVirtualTimeNs");
  auto m = simgpu_test::device_model::current();
  auto create = SIMGPU_DRV(cuMemCreate);
  auto release = SIMGPU_DRV(cuMemRelease);
  auto record = SIMGPU_DRV(cuEventRecord);
  auto wait = SIMGPU_DRV(cuStreamWaitEvent);
  auto query = SIMGPU_DRV(cuEventQuery);
  CUDA_OK(cudaDeviceSynchronize());
  const CUmemAllocationProp prop = device_memory();
  const int calls = 8;
  // A 4 MiB handle made and released: two pages each (no call repeats its family).
  const double per_call = m.number({"vmm_create_ns"}) + 2 * m.number({"vmm_create_per_2mib_ns"}) +
                          m.number({"vmm_release_ns"}) +
                          2 * m.number({"vmm_release_per_2mib_ns"});
  const uint64_t main_start = now();
  uint64_t other_start = 0, other_before_record = 0, other_end = 0;
  CUevent e = reinterpret_cast<CUevent>(e1_);
  std::thread other([&] {
    CUDA_OK(cudaSetDevice(0));  // the runtime makes the primary context current here
    other_start = now();
    for (int i = 0; i < calls; ++i) {
      CUmemGenericAllocationHandle h = 0;
      ASSERT_EQ(create(&h, 4u << 20, &prop, 0), CUDA_SUCCESS);
      ASSERT_EQ(release(h), CUDA_SUCCESS);
    }
    other_before_record = now();
    ASSERT_EQ(record(e, reinterpret_cast<CUstream>(s2_)), CUDA_SUCCESS);
    other_end = now();
  });
  other.join();
  // The other thread started where this one was, and its calls cost only its clock.
  EXPECT_GE(other_start, main_start);
  EXPECT_NEAR(static_cast<double>(other_before_record - other_start), calls * per_call, 1.0 * calls);
  EXPECT_LT(now() - main_start, static_cast<uint64_t>(per_call));
  // Waiting on its event brings this thread to the record's issue time, then costs the wait.
  const double waited = host_ns_of([&] {
    ASSERT_EQ(wait(reinterpret_cast<CUstream>(s_), e, 0), CUDA_SUCCESS);
  });
  EXPECT_GE(now(), other_before_record);
  EXPECT_GT(waited, per_call);
  // A later observation of the same record costs only its own call.
  EXPECT_NS(host_ns_of([&] { (void)query(e); }), m.number({"event_query_ns"}));
  EXPECT_GE(other_end, other_before_record);
  CUDA_OK(cudaDeviceSynchronize());
}

// See Note [VMM calls one at a time] in tests/simgpu/driver/vmm.cc: another thread's VMM
// call, made while this thread's was under way in host time, waits for it to end (the
// models here have no vmm_calls_serialized key: the default, one at a time).
TEST_F(Timing, VmmCallsOfTwoThreadsRunOneAtATime) {
  static auto now = simgpu_test::driver<uint64_t (*)()>("simgpuVirtualTimeNs");
  auto m = simgpu_test::device_model::current();
  auto create = SIMGPU_DRV(cuMemCreate);
  auto release = SIMGPU_DRV(cuMemRelease);
  CUDA_OK(cudaDeviceSynchronize());
  const CUmemAllocationProp prop = device_memory();
  const double create_ns = m.number({"vmm_create_ns"}) + m.number({"vmm_create_per_2mib_ns"});
  std::latch started(1), main_created(1);
  uint64_t other_start = 0, other_before = 0, other_after = 0;
  CUmemGenericAllocationHandle theirs = 0;
  std::thread other([&] {
    CUDA_OK(cudaSetDevice(0));
    other_start = now();  // its clock starts where this thread's is now
    started.count_down();
    main_created.wait();
    other_before = now();
    ASSERT_EQ(create(&theirs, 2u << 20, &prop, 0), CUDA_SUCCESS);
    other_after = now();
  });
  started.wait();
  const uint64_t main_before = now();
  CUmemGenericAllocationHandle mine = 0;
  ASSERT_EQ(create(&mine, 2u << 20, &prop, 0), CUDA_SUCCESS);
  const uint64_t main_after = now();
  main_created.count_down();
  other.join();
  EXPECT_GT(main_after, main_before);
  // It asked before this thread's call had ended in host time: it waited for that end.
  EXPECT_LE(other_start, main_before);
  EXPECT_LT(other_before, main_after);
  EXPECT_NS(static_cast<double>(other_after), static_cast<double>(main_after) + create_ns);
  ASSERT_EQ(release(mine), CUDA_SUCCESS);
  ASSERT_EQ(release(theirs), CUDA_SUCCESS);
  CUDA_OK(cudaDeviceSynchronize());
}

}  // namespace
