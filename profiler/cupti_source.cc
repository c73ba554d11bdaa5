// The CUPTI subscriber (see cupti_source.h).
#include "profiler/cupti_source.h"

#include <cupti.h>
#include <dlfcn.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <mutex>

namespace oversub::profiler::cupti {

namespace {

struct api {
  decltype(&::cuptiSubscribe_v2) subscribe = nullptr;
  decltype(&::cuptiEnableCallback) enable_callback = nullptr;
  decltype(&::cuptiActivityEnable) activity_enable = nullptr;
  decltype(&::cuptiActivityRegisterCallbacks) register_callbacks = nullptr;
  decltype(&::cuptiActivityFlushAll) flush_all = nullptr;
  decltype(&::cuptiActivityGetNextRecord) next_record = nullptr;
  decltype(&::cuptiGetResultString) result_string = nullptr;
};

api g_api;
std::atomic<bool> g_subscribed{false};
// cuptiGetTimestamp of the library loaded, subscribed or not (held by another tool);
// optional.
std::atomic<decltype(&::cuptiGetTimestamp)> g_timestamp{nullptr};
CUpti_SubscriberHandle g_handle = nullptr;

// See Note [More than one sink] (cupti_source.h): slots are filled once and never
// emptied, so a callback reads them without a lock.
std::atomic<sink*> g_sinks[max_sinks];
std::atomic<std::size_t> g_sink_count{0};
std::mutex g_subscribe_mutex;  // the first subscription and the slots
bool g_tried = false;          // under g_subscribe_mutex, as the four below
outcome g_outcome = outcome::unavailable;
std::string g_detail;
// See Note [CUPTI at rest] in profiler/cupti_source.h: per slot, its sink rests; and
// whether the callbacks are off now.
bool g_resting[max_sinks] = {};
bool g_quiet = false;

template <typename F>
void each_sink(F&& f) {
  const std::size_t n = g_sink_count.load(std::memory_order_acquire);
  for (std::size_t i = 0; i < n; ++i) {
    if (sink* s = g_sinks[i].load(std::memory_order_acquire)) f(*s);
  }
}

constexpr std::size_t activity_buffer_bytes = std::size_t{1} << 20;

// Per thread: a runtime-domain launch or copy is open (Note [One launch, two domains] in
// profiler/cupti_source.h).
thread_local int t_runtime_depth = 0;
// Per thread: the depth of an open runtime launch whose callback had no params (0:
// none); its driver-level launch is taken in its place (Note [Launches without
// params] in cupti_source.h).
thread_local int t_unread_launch = 0;
// Per thread: what oversub's runtime launch hook is passing now (note_hook_launch).
thread_local const void* t_hook_func = nullptr;
thread_local void** t_hook_args = nullptr;

// A runtime launch callback without params: the hook's launch, else the driver
// launch underneath (Note [Launches without params] in profiler/cupti_source.h).
void unread_runtime_launch(std::uint32_t corr) {
  if (t_hook_func == nullptr) {
    t_unread_launch = t_runtime_depth;
    return;
  }
  const void* func = t_hook_func;
  void** args = t_hook_args;
  t_hook_func = nullptr;
  t_hook_args = nullptr;
  each_sink([&](sink& k) { k.runtime_launch(func, args, corr); });
}

template <typename F>
bool resolve(void* lib, const char* name, F& out) {
  out = reinterpret_cast<F>(dlsym(lib, name));
  return out != nullptr;
}

std::string result_text(CUptiResult r) {
  const char* s = nullptr;
  if (g_api.result_string != nullptr && g_api.result_string(r, &s) == CUPTI_SUCCESS && s) {
    return s;
  }
  return "CUPTI error " + std::to_string(static_cast<int>(r));
}

copy_kind from_runtime_kind(cudaMemcpyKind k) {
  switch (k) {
    case cudaMemcpyHostToDevice: return copy_kind::h2d;
    case cudaMemcpyDeviceToHost: return copy_kind::d2h;
    case cudaMemcpyDeviceToDevice: return copy_kind::d2d;
    default: return copy_kind::other;
  }
}

copy_kind from_activity_kind(std::uint8_t k) {
  switch (k) {
    case CUPTI_ACTIVITY_MEMCPY_KIND_HTOD: return copy_kind::h2d;
    case CUPTI_ACTIVITY_MEMCPY_KIND_DTOH: return copy_kind::d2h;
    case CUPTI_ACTIVITY_MEMCPY_KIND_DTOD: return copy_kind::d2d;
    default: return copy_kind::other;
  }
}

// Runtime-domain callbacks: launches at enter, copies and memsets at enter.
void on_runtime(CUpti_CallbackId cbid, const CUpti_CallbackData* d) {
  if (d->callbackSite == CUPTI_API_EXIT) {
    if (t_unread_launch == t_runtime_depth) t_unread_launch = 0;
    --t_runtime_depth;
    return;
  }
  ++t_runtime_depth;
  const std::uint32_t corr = d->correlationId;
  switch (cbid) {
    case CUPTI_RUNTIME_TRACE_CBID___cudaLaunchKernel_v13000:
    case CUPTI_RUNTIME_TRACE_CBID___cudaLaunchKernel_ptsz_v13000:
      // No params struct in CUPTI 13 (Note [Launches without params] in
      // profiler/cupti_source.h).
      unread_runtime_launch(corr);
      break;
    case CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernel_v7000:
    case CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernel_ptsz_v7000:
    case CUPTI_RUNTIME_TRACE_CBID_cudaLaunchCooperativeKernel_v9000:
    case CUPTI_RUNTIME_TRACE_CBID_cudaLaunchCooperativeKernel_ptsz_v9000: {
      const auto* p = static_cast<const cudaLaunchKernel_v7000_params*>(d->functionParams);
      if (p != nullptr) each_sink([&](sink& k) { k.runtime_launch(p->func, p->args, corr); });
      else unread_runtime_launch(corr);
      break;
    }
    case CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernelExC_v11060:
    case CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernelExC_ptsz_v11060: {
      const auto* p = static_cast<const cudaLaunchKernelExC_v11060_params*>(d->functionParams);
      if (p != nullptr) each_sink([&](sink& k) { k.runtime_launch(p->func, p->args, corr); });
      else unread_runtime_launch(corr);
      break;
    }
    case CUPTI_RUNTIME_TRACE_CBID_cudaMemcpy_v3020:
    case CUPTI_RUNTIME_TRACE_CBID_cudaMemcpy_ptds_v7000: {
      const auto* p = static_cast<const cudaMemcpy_v3020_params*>(d->functionParams);
      each_sink([&](sink& k) { k.copy(from_runtime_kind(p->kind), p->count, p->dst, p->src, corr); });
      break;
    }
    case CUPTI_RUNTIME_TRACE_CBID_cudaMemcpyAsync_v3020:
    case CUPTI_RUNTIME_TRACE_CBID_cudaMemcpyAsync_ptsz_v7000: {
      const auto* p = static_cast<const cudaMemcpyAsync_v3020_params*>(d->functionParams);
      each_sink([&](sink& k) { k.copy(from_runtime_kind(p->kind), p->count, p->dst, p->src, corr); });
      break;
    }
    case CUPTI_RUNTIME_TRACE_CBID_cudaMemset_v3020:
    case CUPTI_RUNTIME_TRACE_CBID_cudaMemset_ptds_v7000: {
      const auto* p = static_cast<const cudaMemset_v3020_params*>(d->functionParams);
      each_sink([&](sink& k) { k.copy(copy_kind::memset, p->count, p->devPtr, nullptr, corr); });
      break;
    }
    case CUPTI_RUNTIME_TRACE_CBID_cudaMemsetAsync_v3020:
    case CUPTI_RUNTIME_TRACE_CBID_cudaMemsetAsync_ptsz_v7000: {
      const auto* p = static_cast<const cudaMemsetAsync_v3020_params*>(d->functionParams);
      each_sink([&](sink& k) { k.copy(copy_kind::memset, p->count, p->devPtr, nullptr, corr); });
      break;
    }
    default:
      break;  // graph launches: counted by the activity records of their kernels
  }
}

void on_driver(CUpti_CallbackId cbid, const CUpti_CallbackData* d) {
  if (d->callbackSite != CUPTI_API_ENTER || d->functionParams == nullptr) return;
  if (t_runtime_depth > 0 && t_unread_launch != t_runtime_depth) return;
  t_unread_launch = 0;  // the runtime launch's one driver launch is taken
  switch (cbid) {
    case CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel:
    case CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel_ptsz:
    case CUPTI_DRIVER_TRACE_CBID_cuLaunchCooperativeKernel:
    case CUPTI_DRIVER_TRACE_CBID_cuLaunchCooperativeKernel_ptsz: {
      // cuLaunchCooperativeKernel's parameters are cuLaunchKernel's without extra.
      const auto* p = static_cast<const cuLaunchKernel_params*>(d->functionParams);
      const bool coop = cbid == CUPTI_DRIVER_TRACE_CBID_cuLaunchCooperativeKernel ||
                        cbid == CUPTI_DRIVER_TRACE_CBID_cuLaunchCooperativeKernel_ptsz;
      each_sink([&](sink& k) {
        k.driver_launch(p->f, p->kernelParams, coop ? nullptr : p->extra, d->symbolName,
                        d->correlationId);
      });
      break;
    }
    case CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx:
    case CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx_ptsz: {
      const auto* p = static_cast<const cuLaunchKernelEx_params*>(d->functionParams);
      each_sink([&](sink& k) {
        k.driver_launch(p->f, p->kernelParams, p->extra, d->symbolName, d->correlationId);
      });
      break;
    }
    default:
      break;
  }
}

void CUPTIAPI on_callback(void*, CUpti_CallbackDomain domain, CUpti_CallbackId cbid,
                          const void* data) {
  const auto* d = static_cast<const CUpti_CallbackData*>(data);
  if (d == nullptr) return;
  if (domain == CUPTI_CB_DOMAIN_RUNTIME_API) on_runtime(cbid, d);
  else if (domain == CUPTI_CB_DOMAIN_DRIVER_API) on_driver(cbid, d);
}

void CUPTIAPI buffer_requested(std::uint8_t** buffer, std::size_t* size, std::size_t* max_records) {
  *buffer = static_cast<std::uint8_t*>(std::aligned_alloc(8, activity_buffer_bytes));
  *size = *buffer == nullptr ? 0 : activity_buffer_bytes;
  *max_records = 0;
}

void CUPTIAPI buffer_completed(CUcontext, std::uint32_t, std::uint8_t* buffer, std::size_t,
                               std::size_t valid) {
  CUpti_Activity* record = nullptr;
  while (valid > 0 && g_api.next_record(buffer, valid, &record) == CUPTI_SUCCESS) {
    switch (record->kind) {
      case CUPTI_ACTIVITY_KIND_KERNEL:
      case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL: {
        const auto* k = reinterpret_cast<const CUpti_ActivityKernel10*>(record);
        const std::uint64_t ns = k->end > k->start ? k->end - k->start : 0;
        each_sink([&](sink& s) { s.kernel_time(k->correlationId, k->start, ns); });
        break;
      }
      case CUPTI_ACTIVITY_KIND_MEMCPY: {
        const auto* m = reinterpret_cast<const CUpti_ActivityMemcpy6*>(record);
        const std::uint64_t ns = m->end > m->start ? m->end - m->start : 0;
        const copy_kind kind = from_activity_kind(m->copyKind);
        const std::uint8_t host = kind == copy_kind::d2h ? m->dstKind : m->srcKind;
        const bool pageable = host == CUPTI_ACTIVITY_MEMORY_KIND_PAGEABLE;
        each_sink([&](sink& s) { s.copy_time(m->correlationId, kind, m->bytes, ns, pageable); });
        break;
      }
      case CUPTI_ACTIVITY_KIND_MEMSET: {
        const auto* m = reinterpret_cast<const CUpti_ActivityMemset4*>(record);
        const std::uint64_t ns = m->end > m->start ? m->end - m->start : 0;
        each_sink([&](sink& s) { s.copy_time(m->correlationId, copy_kind::memset, m->bytes, ns,
                                             false); });
        break;
      }
      default:
        break;
    }
  }
  std::free(buffer);
}

constexpr CUpti_CallbackId runtime_ids[] = {
    CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernel_v7000,
    CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernel_ptsz_v7000,
    CUPTI_RUNTIME_TRACE_CBID_cudaLaunchCooperativeKernel_v9000,
    CUPTI_RUNTIME_TRACE_CBID_cudaLaunchCooperativeKernel_ptsz_v9000,
    CUPTI_RUNTIME_TRACE_CBID___cudaLaunchKernel_v13000,
    CUPTI_RUNTIME_TRACE_CBID___cudaLaunchKernel_ptsz_v13000,
    CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernelExC_v11060,
    CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernelExC_ptsz_v11060,
    CUPTI_RUNTIME_TRACE_CBID_cudaGraphLaunch_v10000,
    CUPTI_RUNTIME_TRACE_CBID_cudaGraphLaunch_ptsz_v10000,
    CUPTI_RUNTIME_TRACE_CBID_cudaMemcpy_v3020,
    CUPTI_RUNTIME_TRACE_CBID_cudaMemcpy_ptds_v7000,
    CUPTI_RUNTIME_TRACE_CBID_cudaMemcpyAsync_v3020,
    CUPTI_RUNTIME_TRACE_CBID_cudaMemcpyAsync_ptsz_v7000,
    CUPTI_RUNTIME_TRACE_CBID_cudaMemset_v3020,
    CUPTI_RUNTIME_TRACE_CBID_cudaMemset_ptds_v7000,
    CUPTI_RUNTIME_TRACE_CBID_cudaMemsetAsync_v3020,
    CUPTI_RUNTIME_TRACE_CBID_cudaMemsetAsync_ptsz_v7000,
};

constexpr CUpti_CallbackId driver_ids[] = {
    CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel,
    CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel_ptsz,
    CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx,
    CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx_ptsz,
    CUPTI_DRIVER_TRACE_CBID_cuLaunchCooperativeKernel,
    CUPTI_DRIVER_TRACE_CBID_cuLaunchCooperativeKernel_ptsz,
    CUPTI_DRIVER_TRACE_CBID_cuGraphLaunch,
    CUPTI_DRIVER_TRACE_CBID_cuGraphLaunch_ptsz,
};

// The callbacks the sinks take, on (1) or off (0); g_subscribe_mutex held.
void enable_callbacks(std::uint32_t on) {
  for (CUpti_CallbackId id : runtime_ids) {
    g_api.enable_callback(on, g_handle, CUPTI_CB_DOMAIN_RUNTIME_API, id);
  }
  for (CUpti_CallbackId id : driver_ids) {
    g_api.enable_callback(on, g_handle, CUPTI_CB_DOMAIN_DRIVER_API, id);
  }
}

// The process's one subscription (g_subscribe_mutex held).
outcome first_subscribe(std::string* detail) {
  void* lib = dlopen("libcupti.so.13", RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) {
    const char* e = dlerror();
    *detail = e != nullptr ? e : "libcupti.so.13 not found";
    return outcome::unavailable;
  }
  api a;
  if (!resolve(lib, "cuptiSubscribe_v2", a.subscribe) ||
      !resolve(lib, "cuptiEnableCallback", a.enable_callback) ||
      !resolve(lib, "cuptiActivityEnable", a.activity_enable) ||
      !resolve(lib, "cuptiActivityRegisterCallbacks", a.register_callbacks) ||
      !resolve(lib, "cuptiActivityFlushAll", a.flush_all) ||
      !resolve(lib, "cuptiActivityGetNextRecord", a.next_record) ||
      !resolve(lib, "cuptiGetResultString", a.result_string)) {
    *detail = "libcupti.so.13 lacks cuptiSubscribe_v2 or the activity API";
    return outcome::unavailable;
  }
  g_api = a;
  decltype(&::cuptiGetTimestamp) timestamp = nullptr;
  resolve(lib, "cuptiGetTimestamp", timestamp);
  g_timestamp.store(timestamp, std::memory_order_release);
  char holder[CUPTI_SUBSCRIBER_NAME_MAX_LEN + 1] = {};
  CUpti_SubscriberParams params{};
  params.structSize = CUpti_SubscriberParams_STRUCT_SIZE;
  params.subscriberName = "oversub";
  params.oldSubscriberName = holder;
  params.oldSubscriberSize = sizeof holder;
  const CUptiResult r = g_api.subscribe(&g_handle, &on_callback, nullptr, &params);
  if (r == CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED) {
    *detail = holder[0] != '\0' ? std::string(holder) : std::string("an unnamed subscriber");
    return outcome::held;
  }
  if (r != CUPTI_SUCCESS) {
    *detail = "cuptiSubscribe_v2: " + result_text(r);
    return outcome::unavailable;
  }
  enable_callbacks(1);
  if (g_api.register_callbacks(&buffer_requested, &buffer_completed) == CUPTI_SUCCESS) {
    g_api.activity_enable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL);
    g_api.activity_enable(CUPTI_ACTIVITY_KIND_MEMCPY);
    g_api.activity_enable(CUPTI_ACTIVITY_KIND_MEMSET);
  }
  g_subscribed.store(true, std::memory_order_release);
  return outcome::subscribed;
}

}  // namespace

