// A stand-in for another CUPTI tool (the PyTorch profiler, Nsight Systems): preloaded
// before liboversub, it subscribes to CUPTI as "holder-tool" in its constructor,
// before the program makes any CUDA call, and keeps the subscription. liboversub's
// profiler then finds CUPTI held and must fall back to its own launch hooks and
// say so (tests/profiler/profile_test.py, case fallback).
#include <cupti.h>

#include <cstdio>

namespace {

void CUPTIAPI ignore(void*, CUpti_CallbackDomain, CUpti_CallbackId, const void*) {}

__attribute__((constructor)) void hold_cupti() {
  CUpti_SubscriberHandle handle = nullptr;
  CUpti_SubscriberParams params{};
  params.structSize = CUpti_SubscriberParams_STRUCT_SIZE;
  params.subscriberName = "holder-tool";
  const CUptiResult r = cuptiSubscribe_v2(&handle, &ignore, nullptr, &params);
  std::fprintf(stderr, "cupti_holder: cuptiSubscribe_v2 -> %d\n", static_cast<int>(r));
}

}  // namespace
