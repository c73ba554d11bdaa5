// device_allocator.h: how simtrain gets device memory, in the two ways frameworks do.
//
// direct_allocator: every tensor is its own cudaMalloc, freed with cudaFree (a
// framework with its cache off). cudaFree synchronises the device, so a buffer used
// on two streams needs nothing more.
//
// caching_allocator: a small stream-ordered caching allocator in the manner of
// PyTorch's CUDACachingAllocator:
//   - sizes are rounded up to a multiple of 512 bytes;
//   - requests up to 1 MiB come from the small pool, carved out of 2 MiB segments;
//     larger ones from the large pool, out of 20 MiB segments (below 10 MiB) or a
//     segment of their own rounded to 2 MiB;
//   - a free block is found by best fit among the blocks of the same pool and the
//     same stream (smallest size, then lowest address); a block bigger than needed
//     is split when the rest is at least 512 bytes (small pool) or more than 1 MiB
//     (large pool);
//   - a freed block merges with free neighbours of its segment and goes back to the
//     free list of the stream it was allocated on;
//   - a block also used on other streams (record_stream) gets, when freed, one event
//     recorded on each of those streams; whoever allocates it next makes its stream
//     wait on them, so the reuse is ordered after every use;
//   - segments are never returned to CUDA until release_all() at exit.
//   - as a CUDA graph's private pool (begin_capture/end_capture, --graphs): see
//     See Note [Allocating during capture].
// async_allocator: every tensor is a cudaMallocAsync on the stream it is made on and
// a cudaFreeAsync when it dies, as PyTorch's CUDAMallocAsyncAllocator drives CUDA
// (PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocAsync):
//   - at the first allocation, the device's default pool is told to keep what is
//     freed (cudaMemPoolAttrReleaseThreshold UINT64_MAX) and to reuse by event
//     dependencies, opportunistically and with internal dependencies;
//   - a tensor used only on its own stream is freed on that stream;
//   - one also used on other streams (record_stream) is freed on a stream of the
//     allocator's own, made to wait (an event each) for its own stream and each of the
//     others first, so the reuse CUDA makes of it is ordered after every use;
//   - empty_cache() trims the pool to nothing (cudaMemPoolTrimTo), as
//     torch.cuda.empty_cache() does with that backend.
//   Not for a graph capture (PyTorch defers some frees across one; simtrain's graphs
//   use their own caching_allocator).
// peak_bytes() counts what the workload holds from cudaMalloc: live tensor bytes
// (direct, async) or segment bytes (caching).
//
// alloc_trace (--trace-allocs) writes every cudaMalloc and cudaFree either
// allocator makes, i.e. what an interposer such as oversub sees, in the trace
// format of docs/trace-format.md, with a marker where each iteration starts.
#ifndef SIMTRAIN_DEVICE_ALLOCATOR_H
#define SIMTRAIN_DEVICE_ALLOCATOR_H

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <set>
#include <string>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "gpu_compat.h"

class alloc_trace {
 public:
  // Opens path for writing (exit status 2 with a message if it cannot) and writes
  // the header; source names the run (the command line).
  alloc_trace(const std::string& path, const std::string& source) {
    file_ = std::fopen(path.c_str(), "w");
    if (file_ == nullptr) {
      std::fprintf(stderr, "simtrain: cannot write the allocation trace '%s'\n", path.c_str());
      std::exit(2);
    }
    std::fprintf(file_, "# oversub allocation trace v1\n# source: %s\n", source.c_str());
    std::fprintf(file_, "# what: every cudaMalloc/cudaFree simtrain makes (--trace-allocs)\n");
  }
  alloc_trace(const alloc_trace&) = delete;
  alloc_trace& operator=(const alloc_trace&) = delete;
  ~alloc_trace() { std::fclose(file_); }

