// The CUPTI bridge (see callbacks.h): sinks, correlation ids, ext.h exports.
//
// Note [Correlation ids]
// ~~~~~~~~~~~~~~~~~~~~~~
// Every API call gets a correlation id at entry; calls nested on one thread (the
// runtime calling the driver, the driver calling itself) share the outermost one,
// as CUPTI correlates a runtime call with the driver work it caused. Activity
// records carry the id of the call that enqueued the operation.
#include "callbacks.h"

#include <cupti_callbacks.h>

#include <atomic>

#include "common.h"
#include "device.h"

namespace simgpu {

namespace {

std::atomic<simgpuApiSink> g_api_sink{nullptr};
std::atomic<void*> g_api_user{nullptr};
std::atomic<simgpuActivitySink> g_activity_sink{nullptr};
std::atomic<void*> g_activity_user{nullptr};
std::atomic<uint32_t> g_next_correlation{1};

thread_local int t_depth = 0;
thread_local uint32_t t_correlation = 0;

void deliver(int domain, int cbid, int site, const char* fn, const char* sym,
             const void* params, const void* ret, uint32_t corr, uint64_t* data) {
  simgpuApiSink sink = g_api_sink.load(std::memory_order_acquire);
  if (sink == nullptr) return;
  simgpuApiRecord rec{};
  rec.domain = domain;
  rec.cbid = cbid;
  rec.site = site;
  rec.functionName = fn;
  rec.symbolName = sym;
  rec.params = params;
  rec.returnValue = ret;
  rec.correlationId = corr;
  rec.correlationData = data;
  rec.context = g_initialized.load() ? primary_context() : nullptr;
  sink(g_api_user.load(std::memory_order_acquire), &rec);
}

}  // namespace

uint32_t current_correlation_id() { return t_correlation; }

bool activity_sink_installed() { return g_activity_sink.load() != nullptr; }

void emit_activity(const simgpuActivity& rec) {
  simgpuActivitySink sink = g_activity_sink.load(std::memory_order_acquire);
  if (sink != nullptr) sink(g_activity_user.load(std::memory_order_acquire), &rec);
}

api_scope::api_scope(int cbid, const char* name, const void* params, const char* symbol)
    : cbid_(cbid), name_(name), symbol_(symbol), params_(params) {
  correlation_id_ = simgpuApiEnter(CUPTI_CB_DOMAIN_DRIVER_API, cbid, name, symbol, params,
                                   &correlation_data_);
}

api_scope::~api_scope() {
  simgpuApiExit(CUPTI_CB_DOMAIN_DRIVER_API, cbid_, name_, symbol_, params_, &result_,
                correlation_id_, &correlation_data_);
}

}  // namespace simgpu

using namespace simgpu;

SIMGPU_EXPORT void simgpuSetApiSink(simgpuApiSink sink, void* user) {
  g_api_user.store(user, std::memory_order_release);
  g_api_sink.store(sink, std::memory_order_release);
}

SIMGPU_EXPORT void simgpuSetActivitySink(simgpuActivitySink sink, void* user) {
  g_activity_user.store(user, std::memory_order_release);
  g_activity_sink.store(sink, std::memory_order_release);
}

SIMGPU_EXPORT uint32_t simgpuApiEnter(int domain, int cbid, const char* functionName,
                                      const char* symbolName, const void* params,
                                      uint64_t* correlationData) {
  if (t_depth++ == 0) t_correlation = g_next_correlation.fetch_add(1);
  uint32_t corr = t_correlation;
  deliver(domain, cbid, 0, functionName, symbolName, params, nullptr, corr, correlationData);
  return corr;
}

SIMGPU_EXPORT void simgpuApiExit(int domain, int cbid, const char* functionName,
                                 const char* symbolName, const void* params,
                                 const void* returnValue, uint32_t correlationId,
                                 uint64_t* correlationData) {
  deliver(domain, cbid, 1, functionName, symbolName, params, returnValue, correlationId,
          correlationData);
  if (t_depth > 0 && --t_depth == 0) t_correlation = 0;
}
