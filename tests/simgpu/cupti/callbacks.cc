// simgpu's libcupti.so.13: the callback API. One subscriber at a time (as with
// older drivers; a second gets CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED and,
// through cuptiSubscribe_v2, the holder's name), per-(domain, cbid) enable flags,
// and the API sink that turns simgpu's records (ext.h) into CUpti_CallbackData.
//
// Only the driver- and runtime-API domains produce callbacks on simgpu; enabling
// the other domains is accepted and stays silent.
#include <atomic>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <string>

#include "cupti_state.h"

namespace simgpu::cupti {
namespace {

constexpr int kRuntimeCbids = CUPTI_RUNTIME_TRACE_CBID_SIZE;
constexpr int kDriverCbids = CUPTI_DRIVER_TRACE_CBID_SIZE;

}  // namespace
}  // namespace simgpu::cupti

// The opaque handle type of cupti_callbacks.h.
struct CUpti_Subscriber_st {
  CUpti_CallbackFunc callback = nullptr;
  void* userdata = nullptr;
  std::string name;  // "CUPTI for <name>", what a refused subscriber is told
  std::atomic<bool> runtime_enabled[simgpu::cupti::kRuntimeCbids];
  std::atomic<bool> driver_enabled[simgpu::cupti::kDriverCbids];
  std::atomic<bool> other_domains[CUPTI_CB_DOMAIN_SIZE];
};

namespace simgpu::cupti {
namespace {

// Note [Subscriber lifetime]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~
// The sink may run on any thread while another unsubscribes, so the subscriber is
// one static object that is never freed; `active` says whether it is held, and the
// sink reads callback and userdata only while it is.
CUpti_Subscriber_st g_subscriber;
std::atomic<bool> g_active{false};
std::mutex g_subscribe_mutex;

std::atomic<bool>* flag(CUpti_Subscriber_st* s, CUpti_CallbackDomain domain, uint32_t cbid) {
  switch (domain) {
    case CUPTI_CB_DOMAIN_RUNTIME_API:
      return cbid < static_cast<uint32_t>(kRuntimeCbids) ? &s->runtime_enabled[cbid] : nullptr;
    case CUPTI_CB_DOMAIN_DRIVER_API:
      return cbid < static_cast<uint32_t>(kDriverCbids) ? &s->driver_enabled[cbid] : nullptr;
    default:
      return nullptr;
  }
}

void set_domain(CUpti_Subscriber_st* s, CUpti_CallbackDomain domain, bool on) {
  if (domain == CUPTI_CB_DOMAIN_RUNTIME_API) {
    for (auto& f : s->runtime_enabled) f.store(on);
  } else if (domain == CUPTI_CB_DOMAIN_DRIVER_API) {
    for (auto& f : s->driver_enabled) f.store(on);
  } else {
    s->other_domains[domain].store(on);
  }
}

bool valid_domain(CUpti_CallbackDomain d) {
  return d > CUPTI_CB_DOMAIN_INVALID && d < CUPTI_CB_DOMAIN_SIZE;
}

bool valid(CUpti_SubscriberHandle s) { return s == &g_subscriber && g_active.load(); }

void api_sink(void*, const simgpuApiRecord* rec) {
  if (!g_active.load(std::memory_order_acquire) || quiet_scope::active()) return;
  auto domain = static_cast<CUpti_CallbackDomain>(rec->domain);
  std::atomic<bool>* f = flag(&g_subscriber, domain, static_cast<uint32_t>(rec->cbid));
  if (f == nullptr || !f->load(std::memory_order_relaxed)) return;
  CUpti_CallbackData data{};
  data.callbackSite = rec->site == 0 ? CUPTI_API_ENTER : CUPTI_API_EXIT;
  data.functionName = rec->functionName;
  data.functionParams = rec->params;
  data.functionReturnValue = const_cast<void*>(rec->returnValue);
  data.symbolName = rec->symbolName;
  data.context = rec->context;
  data.contextUid = context_id(rec->context);
  data.correlationData = rec->correlationData;
  data.correlationId = rec->correlationId;
  g_subscriber.callback(g_subscriber.userdata, domain, static_cast<CUpti_CallbackId>(rec->cbid),
                        &data);
}

void copy_name(const std::string& from, char* to, size_t size) {
  if (to == nullptr || size == 0) return;
  std::snprintf(to, size, "%s", from.c_str());
}

CUptiResult subscribe(CUpti_SubscriberHandle* subscriber, CUpti_CallbackFunc callback,
                      void* userdata, CUpti_SubscriberParams* params) {
  if (subscriber == nullptr) return CUPTI_ERROR_INVALID_PARAMETER;
  if (params != nullptr && params->structSize == 0) return CUPTI_ERROR_INVALID_PARAMETER;
  const libcuda* d = driver();
  if (d == nullptr) return CUPTI_ERROR_NOT_INITIALIZED;
  std::lock_guard<std::mutex> lock(g_subscribe_mutex);
  if (g_active.load()) {
    constexpr size_t kOldNameEnd =
        offsetof(CUpti_SubscriberParams, oldSubscriberSize) + sizeof(size_t);
    if (params != nullptr && params->structSize >= kOldNameEnd) {
      copy_name(g_subscriber.name, params->oldSubscriberName, params->oldSubscriberSize);
    }
    return CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED;
  }
  CUpti_Subscriber_st& s = g_subscriber;
  s.callback = callback;
  s.userdata = userdata;
  s.name = "CUPTI";
  constexpr size_t kNameEnd = offsetof(CUpti_SubscriberParams, subscriberName) + sizeof(char*);
  if (params != nullptr && params->structSize >= kNameEnd && params->subscriberName != nullptr) {
    s.name += " for ";
    s.name.append(params->subscriberName,
                  strnlen(params->subscriberName, CUPTI_SUBSCRIBER_NAME_MAX_LEN));
  }
  for (auto& f : s.runtime_enabled) f.store(false);
  for (auto& f : s.driver_enabled) f.store(false);
  for (auto& f : s.other_domains) f.store(false);
  g_active.store(true, std::memory_order_release);
  d->set_api_sink(&api_sink, nullptr);
  *subscriber = &s;
  return CUPTI_SUCCESS;
}

}  // namespace

void drop_subscriber() noexcept {
  std::lock_guard<std::mutex> lock(g_subscribe_mutex);
  if (!g_active.exchange(false)) return;
  if (const libcuda* d = driver()) d->set_api_sink(nullptr, nullptr);
}

}  // namespace simgpu::cupti