  void allocated(const void* p, std::size_t bytes) {
    ids_[p] = next_id_;
    std::fprintf(file_, "a %llu %zu\n", static_cast<unsigned long long>(next_id_++), bytes);
  }
  void freed(const void* p) {
    auto it = ids_.find(p);
    if (it == ids_.end()) return;
    std::fprintf(file_, "f %llu\n", static_cast<unsigned long long>(it->second));
    ids_.erase(it);
  }
  void iteration(int n) { std::fprintf(file_, "i %d\n", n); }

 private:
  std::FILE* file_ = nullptr;
  std::unordered_map<const void*, std::uint64_t> ids_;
  std::uint64_t next_id_ = 0;
};

class device_allocator {
 public:
  virtual ~device_allocator() = default;
  // bytes > 0, to be used first on stream.
  virtual void* allocate(std::size_t bytes, cudaStream_t stream) = 0;
  // p (from allocate) is also used on stream; its reuse must wait for that use.
  virtual void record_stream(void* p, cudaStream_t stream) = 0;
  virtual void deallocate(void* p) = 0;
  // Returns every cached segment to CUDA; nothing may be allocated any more.
  virtual void release_all() {}
  // Returns the cached memory no tensor uses to CUDA, as torch.cuda.empty_cache();
  // a no-op where nothing is cached or segments are kept.
  virtual void empty_cache() {}
  std::size_t peak_bytes() const { return peak_bytes_; }
  // Every later cudaMalloc/cudaFree goes to trace (nullptr: none). Not owned.
  void set_trace(alloc_trace* trace) { trace_ = trace; }

 protected:
  // record_stream's bookkeeping: stream joins others unless it is own or already there.
  static void add_other_stream(std::vector<cudaStream_t>& others, cudaStream_t own,
                               cudaStream_t stream) {
    if (stream != own && std::find(others.begin(), others.end(), stream) == others.end()) {
      others.push_back(stream);
    }
  }
  // Called after each cudaMalloc and before each cudaFree of the allocator.
  void add_held(void* p, std::size_t bytes) {
    held_bytes_ += bytes;
    peak_bytes_ = std::max(peak_bytes_, held_bytes_);
    if (trace_ != nullptr) trace_->allocated(p, bytes);
  }
  void remove_held(void* p, std::size_t bytes) {
    held_bytes_ -= bytes;
    if (trace_ != nullptr) trace_->freed(p);
  }

 private:
  alloc_trace* trace_ = nullptr;
  std::size_t held_bytes_ = 0;
  std::size_t peak_bytes_ = 0;
};

class direct_allocator final : public device_allocator {
 public:
  void* allocate(std::size_t bytes, cudaStream_t) override {
    void* p = nullptr;
    ::gpu::check(gpu::device_malloc(&p, bytes), gpu::device_malloc_call(), __FILE__, __LINE__);
    sizes_[p] = bytes;
    add_held(p, bytes);
    return p;
  }
  void record_stream(void*, cudaStream_t) override {}
  void deallocate(void* p) override {
    auto it = sizes_.find(p);
    remove_held(p, it->second);
    CUDA_CHECK(gpu::device_free(p));
    sizes_.erase(it);
  }

 private:
  std::unordered_map<void*, std::size_t> sizes_;
};

class async_allocator final : public device_allocator {
 public:
  async_allocator() = default;
  async_allocator(const async_allocator&) = delete;
  async_allocator& operator=(const async_allocator&) = delete;
  ~async_allocator() override {
    if (unifier_ != nullptr) CUDA_CHECK(cudaStreamDestroy(unifier_));
  }

  void* allocate(std::size_t bytes, cudaStream_t stream) override {
    init();
    void* p = nullptr;
    CUDA_CHECK(cudaMallocAsync(&p, bytes, stream));
    live_[p] = tensor{bytes, stream, {}};
    add_held(p, bytes);
    return p;
  }

  void record_stream(void* p, cudaStream_t stream) override {
    tensor& t = live_.at(p);
    add_other_stream(t.other_streams, t.stream, stream);
  }

