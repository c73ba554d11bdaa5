// The profiling session of the process (see session.h).
//
// Note [Writing the profile at exit]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// The exit handler is registered with atexit()
// when the session starts, after libcupti has been loaded, so it runs before the
// shared libraries' destructors (libcupti's, libcuda's, liboversub's own): the
// forced activity flush still reaches a live CUPTI. A forked child writes nothing.
#include "profiler/session.h"

#include <cxxabi.h>
#include <dlfcn.h>
#include <execinfo.h>
#include <pthread.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <mutex>

#include <fmt/format.h>

#include "common/log.h"
#include "common/options.h"
#include "common/tracker.h"
#include "profiler/cupti_source.h"
#include "profiler/launch_scan.h"
#include "profiler/recorder.h"

namespace oversub::profiler {

namespace {

constexpr int call_site_depth = 12;  // raw frames taken per allocation

using unw_backtrace_t = int (*)(void**, int);

// The process's executable (/proc/self/exe); empty when it cannot be read.
std::string this_executable() {
  std::string exe(4096, '\0');
  const ssize_t n = ::readlink("/proc/self/exe", exe.data(), exe.size() - 1);
  return n > 0 ? exe.substr(0, static_cast<std::size_t>(n)) : std::string();
}

class session final : public cupti::sink {
 public:
  session(tracker& live, const cuda_queries& q, std::uint64_t capacity, const config& cfg)
      : live_(live), q_(q), capacity_(capacity), rec_(cfg.iteration_marker),
        out_(expand_pid(cfg.profile_out)), target_(cfg.profile_iterations) {
    if (void* h = dlopen("libunwind.so.8", RTLD_NOW | RTLD_LOCAL)) {
      unwind_ = reinterpret_cast<unw_backtrace_t>(dlsym(h, "unw_backtrace"));
    }
    program_ = this_executable();
  }

  void attach_cupti() {
    std::string detail;
    switch (cupti::subscribe(this, &detail)) {
      case cupti::outcome::subscribed:
        cupti_.store(true, std::memory_order_release);
        log::info("profile: CUPTI subscribed (launches, copies, memsets, kernel durations)");
        break;
      case cupti::outcome::held:
        log::warn("profile: CUPTI is held by another subscriber ({}); falling back to "
                  "oversub's own launch hooks. Not seen then: launches made directly through "
                  "the driver API (cuLaunchKernel from cuBLAS, cuDNN and other libraries) and "
                  "kernel and copy durations (no activity records)",
                  detail);
        break;
      case cupti::outcome::unavailable:
        log::warn("profile: CUPTI unavailable ({}); falling back to oversub's own launch "
                  "hooks. Not seen then: driver-level launches and durations",
                  detail);
        break;
    }
  }

  bool cupti() const { return cupti_.load(std::memory_order_acquire); }
  // Once the profile is written nothing more is recorded: the run goes on at the
  // cost of the callbacks alone.
  bool done() const { return done_.load(std::memory_order_relaxed); }

  // ---- cupti::sink ----
  void runtime_launch(const void* func, void** args, std::uint32_t corr) override {
    if (done()) return;
    const function_info* f = runtime_function(func);
    if (f != nullptr) record_launch(*f, args, nullptr, corr);
  }
  void driver_launch(void* func, void** params, void** extra, const char* symbol,
                     std::uint32_t corr) override {
    if (done()) return;
    const function_info* f = driver_cache_.lookup(func);
    if (f == nullptr) {
      function_info info;
      const char* name = symbol;
      if (name == nullptr && q_.driver_name != nullptr && q_.driver_name(&name, func) != 0) {
        name = nullptr;
      }
      if (name == nullptr && q_.kernel_name != nullptr && q_.kernel_name(&name, func) != 0) {
        name = nullptr;
      }
      info.id = rec_.add_function(demangle(name));
      info.unreadable = !probe_driver_params(q_, func, info.params);
      f = driver_cache_.insert(func, std::move(info));
    }
    record_launch(*f, params, extra, corr);
  }
  void copy(copy_kind kind, std::uint64_t bytes, const void* dst, const void* src,
            std::uint32_t corr) override {
    if (done()) return;
    const auto d = reinterpret_cast<std::uint64_t>(dst);
    const auto s = reinterpret_cast<std::uint64_t>(src);
    std::uint64_t base[1] = {0};
    if (kind == copy_kind::other) {
      const bool dd = live_.scan(&d, 1, base) == 1;
      std::uint64_t sb[1] = {0};
      const bool sd = src != nullptr && live_.scan(&s, 1, sb) == 1;
      kind = dd && sd ? copy_kind::d2d : dd ? copy_kind::h2d : sd ? copy_kind::d2h : copy_kind::other;
      if (!dd) base[0] = sb[0];
    } else {
      const std::uint64_t device_side = kind == copy_kind::d2h ? s : d;
      live_.scan(&device_side, 1, base);
    }
    rec_.on_copy(kind, bytes, base[0], corr);
  }
  void kernel_time(std::uint32_t corr, std::uint64_t, std::uint64_t ns) override {
    rec_.on_kernel_time(corr, ns);
  }
  void copy_time(std::uint32_t corr, copy_kind kind, std::uint64_t bytes, std::uint64_t ns,
                 bool) override {
    rec_.on_copy_time(corr, kind, bytes, ns);
  }

