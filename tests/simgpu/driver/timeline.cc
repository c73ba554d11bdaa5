// See Note [The timeline] in tests/simgpu/driver/timeline.h (see timeline.h).
#include "timeline.h"

#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <set>
#include <string>

#include "config.h"

namespace simgpu {

namespace {

struct timeline_file {
  std::mutex mutex;
  FILE* out = nullptr;
  bool first = true;
  std::set<int> named_threads;  // host threads whose track has its name
};

void close_timeline();

timeline_file* file() {
  static timeline_file* f = [] {
    const std::string& path = get_config().timeline;
    if (path.empty()) return static_cast<timeline_file*>(nullptr);
    FILE* out = std::fopen(path.c_str(), "w");
    if (out == nullptr) {
      std::fprintf(stderr, "simgpu: SIMGPU_TIMELINE: cannot write %s\n", path.c_str());
      return static_cast<timeline_file*>(nullptr);
    }
    auto* t = new timeline_file;  // never destroyed: work may run during exit
    t->out = out;
    std::fputs("[\n", out);
    std::atexit(close_timeline);
    return t;
  }();
  return f;
}

void close_timeline() {
  timeline_file* f = file();
  std::lock_guard<std::mutex> lock(f->mutex);
  if (f->out == nullptr) return;
  std::fputs(f->first ? "" : ",\n", f->out);
  std::fputs(R"({"name":"thread_name","ph":"M","pid":1,"tid":0,"args":{"name":"host"}})"
             "\n]\n",
             f->out);
  std::fclose(f->out);
  f->out = nullptr;
}

// JSON string contents: kernel names are C++ identifiers, but quote the two
// characters that would break the file.
std::string escaped(const char* s) {
  std::string r;
  for (; *s != '\0'; ++s) {
    if (*s == '"' || *s == '\\') r += '\\';
    if (static_cast<unsigned char>(*s) >= 0x20) r += *s;
  }
  return r;
}

// Host thread n's track: tid kHostThreadTid + n, so that it never meets a stream's.
constexpr int kHostThreadTid = 1000000;

void write_locked(timeline_file* f, const char* event) {
  if (!f->first) std::fputs(",\n", f->out);
  f->first = false;
  std::fputs(event, f->out);
}

// host_ordinal > 0: the event is on that host thread's track, named at its first event.
void write_event(const std::string& event, int host_ordinal = 0) {
  timeline_file* f = file();
  if (f == nullptr) return;
  std::lock_guard<std::mutex> lock(f->mutex);
  if (f->out == nullptr) return;
  if (host_ordinal > 0 && f->named_threads.insert(host_ordinal).second) {
    char name[160];
    std::snprintf(name, sizeof name,
                  R"({"name":"thread_name","ph":"M","pid":1,"tid":%d,)"
                  R"("args":{"name":"host thread %d calls"}})",
                  kHostThreadTid + host_ordinal, host_ordinal);
    write_locked(f, name);
  }
  write_locked(f, event.c_str());
}

}  // namespace

bool timeline_on() { return file() != nullptr; }

void timeline_op(const char* category, const char* name, uint64_t stream, double start_ns,
                 double end_ns, uint64_t bytes) {
  if (!timeline_on()) return;
  char buf[160];
  std::snprintf(buf, sizeof buf,
                R"(","cat":"%s","ph":"X","pid":1,"tid":%)" PRIu64
                R"(,"ts":%.3f,"dur":%.3f,"args":{"bytes":%)" PRIu64 "}}",
                category, stream + 1, start_ns / 1e3, (end_ns - start_ns) / 1e3, bytes);
  write_event(R"({"name":")" + escaped(name) + buf);
}

void timeline_host_wait(const char* what, double from_ns, double to_ns) {
  if (to_ns <= from_ns || !timeline_on()) return;
  char buf[160];
  std::snprintf(buf, sizeof buf,
                R"({"name":"%s","cat":"host wait","ph":"X","pid":1,"tid":0,"ts":%.3f,"dur":%.3f})",
                what, from_ns / 1e3, (to_ns - from_ns) / 1e3);
  write_event(buf);
}

void timeline_host_call(int ordinal, const char* what, double from_ns, double to_ns,
                        uint64_t bytes, uintptr_t va, const char* memory) {
  if (to_ns <= from_ns || !timeline_on()) return;
  char args[120];
  int n = std::snprintf(args, sizeof args, R"("bytes":%)" PRIu64, bytes);
  if (va != 0) n += std::snprintf(args + n, sizeof args - n, R"(,"va":"0x%)" PRIxPTR "\"", va);
  if (memory != nullptr) std::snprintf(args + n, sizeof args - n, R"(,"memory":"%s")", memory);
  char buf[320];
  std::snprintf(buf, sizeof buf,
                R"({"name":"%s","cat":"host call","ph":"X","pid":1,"tid":%d,"ts":%.3f,)"
                R"("dur":%.3f,"args":{%s}})",
                what, kHostThreadTid + ordinal, from_ns / 1e3, (to_ns - from_ns) / 1e3, args);
  write_event(buf, ordinal);
}

}  // namespace simgpu