  void deallocate(void* p) override {
    auto it = live_.find(p);
    const tensor& t = it->second;
    remove_held(p, t.bytes);
    if (t.other_streams.empty()) {
      CUDA_CHECK(cudaFreeAsync(p, t.stream));
    } else {
      wait_for(t.stream);
      for (cudaStream_t s : t.other_streams) wait_for(s);
      CUDA_CHECK(cudaFreeAsync(p, unifier_));
    }
    live_.erase(it);
  }

  void release_all() override {
    CUDA_CHECK(cudaDeviceSynchronize());
    while (!live_.empty()) deallocate(live_.begin()->first);
    CUDA_CHECK(cudaDeviceSynchronize());
  }

  void empty_cache() override {
    if (pool_ == nullptr) return;
    CUDA_CHECK(cudaDeviceSynchronize());
    CUDA_CHECK(cudaMemPoolTrimTo(pool_, 0));
  }

 private:
  struct tensor {
    std::size_t bytes = 0;
    cudaStream_t stream = nullptr;               // made on, first used on
    std::vector<cudaStream_t> other_streams;     // record_stream
  };

  void init() {
    if (pool_ != nullptr) return;
    int device = 0;
    CUDA_CHECK(cudaGetDevice(&device));
    CUDA_CHECK(cudaDeviceGetDefaultMemPool(&pool_, device));
    std::uint64_t keep_all = UINT64_MAX;
    CUDA_CHECK(cudaMemPoolSetAttribute(pool_, cudaMemPoolAttrReleaseThreshold, &keep_all));
    int on = 1;
    CUDA_CHECK(cudaMemPoolSetAttribute(pool_, cudaMemPoolReuseFollowEventDependencies, &on));
    CUDA_CHECK(cudaMemPoolSetAttribute(pool_, cudaMemPoolReuseAllowOpportunistic, &on));
    CUDA_CHECK(cudaMemPoolSetAttribute(pool_, cudaMemPoolReuseAllowInternalDependencies, &on));
    CUDA_CHECK(cudaStreamCreateWithFlags(&unifier_, cudaStreamNonBlocking));
  }

  // The allocator's stream waits for the work enqueued so far on s.
  void wait_for(cudaStream_t s) {
    cudaEvent_t e = nullptr;
    CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
    CUDA_CHECK(cudaEventRecord(e, s));
    CUDA_CHECK(cudaStreamWaitEvent(unifier_, e, 0));
    CUDA_CHECK(cudaEventDestroy(e));
  }

  cudaMemPool_t pool_ = nullptr;
  cudaStream_t unifier_ = nullptr;
  std::unordered_map<void*, tensor> live_;
};

class caching_allocator final : public device_allocator {
 public:
  static constexpr std::size_t kMinBlockBytes = 512;
  static constexpr std::size_t kSmallRequestBytes = 1 << 20;   // 1 MiB
  static constexpr std::size_t kSmallSegmentBytes = 2 << 20;   // 2 MiB
  static constexpr std::size_t kMinLargeAllocBytes = 10 << 20; // 10 MiB
  static constexpr std::size_t kLargeSegmentBytes = 20 << 20;  // 20 MiB
  static constexpr std::size_t kRoundLargeBytes = 2 << 20;     // 2 MiB

  caching_allocator() = default;
  caching_allocator(const caching_allocator&) = delete;
  caching_allocator& operator=(const caching_allocator&) = delete;
  ~caching_allocator() override {
    for (block* b : all_blocks()) delete b;
  }