  // ---- the interposer's side ----
  void alloc(std::uint64_t base, std::uint64_t bytes) {
    if (done()) return;
    void* frames[call_site_depth];
    int n = unwind_ != nullptr ? unwind_(frames, call_site_depth)
                               : ::backtrace(frames, call_site_depth);
    if (n < 0) n = 0;
    std::uintptr_t pcs[call_site_depth];
    for (int i = 0; i < n; ++i) pcs[i] = reinterpret_cast<std::uintptr_t>(frames[i]);
    rec_.on_alloc(base, bytes, pcs, static_cast<std::size_t>(n));
  }
  void free(std::uint64_t base) {
    if (!done()) rec_.on_free(base);
  }
  void iteration_begin() { rec_.on_iteration_begin(); }

  void progress() {
    if (done()) return;
    iteration_source how{};
    std::size_t period = 0;
    const std::uint32_t it = rec_.iterations(&how, &period);
    if (it != reported_) {
      reported_ = it;
      log::info("profile: {} iteration{} seen ({} launches each, {}), {} launches",
                it, it == 1 ? "" : "s", period, to_string(how), rec_.launches());
    }
    if (target_ != 0 && it >= target_ && !done()) write();
  }

  void write() {
    std::lock_guard<std::mutex> lock(write_mutex_);
    if (written_) return;
    written_ = true;
    cupti::flush();
    done_.store(true, std::memory_order_relaxed);
    device_figures dev;
    const std::uint64_t limit = live_.limit(0);
    dev.capacity_bytes = limit != tracker::no_limit ? std::min(limit, capacity_) : capacity_;
    std::string why;
    const std::optional<profile> p = rec_.build(dev, cupti(), program_, &resolve_frame, &why);
    if (!p) {
      log::warn("profile: nothing written to {}: {}", out_, why);
      return;
    }
    std::string error;
    if (!write_file(*p, out_, &error)) {
      log::warn("profile: could not write {}: {}", out_, error);
      return;
    }
    log::write_raw(fmt::format(
        "oversub: profile: wrote {}: one iteration of {} launches ({}, {} iterations seen), "
        "{} buffers, {} copies; launches seen through {}\n",
        out_, p->launches.size(), to_string(p->source), p->iterations_seen,
        p->allocations.size(), p->copies.size(), p->cupti ? "CUPTI" : "oversub's hooks"));
  }

  // See Note [Probing leaves no error behind] (session.h): with an error pending, the
  // launch is recorded without a buffer set, marked unreadable, and the function
  // probed at a later one.
  const function_info* runtime_function(const void* func) {
    const function_info* f = runtime_cache_.lookup(func);
    if (f != nullptr) return f;
    const bool can_probe = q_.runtime_peek_error != nullptr && q_.runtime_peek_error() == 0;
    function_info info;
    const char* name = nullptr;
    if (q_.runtime_name != nullptr && can_probe) q_.runtime_name(&name, func);
    info.id = rec_.add_function(demangle(name));
    if (!probe_runtime_params(q_, func, info.params, &info.unreadable)) {
      info.unreadable = true;  // not probed: its buffers are not known at this launch
      unprobed_ = info;
      return &unprobed_;
    }
    return runtime_cache_.insert(func, std::move(info));
  }

