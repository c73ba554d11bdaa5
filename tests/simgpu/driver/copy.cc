// Copies, memsets and prefetches (see Note [Copy cost] in copy.h).
#include "copy.h"

#include <cupti_activity.h>
#include <sys/mman.h>

#include <algorithm>
#include <cinttypes>
#include <cstring>
#include <vector>

#include "address_space.h"
#include "callbacks.h"
#include "capture.h"
#include "device.h"
#include "fault.h"
#include "fault_injection.h"
#include "managed.h"
#include "timeline.h"

namespace simgpu {

namespace {

bool device_side(mem_place p) {
  return p == mem_place::device || p == mem_place::managed || p == mem_place::host_mapping;
}

int memory_kind(mem_place p) {
  switch (p) {
    case mem_place::pageable: return CUPTI_ACTIVITY_MEMORY_KIND_PAGEABLE;
    case mem_place::pinned: return CUPTI_ACTIVITY_MEMORY_KIND_PINNED;
    case mem_place::managed: return CUPTI_ACTIVITY_MEMORY_KIND_MANAGED;
    default: return CUPTI_ACTIVITY_MEMORY_KIND_DEVICE;
  }
}

// Opens the device pages under [p, p+bytes) for window w.
void open_device_range(device_window& w, uintptr_t p, uint64_t bytes) {
  uintptr_t at = p;
  uintptr_t hi = p + bytes;
  while (at < hi) {
    region* r = find_region(at);
    if (r == nullptr) return;
    uintptr_t end = std::min<uintptr_t>(hi, r->end());
    uintptr_t lo_page = round_down(at, g_host_page_bytes);
    uintptr_t hi_page = round_up(end, g_host_page_bytes);
    if (r->kind == region_kind::managed) {
      if (std::find(w.managed_touched.begin(), w.managed_touched.end(), r) ==
          w.managed_touched.end())
        w.managed_touched.push_back(r);
      protect(lo_page, hi_page - lo_page, PROT_READ | PROT_WRITE);
    } else {
      window_open(w, lo_page, hi_page - lo_page, PROT_READ | PROT_WRITE);
    }
    at = end;
  }
}

bool check_side(const char* what, uintptr_t p, uint64_t bytes, bool write) {
  uintptr_t bad = 0;
  char why[256];
  if (device_range_ok(p, bytes, write, &bad, why, sizeof why)) return true;
  log_line("%s accessed 0x%" PRIxPTR ": %s", what, bad, why);
  return false;
}

struct set_args {
  uintptr_t dst;
  uint32_t value;
  unsigned elem;
  uint64_t count;
};
void run_set(void* p) {
  auto* a = static_cast<set_args*>(p);
  if (a->elem == 1) {
    std::memset(reinterpret_cast<void*>(a->dst), static_cast<int>(a->value & 0xff), a->count);
  } else if (a->elem == 2) {
    auto* q = reinterpret_cast<uint16_t*>(a->dst);
    for (uint64_t i = 0; i < a->count; ++i) q[i] = static_cast<uint16_t>(a->value);
  } else {
    auto* q = reinterpret_cast<uint32_t*>(a->dst);
    for (uint64_t i = 0; i < a->count; ++i) q[i] = a->value;
  }
}

// Note [Copies to host-located mappings]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// A VMM mapping of host memory has a device address, but its bytes are on the host: a
// copy between it and device memory crosses the host link on a copy engine at the
// pinned rate, as a pinned copy does. A copy's range may lie across several mappings,
// some resident and some host-located (a swap engine's pages; See Note [A range across
// mappings] in tests/simgpu/driver/address_space.cc), so a copy is costed byte by byte
// of where each is read and where it is written, not by its first byte: device to
// device at twice the bytes over the memory bandwidth, into the device at the inbound
// rate, out of it at the outbound rate, and host to host through the device (a
// host-located mapping on either side) at the slower of the two, the parts one after
// the other within the one operation. The copy runs on the engine of its largest part.
// A copy between two plain host buffers runs on the host at the pageable rate.
struct copy_parts {
  uint64_t on_device = 0;  // read and written in device memory
  uint64_t in = 0;         // read on the host, written to the device
  uint64_t out = 0;        // read on the device, written to the host
  uint64_t through = 0;    // read and written on the host by the device
};

// Adds n bytes copied from src to dst to `c`. `sdev`/`ddev`: the side has a device
// address (its host-located mappings are on the host, the rest on the device); a side
// without one is host memory throughout.
void add_copy_row(copy_parts& c, uintptr_t src, bool sdev, uintptr_t dst, bool ddev,
                  uint64_t n) {
  thread_local std::vector<byte_span> sh, dh;
  sh.clear();
  dh.clear();
  if (sdev)
    host_located_parts(src, n, &sh);
  else
    sh.push_back({0, n});
  if (ddev)
    host_located_parts(dst, n, &dh);
  else
    dh.push_back({0, n});
  uint64_t s_host = 0, d_host = 0, both = 0;
  for (const byte_span& x : sh) s_host += x.end - x.begin;
  for (const byte_span& x : dh) d_host += x.end - x.begin;
  for (size_t i = 0, j = 0; i < sh.size() && j < dh.size();) {
    const uint64_t lo = std::max(sh[i].begin, dh[j].begin);
    const uint64_t hi = std::min(sh[i].end, dh[j].end);
    if (lo < hi) both += hi - lo;
    if (sh[i].end < dh[j].end)
      ++i;
    else
      ++j;
  }
  c.through += both;
  c.in += s_host - both;
  c.out += d_host - both;
  c.on_device += n - s_host - d_host + both;
}

}  // namespace

CUresult do_copy(stream_obj* s, uintptr_t dst, uintptr_t src, uint64_t bytes, bool sync) {
  return do_copy_2d(s, dst, bytes, src, bytes, bytes, 1, sync);
}

namespace {
struct copy2d_args {
  uintptr_t dst, src;
  uint64_t dpitch, spitch, width, height;
};
void run_copy_2d(void* p) {
  auto* a = static_cast<copy2d_args*>(p);
  for (uint64_t row = 0; row < a->height; ++row)
    std::memmove(reinterpret_cast<void*>(a->dst + row * a->dpitch),
                 reinterpret_cast<const void*>(a->src + row * a->spitch), a->width);
}
}  // namespace

CUresult do_copy_2d(stream_obj* s, uintptr_t dst, uint64_t dpitch, uintptr_t src,
                    uint64_t spitch, uint64_t width, uint64_t height, bool sync) {
  if (width == 0 || height == 0) return CUDA_SUCCESS;
  if (dst == 0 || src == 0) return CUDA_ERROR_INVALID_VALUE;
  if (height > 1 && (dpitch < width || spitch < width)) return CUDA_ERROR_INVALID_VALUE;
  uint64_t bytes = width * height;
  uint64_t dspan = dpitch * (height - 1) + width;
  uint64_t sspan = spitch * (height - 1) + width;
  device_state& d = dev();
  mem_place sp = classify(src), dp = classify(dst);
  bool sdev = device_side(sp), ddev = device_side(dp);
  const char* kind = sdev ? (ddev ? "DtoD" : "DtoH") : (ddev ? "HtoD" : "HtoH");
  std::string what = std::string("memcpy ") + kind;
  if ((sdev && !check_side(what.c_str(), src, sspan, false)) ||
      (ddev && !check_side(what.c_str(), dst, dspan, true)))
    return CUDA_ERROR_INVALID_VALUE;
  bool record = false;
  if (CUresult g = capture_gate(s, &record); g != CUDA_SUCCESS) return g;
  if (record) {
    if (sync) return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
    capture_add(s, what, [=](stream_obj* on) {
      return do_copy_2d(on, dst, dpitch, src, spitch, width, height, false);
    });
    return CUDA_SUCCESS;
  }
  if (sync) {
    if (CUresult c = capture_unsafe_call(); c != CUDA_SUCCESS) return c;
  }
  if (CUresult f = inject_failure(fail_kind::copy); f != CUDA_SUCCESS) return f;

  device_window w;
  w.what = what.c_str();
  if (sdev) open_device_range(w, src, sspan);
  if (ddev) open_device_range(w, dst, dspan);
  copy2d_args ca{dst, src, dpitch, spitch, width, height};
  if (!run_in_window(w, &run_copy_2d, &ca)) return CUDA_ERROR_ILLEGAL_ADDRESS;

  const device_model& m = d.model;
  engine e = engine::none;
  double duration_ns = 0;
  bool pageable = false;
  int copy_kind = CUPTI_ACTIVITY_MEMCPY_KIND_HTOH;
  if (!sdev && !ddev) {
    pageable = true;
    duration_ns = static_cast<double>(bytes) / m.h2d_pageable_bytes_per_s * 1e9;
  } else {
    // See Note [Copies to host-located mappings].
    copy_parts c;
    bool contiguous = height == 1 || (spitch == width && dpitch == width);
    for (uint64_t row = 0; row < (contiguous ? 1 : height); ++row) {
      const uint64_t n = contiguous ? bytes : width;
      add_copy_row(c, src + row * spitch, sdev, dst + row * dpitch, ddev, n);
    }
    pageable = sp == mem_place::pageable || dp == mem_place::pageable;
    const double in_rate = sp == mem_place::pageable ? m.h2d_pageable_bytes_per_s
                                                     : m.h2d_pinned_bytes_per_s;
    const double out_rate = dp == mem_place::pageable ? m.d2h_pageable_bytes_per_s
                                                      : m.d2h_pinned_bytes_per_s;
    const double on_device_ns = 2.0 * static_cast<double>(c.on_device) / m.mem_bytes_per_s * 1e9;
    const double in_ns = static_cast<double>(c.in) / in_rate * 1e9;
    const double out_ns = static_cast<double>(c.out) / out_rate * 1e9;
    const double through_ns =
        static_cast<double>(c.through) / std::min(in_rate, out_rate) * 1e9;
    duration_ns = on_device_ns + in_ns + out_ns + through_ns;
    d.st.d2d_bytes += c.on_device;
    d.st.h2d_bytes += c.in + c.through;
    d.st.d2h_bytes += c.out + c.through;
    if (on_device_ns >= in_ns + through_ns && on_device_ns >= out_ns) {
      e = engine::compute;
      copy_kind = CUPTI_ACTIVITY_MEMCPY_KIND_DTOD;
    } else if (out_ns > in_ns + through_ns) {
      e = engine::d2h;
      copy_kind = CUPTI_ACTIVITY_MEMCPY_KIND_DTOH;
    } else {
      e = engine::h2d;
      copy_kind = CUPTI_ACTIVITY_MEMCPY_KIND_HTOD;
    }
  }
  const double copy_ns = m.copy_latency_ns + duration_ns;
  double start = engine_take(e, op_begin(s, e, 0, call_cost::copy), copy_ns);
  double end = start + copy_ns;
  op_end(s, e, end);
  ++d.st.copies;
  timeline_op("copy",
              e == engine::h2d   ? "copy to device"
              : e == engine::d2h ? "copy to host"
                                 : "copy on device",
              s->id, start, end, bytes);
  auto desc = std::make_shared<const std::string>(what + " on " + stream_name(s));
  bool contiguous = height == 1 || (spitch == width && dpitch == width);
  for (uint64_t row = 0; row < (contiguous ? 1 : height); ++row) {
    uint64_t n = contiguous ? bytes : width;
    race_access(s, src + row * spitch, n, false, desc);
    race_access(s, dst + row * dpitch, n, true, desc);
  }
  if (sync || pageable) host_wait_stream(s);
  if (activity_sink_installed()) {
    simgpuActivity rec{};
    rec.kind = SIMGPU_ACTIVITY_MEMCPY;
    rec.start_ns = static_cast<uint64_t>(start);
    rec.end_ns = static_cast<uint64_t>(end);
    rec.correlationId = current_correlation_id();
    rec.streamId = static_cast<uint32_t>(s->id);
    rec.contextId = 1;
    rec.bytes = bytes;
    rec.copyKind = copy_kind;
    rec.srcKind = memory_kind(sp);
    rec.dstKind = memory_kind(dp);
    emit_activity(rec);
  }
  return CUDA_SUCCESS;
}

CUresult do_memset(stream_obj* s, uintptr_t dst, uint32_t value, unsigned elem_bytes,
                   uint64_t count, bool sync) {
  if (count == 0) return CUDA_SUCCESS;
  if (dst % elem_bytes != 0) return CUDA_ERROR_INVALID_VALUE;
  uint64_t bytes = count * elem_bytes;
  device_state& d = dev();
  const char* what = "memset";
  if (!device_side(classify(dst)) || !check_side(what, dst, bytes, true))
    return CUDA_ERROR_INVALID_VALUE;
  bool record = false;
  if (CUresult g = capture_gate(s, &record); g != CUDA_SUCCESS) return g;
  if (record) {
    if (sync) return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
    capture_add(s, what, [=](stream_obj* on) {
      return do_memset(on, dst, value, elem_bytes, count, false);
    });
    return CUDA_SUCCESS;
  }
  if (sync) {
    if (CUresult c = capture_unsafe_call(); c != CUDA_SUCCESS) return c;
  }
  device_window w;
  w.what = what;
  open_device_range(w, dst, bytes);
  set_args sa{dst, value, elem_bytes, count};
  if (!run_in_window(w, &run_set, &sa)) return CUDA_ERROR_ILLEGAL_ADDRESS;
  double start = op_begin(s, engine::compute, d.model.launch_latency_ns);
  double end = start + static_cast<double>(bytes) / d.model.mem_bytes_per_s * 1e9;
  op_end(s, engine::compute, end);
  ++d.st.memsets;
  timeline_op("memset", "memset", s->id, start, end, bytes);
  auto desc = std::make_shared<const std::string>(std::string(what) + " on " + stream_name(s));
  race_access(s, dst, bytes, true, desc);
  if (sync) host_wait_stream(s);
  if (activity_sink_installed()) {
    simgpuActivity rec{};
    rec.kind = SIMGPU_ACTIVITY_MEMSET;
    rec.start_ns = static_cast<uint64_t>(start);
    rec.end_ns = static_cast<uint64_t>(end);
    rec.correlationId = current_correlation_id();
    rec.streamId = static_cast<uint32_t>(s->id);
    rec.contextId = 1;
    rec.bytes = bytes;
    rec.dstKind = memory_kind(classify(dst));
    emit_activity(rec);
  }
  return CUDA_SUCCESS;
}

CUresult do_prefetch(stream_obj* s, uintptr_t p, uint64_t bytes, CUmemLocation loc) {
  device_state& d = dev();
  if (managed_region(p, bytes) == nullptr) return CUDA_ERROR_INVALID_VALUE;
  bool to_device;
  if (loc.type == CU_MEM_LOCATION_TYPE_DEVICE) {
    if (loc.id != 0) return CUDA_ERROR_INVALID_DEVICE;
    if (!d.model.concurrent_managed_access) return CUDA_ERROR_INVALID_DEVICE;
    to_device = true;
  } else if (loc.type == CU_MEM_LOCATION_TYPE_HOST || loc.type == CU_MEM_LOCATION_TYPE_HOST_NUMA ||
             loc.type == CU_MEM_LOCATION_TYPE_HOST_NUMA_CURRENT) {
    to_device = false;
  } else {
    return CUDA_ERROR_INVALID_VALUE;
  }
  bool record = false;
  if (CUresult g = capture_gate(s, &record); g != CUDA_SUCCESS) return g;
  if (!record) {
    if (CUresult f = inject_failure(fail_kind::prefetch); f != CUDA_SUCCESS) return f;
  }
  if (record) {
    capture_add(s, "prefetch", [=](stream_obj* on) { return do_prefetch(on, p, bytes, loc); });
    return CUDA_SUCCESS;
  }
  managed_note_prefetch(p, bytes, loc);  // recorded when enqueued, as in CUDA
  engine e = to_device ? engine::h2d : engine::d2h;
  double start = op_begin(s, e, 0);
  double evict_ns = 0;
  const uint64_t free_before = d.capacity_bytes > d.used_bytes ? d.capacity_bytes - d.used_bytes : 0;
  double pulled_ns = 0;  // Note [Migrations of pages in use] in managed.h
  uint64_t moved = managed_migrate_range(p, bytes, to_device, &evict_ns, start, &pulled_ns);
  engine_delay(engine::compute, pulled_ns);
  // See Note [Room from migrations to the host] in tests/simgpu/driver/managed.h.
  if (to_device && moved) start = managed_room_ready(start, moved, free_before);
  // See Note [Managed migration rates] in tests/simgpu/driver/device_model.cc.
  double rate = to_device ? d.model.managed_h2d_bytes_per_s : d.model.managed_d2h_bytes_per_s;
  const double move_ns = moved ? d.model.copy_latency_ns + moved / rate * 1e9 + evict_ns : 0;
  // Its copy engine is taken from when its room is there (Note [Copy engines serve
  // ready copies] in tests/simgpu/driver/clock.h); the pages in use were judged at
  // the earliest start, which only counts more of them.
  start = engine_take(e, start, move_ns);
  double end = start + move_ns;
  op_end(s, e, end);
  if (!to_device) managed_note_release(end, moved);
  if (moved) timeline_op("prefetch", to_device ? "prefetch to device" : "prefetch to host", s->id, start, end, moved);
  // See Note [Prefetches are migrations] in tests/simgpu/driver/managed.h.
  if (!d.model.concurrent_managed_access) {
    auto desc = std::make_shared<const std::string>(std::string("prefetch to ") +
                                                    (to_device ? "device" : "host") + " on " +
                                                    stream_name(s));
    race_access(s, p, bytes, false, desc);
  }
  return CUDA_SUCCESS;
}

CUresult do_discard(stream_obj* s, std::vector<std::pair<uintptr_t, uint64_t>> ranges) {
  device_state& d = dev();
  if (!d.model.concurrent_managed_access) return CUDA_ERROR_NOT_SUPPORTED;
  for (const auto& [p, bytes] : ranges) {
    if (managed_region(p, bytes) == nullptr) return CUDA_ERROR_INVALID_VALUE;
  }
  bool record = false;
  if (CUresult g = capture_gate(s, &record); g != CUDA_SUCCESS) return g;
  if (record) {
    capture_add(s, "discard", [=](stream_obj* on) { return do_discard(on, ranges); });
    return CUDA_SUCCESS;
  }
  if (CUresult f = inject_failure(fail_kind::discard); f != CUDA_SUCCESS) return f;
  // See Note [Discards] in tests/simgpu/driver/managed.h.
  const double start = op_begin(s, engine::none, 0);
  uint64_t released = 0;
  const auto desc = std::make_shared<const std::string>("discard on " + stream_name(s));
  for (const auto& [p, bytes] : ranges) {
    race_access(s, p, bytes, true, desc);
    released += managed_discard_range(p, bytes);
  }
  const double end = start + d.model.copy_latency_ns +
                     static_cast<double>(released / d.model.managed_page_bytes) *
                         d.model.managed_discard_page_ns;
  op_end(s, engine::none, end);
  managed_note_release(end, released);
  timeline_op("prefetch", "discard", s->id, start, end, released);
  return CUDA_SUCCESS;
}

}  // namespace simgpu