  // Note [Allocating during capture]
  // ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
  // As PyTorch's CUDACachingAllocator serves a stream capture from the graph's
  // private pool (CUDAGraph::capture_begin, cudaMallocMaybeCapturing):
  //   - the pool is this allocator, used for nothing but the captured step, so a
  //     replay finds every block where the capture put it;
  //   - a new segment during capture is a real cudaMalloc, made with the thread's
  //     capture mode exchanged to cudaStreamCaptureModeRelaxed
  //     (cudaThreadExchangeStreamCaptureMode): the capture itself runs in
  //     cudaStreamCaptureModeGlobal, where cudaMalloc would invalidate it. The
  //     memory is allocated once, at capture; replays allocate nothing;
  //   - a block freed during capture goes back to the pool's free list and may serve
  //     a later request of the capture (stream order within the graph makes that
  //     safe), except one also used on another stream: its reuse is deferred to
  //     end_capture (PyTorch's needs_events_deferred_until_no_capture), since an
  //     event recorded and waited on inside the capture would order nothing at
  //     replay against the other stream's use;
  //   - nothing is returned to CUDA before the graph is destroyed (release_all).
  void begin_capture() { capturing_ = true; }
  void end_capture() {
    capturing_ = false;
    std::vector<block*> deferred;
    deferred.swap(deferred_);
    for (block* b : deferred) free_block(b);
  }

  void* allocate(std::size_t bytes, cudaStream_t stream) override {
    std::size_t size = round_size(bytes);
    bool small = size <= kSmallRequestBytes;
    pool& p = small ? small_pool_ : large_pool_;
    block* b = take_best_fit(p, size, stream);
    if (b == nullptr) b = new_segment(size, stream, small);
    if (should_split(b, size)) split(p, b, size);
    b->allocated = true;
    for (const auto& ev : b->reuse_after) {
      CUDA_CHECK(cudaStreamWaitEvent(stream, ev->event, 0));
    }
    b->reuse_after.clear();
    allocated_[b->ptr] = b;
    return b->ptr;
  }

  void record_stream(void* ptr, cudaStream_t stream) override {
    block* b = allocated_.at(ptr);
    add_other_stream(b->other_streams, b->stream, stream);
  }

  void deallocate(void* ptr) override {
    auto it = allocated_.find(ptr);
    block* b = it->second;
    allocated_.erase(it);
    if (capturing_ && !b->other_streams.empty()) {
      deferred_.push_back(b);
      return;
    }
    free_block(b);
  }

  void release_all() override {
    CUDA_CHECK(cudaDeviceSynchronize());
    end_capture();
    for (block* b : all_blocks()) {
      if (b->prev == nullptr) {
        remove_held(b->ptr, b->segment_size);
        CUDA_CHECK(gpu::device_free(b->ptr));
      }
      delete b;
    }
    small_pool_.free_blocks.clear();
    large_pool_.free_blocks.clear();
    allocated_.clear();
  }

 private:
  struct owned_event {
    cudaEvent_t event = nullptr;
    owned_event() = default;
    owned_event(const owned_event&) = delete;
    owned_event& operator=(const owned_event&) = delete;
    ~owned_event() {
      if (event != nullptr) CUDA_CHECK(cudaEventDestroy(event));
    }
  };

  struct block {
    void* ptr = nullptr;
    std::size_t size = 0;          // bytes
    std::size_t segment_size = 0;  // bytes; set on a segment's first block
    cudaStream_t stream = nullptr;
    bool small = true;
    bool allocated = false;
    block* prev = nullptr;  // neighbours within the segment
    block* next = nullptr;
    std::vector<cudaStream_t> other_streams;
    std::vector<std::shared_ptr<owned_event>> reuse_after;
  };

  struct by_stream_size_address {
    bool operator()(const block* a, const block* b) const {
      auto key = [](const block* x) {
        return std::make_tuple(reinterpret_cast<std::uintptr_t>(x->stream), x->size,
                               reinterpret_cast<std::uintptr_t>(x->ptr));
      };
      return key(a) < key(b);
    }
  };

  struct pool {
    std::set<block*, by_stream_size_address> free_blocks;
  };

  // Returns b to its pool's free list, merged with its free neighbours.
  void free_block(block* b) {
    for (cudaStream_t s : b->other_streams) {
      auto ev = std::make_shared<owned_event>();
      CUDA_CHECK(cudaEventCreateWithFlags(&ev->event, cudaEventDisableTiming));
      CUDA_CHECK(cudaEventRecord(ev->event, s));
      b->reuse_after.push_back(std::move(ev));
    }
    b->other_streams.clear();
    b->allocated = false;
    pool& p = b->small ? small_pool_ : large_pool_;
    b = merge(p, b, b->prev);
    b = merge(p, b, b->next);
    p.free_blocks.insert(b);
  }