  void record_launch(const function_info& f, void** args, void** extra, std::uint32_t corr) {
    const void* packed = nullptr;
    std::size_t packed_bytes = 0;
    if (args == nullptr && extra != nullptr) packed = packed_arguments(extra, &packed_bytes);
    profiler::record_launch(f, args, packed, packed_bytes, live_, rec_, corr);
  }

 private:
  static std::string demangle(const char* name) {
    if (name == nullptr) return "<unnamed kernel>";
    int status = 0;
    char* d = abi::__cxa_demangle(name, nullptr, nullptr, &status);
    std::string out = status == 0 && d != nullptr ? std::string(d) : std::string(name);
    std::free(d);
    return out;
  }

  static recorder::frame_info resolve_frame(std::uintptr_t pc) {
    recorder::frame_info f;
    Dl_info mine{}, info{};
    dladdr(reinterpret_cast<void*>(&resolve_frame), &mine);
    if (dladdr(reinterpret_cast<void*>(pc - 1), &info) == 0) {
      f.module = "?";
      f.offset = pc;
      return f;
    }
    f.skip = info.dli_fbase == mine.dli_fbase;
    f.module = info.dli_fname != nullptr ? info.dli_fname : "?";
    f.offset = pc - reinterpret_cast<std::uintptr_t>(info.dli_fbase);
    if (info.dli_sname != nullptr) f.symbol = demangle(info.dli_sname);
    return f;
  }

