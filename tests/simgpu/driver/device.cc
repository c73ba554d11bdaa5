// Device state, initialisation, the fork and exit hooks, capacity accounting and
// the primary context.
#include "device.h"

#include <pthread.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>

#include "address_space.h"
#include "clock.h"
#include "config.h"
#include "fault.h"
#include "managed.h"
#include "report.h"

namespace simgpu {

std::atomic<int> g_sticky_error{CUDA_SUCCESS};
std::atomic<bool> g_forked{false};
std::atomic<bool> g_initialized{false};

namespace {

device_state* g_state = nullptr;
int g_primary_tag = 0;
thread_local CUcontext t_current = nullptr;

void before_fork() { device_lock().lock(); }
void after_fork_parent() { device_lock().unlock(); }
void after_fork_child() {
  // Note [Fork]
  // ~~~~~~~~~~~
  // A child of a CUDA process cannot use CUDA. The lock was taken by
  // this (the only surviving) thread in before_fork; start from a fresh one.
  device_lock().reinit_after_fork();
  g_forked.store(true);
}

void at_exit() {
  if (g_forked.load() || !g_initialized.load()) return;
  device_lock().lock();
  print_report_if_asked();
  bool races = races_seen();
  device_lock().unlock();
  if (races) {
    std::fflush(nullptr);
    _exit(3);
  }
}

}  // namespace

device_state& dev() { return *g_state; }
bool device_ready() { return g_state != nullptr && g_state->va_base != 0; }

CUresult init_device() {
  if (g_initialized.load()) return CUDA_SUCCESS;
  const config& cfg = get_config();
  auto* s = new device_state();
  s->model = load_device_model();
  s->capacity_bytes = cfg.memory_bytes ? cfg.memory_bytes : s->model.memory_bytes;
  if (cfg.vmm_wait >= 0) s->model.vmm_waits_for_device = cfg.vmm_wait;
  if (cfg.vmm_unmap_spans >= 0) s->model.vmm_unmap_spans_mappings = cfg.vmm_unmap_spans;
  if (cfg.copy_gaps >= 0) s->model.copy_engines_serve_ready = cfg.copy_gaps;
  if (cfg.vmm_serial >= 0) s->model.vmm_calls_serialized = cfg.vmm_serial;
  g_state = s;
  if (!reserve_address_space()) {
    log_line("cannot reserve %llu bytes of address space for device memory",
             static_cast<unsigned long long>(kVaBytes));
    g_state = nullptr;
    delete s;
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  install_fault_handler();
  pthread_atfork(&before_fork, &after_fork_parent, &after_fork_child);
  std::atexit(&at_exit);
  g_initialized.store(true);
  return CUDA_SUCCESS;
}

CUcontext primary_context() { return reinterpret_cast<CUcontext>(&g_primary_tag); }
CUcontext& current_context() { return t_current; }

bool charge_device_bytes(uint64_t bytes) {
  device_state& d = dev();
  if (d.used_bytes + bytes > d.capacity_bytes) return false;
  d.used_bytes += bytes;
  if (d.used_bytes > d.peak_bytes) d.peak_bytes = d.used_bytes;
  return true;
}

bool charge_device_allocation(uint64_t bytes) {
  device_state& d = dev();
  if (d.used_bytes + bytes > d.capacity_bytes && !managed_make_room(bytes)) return false;
  d.used_bytes += bytes;
  if (d.used_bytes > d.peak_bytes) d.peak_bytes = d.used_bytes;
  return true;
}

void uncharge_device_bytes(uint64_t bytes) {
  device_state& d = dev();
  d.used_bytes = bytes > d.used_bytes ? 0 : d.used_bytes - bytes;
}

}  // namespace simgpu

SIMGPU_EXPORT int simgpuActivityWhenDone(void) { return simgpu::get_config().cupti_when_done ? 1 : 0; }

SIMGPU_EXPORT uint64_t simgpuVirtualTimeNs(void) {
  if (!simgpu::g_initialized.load()) return 0;
  simgpu::lock_guard lock;
  return static_cast<uint64_t>(simgpu::clock_host_ns());
}