using namespace simgpu::cupti;

extern "C" {

SIMGPU_EXPORT CUptiResult cuptiSubscribe(CUpti_SubscriberHandle* subscriber,
                                         CUpti_CallbackFunc callback, void* userdata) {
  return subscribe(subscriber, callback, userdata, nullptr);
}

SIMGPU_EXPORT CUptiResult cuptiSubscribe_v2(CUpti_SubscriberHandle* subscriber,
                                            CUpti_CallbackFunc callback, void* userdata,
                                            CUpti_SubscriberParams* pParams) {
  return subscribe(subscriber, callback, userdata, pParams);
}

SIMGPU_EXPORT CUptiResult cuptiUnsubscribe(CUpti_SubscriberHandle subscriber) {
  if (driver() == nullptr) return CUPTI_ERROR_NOT_INITIALIZED;
  if (!valid(subscriber)) return CUPTI_ERROR_INVALID_PARAMETER;
  drop_subscriber();
  return CUPTI_SUCCESS;
}

SIMGPU_EXPORT CUptiResult cuptiEnableCallback(uint32_t enable, CUpti_SubscriberHandle subscriber,
                                              CUpti_CallbackDomain domain, CUpti_CallbackId cbid) {
  if (driver() == nullptr) return CUPTI_ERROR_NOT_INITIALIZED;
  if (!valid(subscriber) || !valid_domain(domain)) return CUPTI_ERROR_INVALID_PARAMETER;
  std::atomic<bool>* f = flag(subscriber, domain, cbid);
  if (f != nullptr) {
    f->store(enable != 0);
  } else if (domain == CUPTI_CB_DOMAIN_RUNTIME_API || domain == CUPTI_CB_DOMAIN_DRIVER_API) {
    return CUPTI_ERROR_INVALID_PARAMETER;  // cbid out of range
  }
  return CUPTI_SUCCESS;
}

SIMGPU_EXPORT CUptiResult cuptiGetCallbackState(uint32_t* enable, CUpti_SubscriberHandle subscriber,
                                                CUpti_CallbackDomain domain,
                                                CUpti_CallbackId cbid) {
  if (driver() == nullptr) return CUPTI_ERROR_NOT_INITIALIZED;
  if (enable == nullptr || !valid(subscriber) || !valid_domain(domain)) {
    return CUPTI_ERROR_INVALID_PARAMETER;
  }
  std::atomic<bool>* f = flag(subscriber, domain, cbid);
  if (f != nullptr) {
    *enable = f->load() ? 1 : 0;
  } else if (domain == CUPTI_CB_DOMAIN_RUNTIME_API || domain == CUPTI_CB_DOMAIN_DRIVER_API) {
    return CUPTI_ERROR_INVALID_PARAMETER;
  } else {
    *enable = subscriber->other_domains[domain].load() ? 1 : 0;
  }
  return CUPTI_SUCCESS;
}

SIMGPU_EXPORT CUptiResult cuptiEnableDomain(uint32_t enable, CUpti_SubscriberHandle subscriber,
                                            CUpti_CallbackDomain domain) {
  if (driver() == nullptr) return CUPTI_ERROR_NOT_INITIALIZED;
  if (!valid(subscriber) || !valid_domain(domain)) return CUPTI_ERROR_INVALID_PARAMETER;
  set_domain(subscriber, domain, enable != 0);
  return CUPTI_SUCCESS;
}

SIMGPU_EXPORT CUptiResult cuptiEnableAllDomains(uint32_t enable,
                                                CUpti_SubscriberHandle subscriber) {
  if (driver() == nullptr) return CUPTI_ERROR_NOT_INITIALIZED;
  if (!valid(subscriber)) return CUPTI_ERROR_INVALID_PARAMETER;
  for (int d = CUPTI_CB_DOMAIN_INVALID + 1; d < CUPTI_CB_DOMAIN_SIZE; ++d) {
    set_domain(subscriber, static_cast<CUpti_CallbackDomain>(d), enable != 0);
  }
  return CUPTI_SUCCESS;
}

}  // extern "C"