  tracker& live_;
  cuda_queries q_;
  std::uint64_t capacity_;
  recorder rec_;
  std::string out_;
  std::uint64_t target_;
  std::string program_;
  unw_backtrace_t unwind_ = nullptr;
  std::atomic<bool> cupti_{false};
  function_cache runtime_cache_;
  function_cache driver_cache_;
  thread_local static function_info unprobed_;
  std::mutex write_mutex_;
  bool written_ = false;
  std::atomic<bool> done_{false};
  std::uint32_t reported_ = 0;
};

thread_local function_info session::unprobed_;

std::atomic<session*> g_session{nullptr};
std::atomic<bool> g_starting{false};
std::atomic<bool> g_forked{false};

void on_fork_child() { g_forked.store(true, std::memory_order_relaxed); }

void at_exit() {
  if (g_forked.load(std::memory_order_relaxed)) return;
  finish();
}

session* get() { return g_session.load(std::memory_order_acquire); }

}  // namespace

bool probe_driver_params(const cuda_queries& q, void* func,
                         std::vector<param_slot>& out) noexcept {
  using query_t = int (*)(void*, std::size_t, std::size_t*, std::size_t*);
  constexpr int no_such_parameter = 1;  // CUDA_ERROR_INVALID_VALUE
  query_t query = q.driver_param_info;
  std::size_t off = 0, size = 0;
  int answer = query == nullptr ? -1 : query(func, 0, &off, &size);
  if (answer != 0) {
    // A CUkernel passed as a CUfunction (or a function without parameters).
    const bool none = answer == no_such_parameter;
    query = q.kernel_param_info;
    answer = query == nullptr ? -1 : query(func, 0, &off, &size);
    if (answer != 0) return none || answer == no_such_parameter;
  }
  try {
    out.push_back(param_slot{static_cast<std::uint32_t>(off), static_cast<std::uint32_t>(size)});
    for (std::size_t i = 1; i < 1024; ++i) {
      if (query(func, i, &off, &size) != 0) break;
      out.push_back(param_slot{static_cast<std::uint32_t>(off), static_cast<std::uint32_t>(size)});
    }
  } catch (...) {
    out.clear();  // out of memory: no layout
    return false;
  }
  return true;
}

bool probe_runtime_params(const cuda_queries& q, const void* func,
                          std::vector<param_slot>& out, bool* unreadable) noexcept {
  if (q.runtime_peek_error == nullptr || q.runtime_take_error == nullptr ||
      q.runtime_peek_error() != 0) {
    return false;
  }
  constexpr int no_such_parameter = 1;  // cudaErrorInvalidValue
  int first = -1;
  if (q.runtime_param_info != nullptr) {
    for (std::size_t i = 0; i < 1024; ++i) {
      std::size_t off = 0, size = 0;
      const int answer = q.runtime_param_info(func, i, &off, &size);
      if (i == 0) first = answer;
      if (answer != 0) break;
      out.push_back(param_slot{static_cast<std::uint32_t>(off), static_cast<std::uint32_t>(size)});
    }
  }
  if (unreadable != nullptr) *unreadable = first != 0 && first != no_such_parameter;
  q.runtime_take_error();
  return true;
}

bool wanted(const config& cfg) noexcept {
  return cfg.mode != run_mode::off && !cfg.profile_out.empty();
}

void start(tracker& live, const cuda_queries& queries, std::uint64_t capacity_bytes) noexcept {
  if (get() != nullptr || g_starting.exchange(true)) return;
  try {
    auto* s = new session(live, queries, capacity_bytes, current_config());
    s->attach_cupti();
    g_session.store(s, std::memory_order_release);
    ::pthread_atfork(nullptr, nullptr, &on_fork_child);
    std::atexit(&at_exit);
  } catch (...) {
    log::error("profile: the profiler could not start (out of memory); running without it");
  }
}

bool running() noexcept { return get() != nullptr; }

bool hooks_feed_launches() noexcept {
  session* s = get();
  return s != nullptr && !s->cupti();
}

void on_alloc(std::uint64_t base, std::uint64_t bytes) noexcept {
  if (session* s = get()) {
    try {
      s->alloc(base, bytes);
    } catch (...) {
    }
  }
}

void on_free(std::uint64_t base) noexcept {
  if (session* s = get()) {
    try {
      s->free(base);
    } catch (...) {
    }
  }
}

void on_hook_launch(const void* func, void** args) noexcept {
  session* s = get();
  if (s == nullptr || s->cupti() || s->done()) return;
  try {
    if (const function_info* f = s->runtime_function(func)) s->record_launch(*f, args, nullptr, 0);
  } catch (...) {
  }
}

void on_hook_copy(copy_kind kind, std::uint64_t bytes, const void* dst,
                  const void* src) noexcept {
  session* s = get();
  if (s == nullptr || s->cupti()) return;
  try {
    s->copy(kind, bytes, dst, src, 0);
  } catch (...) {
  }
}

void iteration_begin() noexcept {
  if (session* s = get()) {
    try {
      s->iteration_begin();
    } catch (...) {
    }
  }
}

void after_call() noexcept {
  if (session* s = get()) {
    try {
      s->progress();
    } catch (...) {
    }
  }
}

namespace {
const profile* g_input = nullptr;
}  // namespace

const profile* loaded_input() noexcept { return g_input; }

void load_input(const std::string& path) noexcept {
  try {
    auto r = read_file(path);
    if (const format_error* e = std::get_if<format_error>(&r)) {
      log::warn("profile: {}={} refused: {}; running without it",
              current_config().profile == path ? "OVERSUB_PROFILE" : "OVERSUB_PROFILE_IN",
              path, e->message);
      return;
    }
    const profile& p = std::get<profile>(r);
    // See Note [Which program a profile is of] in profiler/profile_format.h.
    const std::string exe = this_executable();
    if (!exe.empty() && !same_program(p, exe)) {
      const config& cfg = current_config();
      log::warn("profile: {}={} refused: it is a profile of {}, and this program is {}; "
                "running without it (profile this program with OVERSUB_PROFILE_OUT or "
                "OVERSUB_PROFILE)",
                cfg.profile == path ? "OVERSUB_PROFILE" : "OVERSUB_PROFILE_IN", path,
                p.program, exe);
      return;
    }
    log::info("profile: loaded {}: one iteration of {} launches ({}), {} buffers", path,
              p.launches.size(), to_string(p.source), p.allocations.size());
    g_input = new profile(std::move(std::get<profile>(r)));  // never freed: hooks may run at exit
  } catch (...) {
    log::warn("profile: {} could not be read (out of memory); running without it", path);
  }
}

void finish() noexcept {
  if (session* s = get()) {
    try {
      s->write();
    } catch (...) {
      log::error("profile: writing the profile failed (out of memory)");
    }
  }
}

}  // namespace oversub::profiler