outcome subscribe(sink* to, std::string* detail) noexcept {
  try {
    std::lock_guard<std::mutex> lock(g_subscribe_mutex);
    if (!g_tried) {
      g_tried = true;
      g_outcome = first_subscribe(&g_detail);
    }
    *detail = g_detail;
    if (g_outcome != outcome::subscribed) return g_outcome;
    const std::size_t n = g_sink_count.load(std::memory_order_relaxed);
    for (std::size_t i = 0; i < n; ++i) {
      if (g_sinks[i].load(std::memory_order_relaxed) == to) return outcome::subscribed;
    }
    if (n == max_sinks) {
      *detail = "oversub's CUPTI subscription has no room for another sink";
      return outcome::unavailable;
    }
    g_sinks[n].store(to, std::memory_order_release);
    g_sink_count.store(n + 1, std::memory_order_release);
    return outcome::subscribed;
  } catch (...) {
    *detail = "out of memory while subscribing";
    return outcome::unavailable;
  }
}

bool rest(sink* s, bool resting) noexcept try {
  std::lock_guard<std::mutex> lock(g_subscribe_mutex);
  if (!g_subscribed.load(std::memory_order_acquire)) return false;
  const std::size_t n = g_sink_count.load(std::memory_order_relaxed);
  bool all = n != 0;
  for (std::size_t i = 0; i < n; ++i) {
    if (g_sinks[i].load(std::memory_order_relaxed) == s) g_resting[i] = resting;
    all = all && g_resting[i];
  }
  if (all != g_quiet) {
    enable_callbacks(all ? 0 : 1);
    g_quiet = all;
  }
  return g_quiet;
} catch (...) {
  return false;  // the mutex could not be taken: nothing changed
}

void note_hook_launch(const void* func, void** args) noexcept {
  t_hook_func = func;
  t_hook_args = args;
}

void clear_hook_launch() noexcept {
  t_hook_func = nullptr;
  t_hook_args = nullptr;
}

namespace {

std::uint64_t loaded_timestamp_ns() noexcept {
  std::uint64_t t = 0;
  const auto f = g_timestamp.load(std::memory_order_acquire);
  return f != nullptr && f(&t) == CUPTI_SUCCESS ? t : 0;
}

std::uint64_t steady_ns() noexcept {
  return static_cast<std::uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                        std::chrono::steady_clock::now().time_since_epoch())
                                        .count());
}

}  // namespace

clock_fn host_clock() noexcept {
  if (g_timestamp.load(std::memory_order_acquire) == nullptr) return &steady_ns;
  return loaded_timestamp_ns() != 0 ? &loaded_timestamp_ns : nullptr;
}

void flush() noexcept {
  if (!g_subscribed.load(std::memory_order_acquire)) return;
  g_api.flush_all(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
}

}  // namespace oversub::profiler::cupti