  static std::size_t round_size(std::size_t bytes) {
    return (bytes + kMinBlockBytes - 1) / kMinBlockBytes * kMinBlockBytes;
  }

  static std::size_t segment_size_for(std::size_t size) {
    if (size <= kSmallRequestBytes) return kSmallSegmentBytes;
    if (size < kMinLargeAllocBytes) return kLargeSegmentBytes;
    return (size + kRoundLargeBytes - 1) / kRoundLargeBytes * kRoundLargeBytes;
  }

  static bool should_split(const block* b, std::size_t size) {
    std::size_t rest = b->size - size;
    return b->small ? rest >= kMinBlockBytes : rest > kSmallRequestBytes;
  }

  static block* take_best_fit(pool& p, std::size_t size, cudaStream_t stream) {
    block key;
    key.stream = stream;
    key.size = size;
    auto it = p.free_blocks.lower_bound(&key);
    if (it == p.free_blocks.end() || (*it)->stream != stream) return nullptr;
    block* b = *it;
    p.free_blocks.erase(it);
    return b;
  }

  block* new_segment(std::size_t size, cudaStream_t stream, bool small) {
    std::size_t bytes = segment_size_for(size);
    void* ptr = nullptr;
    cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;
    if (capturing_) CUDA_CHECK(cudaThreadExchangeStreamCaptureMode(&mode));
    const cudaError_t err = gpu::device_malloc(&ptr, bytes);
    if (capturing_) CUDA_CHECK(cudaThreadExchangeStreamCaptureMode(&mode));
    ::gpu::check(err, gpu::device_malloc_call(), __FILE__, __LINE__);
    add_held(ptr, bytes);
    auto* b = new block;
    b->ptr = ptr;
    b->size = bytes;
    b->segment_size = bytes;
    b->stream = stream;
    b->small = small;
    return b;
  }

  static void split(pool& p, block* b, std::size_t size) {
    auto* rest = new block;
    rest->ptr = static_cast<char*>(b->ptr) + size;
    rest->size = b->size - size;
    rest->stream = b->stream;
    rest->small = b->small;
    rest->reuse_after = b->reuse_after;
    rest->prev = b;
    rest->next = b->next;
    if (b->next != nullptr) b->next->prev = rest;
    b->next = rest;
    b->size = size;
    p.free_blocks.insert(rest);
  }

  // Merges the free neighbour n into b (whichever comes first keeps the address);
  // returns the surviving block.
  static block* merge(pool& p, block* b, block* n) {
    if (n == nullptr || n->allocated) return b;
    p.free_blocks.erase(n);
    block* first = n == b->prev ? n : b;
    block* second = first == b ? n : b;
    first->size += second->size;
    first->next = second->next;
    if (second->next != nullptr) second->next->prev = first;
    for (const auto& ev : second->reuse_after) {
      if (std::find(first->reuse_after.begin(), first->reuse_after.end(), ev) ==
          first->reuse_after.end()) {
        first->reuse_after.push_back(ev);
      }
    }
    delete second;
    return first;
  }

  std::vector<block*> all_blocks() const {
    std::vector<block*> out;
    for (const pool* p : {&small_pool_, &large_pool_}) {
      out.insert(out.end(), p->free_blocks.begin(), p->free_blocks.end());
    }
    for (const auto& [ptr, b] : allocated_) out.push_back(b);
    out.insert(out.end(), deferred_.begin(), deferred_.end());
    return out;
  }

  pool small_pool_;
  pool large_pool_;
  std::unordered_map<void*, block*> allocated_;
  bool capturing_ = false;
  std::vector<block*> deferred_;  // freed during capture, reusable after it
};

#endif  // SIMTRAIN_DEVICE_ALLOCATOR_H
