#include "backend/allocator.h"

#include <c10/core/DeviceGuard.h>
#include <c10/util/Exception.h>
#include <c10/util/irange.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <sstream>
#include <thread>
#include <unordered_map>
#include <vector>

#include "backend/device.h"
#include "backend/env.h"
#include "backend/graph.h"
#include "backend/gpu_trace.h"
#include "backend/npu_error.h"
#include "backend/recovery.h"

namespace softnpu {

using c10::CachingAllocator::Stat;
using c10::CachingAllocator::StatType;
using c10::CachingAllocator::StatTypes;
using c10::CachingDeviceAllocator::CreateContextFn;
using c10::CachingDeviceAllocator::DeviceStats;
using c10::CachingDeviceAllocator::RecordContext;
using c10::CachingDeviceAllocator::TraceEntry;

namespace {

constexpr size_t kMinBlockSize = 512;        // every request rounds up to this
// torch_npu pads every request by 32 bytes before rounding (AddPadSize: the chips before Ascend950 read past the end of
// a buffer), so memory_allocated() and block sizes are torch_npu's: 2048 bytes take 2560.
constexpr size_t kBlockPad = 32;
constexpr size_t kSmallSize = 1 << 20;       // requests up to this come from the small pool
constexpr size_t kMinLargeAlloc = 10 << 20;  // larger requests get a segment of their own
constexpr size_t kRoundLarge = 2 << 20;      // ... rounded to this
constexpr size_t kSmallSegment = 2 << 20;    // the segments small blocks are carved from
constexpr size_t kLargeSegment = 20 << 20;   // large_segment_size_mb's default

struct BlockPool;
struct PrivatePool;
struct ExpandableSegment;

struct Block {
  c10::DeviceIndex device;
  snpuStream_t stream;        // the stream the block was allocated for: its free list
  size_t size;                // bytes of the block
  size_t requested_size = 0;  // bytes the client asked for (while allocated)
  BlockPool* pool;
  void* ptr;
  bool allocated = false;
  Block* prev = nullptr;  // neighbours within the same segment (split blocks)
  Block* next = nullptr;
  std::vector<snpuStream_t> stream_uses;  // other streams the block was used on (record_stream)
  int event_count = 0;                    // events still pending before the block can be reused
  std::shared_ptr<c10::GatheredContext> context;  // the stack that allocated it (while recording history)
  ExpandableSegment* segment = nullptr;  // the expandable segment it is part of (expandable_segments:True)
  bool mapped = true;  // false: a free range of an expandable segment with no memory behind it (never in a pool)

  Block(c10::DeviceIndex d, snpuStream_t s, size_t sz, BlockPool* p, void* ptr_)
      : device(d), stream(s), size(sz), pool(p), ptr(ptr_) {}
  bool is_split() const { return prev != nullptr || next != nullptr; }
};

bool block_less(const Block* a, const Block* b) {
  if (a->stream != b->stream) return reinterpret_cast<uintptr_t>(a->stream) < reinterpret_cast<uintptr_t>(b->stream);
  if (a->size != b->size) return a->size < b->size;
  return reinterpret_cast<uintptr_t>(a->ptr) < reinterpret_cast<uintptr_t>(b->ptr);
}

struct BlockPool {
  BlockPool(bool small, PrivatePool* owner_) : blocks(block_less), is_small(small), owner(owner_) {}
  std::set<Block*, bool (*)(const Block*, const Block*)> blocks;
  const bool is_small;
  PrivatePool* const owner;  // the MemPool it belongs to, or null for the device's default pools
};

// A MemPool's blocks on one device. Released (its MemPool deleted), it returns each segment once the segment is free.
struct PrivatePool {
  PrivatePool(c10::MempoolId_t id_, NPUCachingAllocator::PluggableAllocFn alloc_,
              NPUCachingAllocator::PluggableFreeFn free_)
      : id(id_), small(true, this), large(false, this), alloc(alloc_), free(free_) {}
  const c10::MempoolId_t id;
  BlockPool small;
  BlockPool large;
  size_t segments = 0;
  bool released = false;
  // MemPool(allocator=NPUPluggableAllocator): the pool's segments come from the user's functions (null: the runtime).
  const NPUCachingAllocator::PluggableAllocFn alloc;
  const NPUCachingAllocator::PluggableFreeFn free;
  // A graph trees' pool (keep_whole_segments): whole segments even under expandable_segments:True.
  bool whole_segments = false;
};

// expandable_segments:True: one address range per stream and pool, reserved from the runtime (as large as the device),
// covered by blocks from its start to `end`. Pages are mapped when the segment grows at its end (or into an unmapped
// hole) and unmapped where whole pages are free, so reserved memory follows allocated memory without fragmenting.
struct ExpandableSegment {
  char* base;
  size_t reserved;  // bytes of addresses
  size_t end = 0;   // the blocks cover [base, base + end)
  size_t granularity;
  BlockPool* pool;
  snpuStream_t stream;
  Block* head = nullptr;
};

// The alloc/free functions of a MemPool created with an allocator (nulls otherwise).
std::pair<NPUCachingAllocator::PluggableAllocFn, NPUCachingAllocator::PluggableFreeFn> pool_allocator(
    c10::MempoolId_t id);
// Whether the pool was marked by keep_whole_segments.
bool pool_keeps_whole_segments(c10::MempoolId_t id);

c10::MempoolId_t pool_id(const BlockPool& pool) { return pool.owner ? pool.owner->id : c10::MempoolId_t{0, 0}; }

// What the history records, for every device. Read without the device lock: stacks are gathered before taking it
// (gathering Python frames takes the GIL, which a thread waiting for the lock may hold).
std::atomic<int> g_record_when{static_cast<int>(RecordContext::NEVER)};
std::atomic<CreateContextFn> g_gather{nullptr};
std::atomic<bool> g_history_enabled{false};

std::shared_ptr<c10::GatheredContext> maybe_gather(RecordContext level) {
  if (g_record_when.load(std::memory_order_relaxed) < static_cast<int>(level)) return nullptr;
  const CreateContextFn fn = g_gather.load(std::memory_order_relaxed);
  return fn ? fn() : nullptr;
}

std::mutex g_observers_mutex;
std::vector<NPUCachingAllocator::OomObserver> g_oom_observers;
// Replaced whole when a tracker is attached, so record_trace reads it without a lock; null while there is none.
std::shared_ptr<const std::vector<NPUCachingAllocator::TraceTracker>> g_trace_trackers;

int64_t now_us() {
  return std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

std::string format_size(uint64_t size) {
  std::ostringstream os;
  os.precision(2);
  os << std::fixed;
  if (size <= 1024) {
    os << size << " bytes";
  } else if (size <= 1048576) {
    os << (static_cast<double>(size) / 1024.0) << " KiB";
  } else if (size <= 1073741824ULL) {
    os << static_cast<double>(size) / 1048576.0 << " MiB";
  } else {
    os << static_cast<double>(size) / 1073741824.0 << " GiB";
  }
  return os.str();
}

size_t round_size(size_t size) {
  size += kBlockPad;
  if (size < kMinBlockSize) return kMinBlockSize;
  const size_t divisions = allocator_config().divisions_for(size);
  if (divisions > 1 && size > kMinBlockSize * divisions) {
    // Round up to the next of `divisions` equal steps between two powers of two.
    const size_t pow2_floor = size_t(1) << (63 - __builtin_clzll(size));
    const size_t step = std::max(pow2_floor / divisions, kMinBlockSize);
    return (size + step - 1) / step * step;
  }
  return kMinBlockSize * ((size + kMinBlockSize - 1) / kMinBlockSize);
}

size_t segment_size(size_t size) {
  if (size <= kSmallSize) return kSmallSegment;
  if (size < kMinLargeAlloc) return allocator_config().large_segment_size;
  return kRoundLarge * ((size + kRoundLarge - 1) / kRoundLarge);
}

StatTypes stat_types_for(const BlockPool& pool) {
  StatTypes t{};
  t[static_cast<size_t>(StatType::AGGREGATE)] = true;
  t[static_cast<size_t>(pool.is_small ? StatType::SMALL_POOL : StatType::LARGE_POOL)] = true;
  return t;
}

template <typename F>
void for_stats(const StatTypes& types, F f) {
  for (size_t i = 0; i < types.size(); ++i)
    if (types[i]) f(i);
}

// One device's allocator state, under one mutex.
class DeviceAllocatorState {
 public:
  explicit DeviceAllocatorState(c10::DeviceIndex device)
      : device_(device), small_(true, nullptr), large_(false, nullptr) {
    stats_.max_split_size = static_cast<int64_t>(allocator_config().max_split_size);
    // PYTORCH_NPU_ALLOC_CONF's per_process_memory_fraction, as if set_per_process_memory_fraction had been called.
    if (allocator_config().memory_fraction < 1) set_fraction(allocator_config().memory_fraction);
  }

  Block* malloc(size_t orig_size, snpuStream_t stream) {
    // As CUDA's and torch_npu's: refused before rounding (which would overflow) and without touching the cache.
    constexpr size_t kOneExaByte = size_t{1} << 60;
    TORCH_CHECK_WITH(OutOfMemoryError, orig_size < kOneExaByte,
                     "NPU out of memory. Tried to allocate more than 1EB memory.");
    auto context = maybe_gather(RecordContext::STATE);
    std::unique_lock<std::mutex> lock(mutex_);
    process_events();
    const size_t size = round_size(orig_size);
    PrivatePool* priv = private_pool_for(stream);
    BlockPool& pool = size <= kSmallSize ? (priv ? priv->small : small_) : (priv ? priv->large : large_);
    Block* block = no_memory_caching() ? nullptr : find_free(pool, size, stream);
    if (!block) {
      block = allocator_config().expandable_segments && !no_memory_caching() && !(priv && (priv->alloc || priv->whole_segments))
                  ? expand(pool, size, stream, orig_size, lock)
                  : new_segment(pool, size, stream, orig_size, lock);
    }
    return take(block, pool, size, orig_size, std::move(context));
  }

  void free(Block* block) {
    auto context = maybe_gather(RecordContext::ALL);
    std::lock_guard<std::mutex> lock(mutex_);
    free_locked(block, std::move(context));
  }

  // Graph trees' checkpoint of a private pool: each of its segments, block by block.
  std::vector<NPUCachingAllocator::SegmentCheckpoint> checkpoint(c10::MempoolId_t id) {
    std::lock_guard<std::mutex> lock(mutex_);
    std::vector<NPUCachingAllocator::SegmentCheckpoint> out;
    for (Block* head : segments_) {
      if (pool_id(*head->pool) != id) continue;
      TORCH_CHECK(!head->segment, "NPU graph trees: checkpoints of expandable segments are not supported "
                  "(PYTORCH_NPU_ALLOC_CONF=expandable_segments:False)");
      NPUCachingAllocator::SegmentCheckpoint seg{head->ptr, head->stream, head->pool->is_small, {}};
      for (Block* b = head; b; b = b->next) seg.blocks.push_back({b->size, b->allocated ? b->requested_size : 0,
                                                                  b->allocated});
      out.push_back(std::move(seg));
    }
    return out;
  }

  // Frees every block of the pool allocated now (their addresses appended to `freed`), then splits each segment of the
  // checkpoint as it was and allocates the blocks that were allocated (appended to `allocated`). Segments of the pool
  // the checkpoint does not name stay free.
  void restore(c10::MempoolId_t id, const std::vector<NPUCachingAllocator::SegmentCheckpoint>& checkpoint,
               std::vector<void*>& freed, std::vector<Block*>& allocated) {
    std::lock_guard<std::mutex> lock(mutex_);
    synchronize_pending();
    std::vector<Block*> live;
    for (Block* head : segments_)
      if (pool_id(*head->pool) == id)
        for (Block* b = head; b; b = b->next)
          if (b->allocated) live.push_back(b);
    for (Block* b : live) {
      freed.push_back(b->ptr);
      b->stream_uses.clear();  // the graph pool's blocks are the graph stream's
      free_locked(b, nullptr);
    }
    for (const auto& seg : checkpoint) {
      auto it = std::find_if(segments_.begin(), segments_.end(), [&](Block* h) { return h->ptr == seg.ptr; });
      TORCH_CHECK(it != segments_.end() && pool_id(*(*it)->pool) == id && !(*it)->next,
                  "NPU graph trees: the checkpointed segment at ", seg.ptr, " is no longer a free segment of pool (",
                  id.first, ", ", id.second, ")");
      Block* rest = *it;
      BlockPool& pool = *rest->pool;
      pool.blocks.erase(rest);
      for (size_t i = 0; i < seg.blocks.size(); ++i) {
        const auto& want = seg.blocks[i];
        Block* piece = i + 1 < seg.blocks.size() ? split_front(rest, want.size) : rest;
        if (want.allocated) {
          mark_allocated(piece, pool, want.requested_size, nullptr);
          allocated.push_back(piece);
        } else {
          pool.blocks.insert(piece);
          count_inactive(piece, +1);
        }
      }
    }
  }

  // Whether the pool's allocated blocks are exactly those at `ptrs` (graph trees' check of live allocations).
  bool live_allocations_are(c10::MempoolId_t id, const std::set<void*>& ptrs) {
    std::lock_guard<std::mutex> lock(mutex_);
    size_t count = 0;
    for (Block* head : segments_) {
      if (pool_id(*head->pool) != id) continue;
      for (Block* b = head; b; b = b->next) {
        if (!b->allocated) continue;
        if (!ptrs.count(b->ptr)) return false;
        ++count;
      }
    }
    return count == ptrs.size();
  }

 private:
  void free_locked(Block* block, std::shared_ptr<c10::GatheredContext> context) {
    record_trace(TraceEntry::FREE_REQUESTED, block->ptr, block->requested_size, block->stream, pool_id(*block->pool),
                 context);
    block->allocated = false;
    const StatTypes types = stat_types_for(*block->pool);
    for_stats(types, [&](size_t i) {
      stats_.allocation[i].decrease(1);
      stats_.allocated_bytes[i].decrease(block->size);
      stats_.requested_bytes[i].decrease(block->requested_size);
    });
    if (!block->pool->is_small && block->size >= allocator_config().max_split_size)
      stats_.oversize_allocations.decrease(1);
    report_to_profiler(block->ptr, -static_cast<int64_t>(block->size));
    if (!block->stream_uses.empty()) {
      // Used on other streams: reusable once their work up to now has completed.
      for (snpuStream_t s : block->stream_uses) {
        snpuEvent_t e = get_event();
        NPU_CHECK(snpuEventRecord(e, s));
        ++block->event_count;
        pending_.emplace_back(e, block);
      }
      block->stream_uses.clear();
    } else {
      release_to_pool(block, std::move(context));
    }
  }

 public:
  void record_stream(Block* block, snpuStream_t stream) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (stream == block->stream) return;
    if (std::find(block->stream_uses.begin(), block->stream_uses.end(), stream) == block->stream_uses.end())
      block->stream_uses.push_back(stream);
  }

  // torch_npu's erase_stream: the block no longer waits for `stream` when freed. The caller orders that stream's
  // remaining work with the block's reuse itself (an event wait), so the block returns to its stream's pool at once.
  void erase_stream(Block* block, snpuStream_t stream) {
    std::lock_guard<std::mutex> lock(mutex_);
    auto& uses = block->stream_uses;
    uses.erase(std::remove(uses.begin(), uses.end(), stream), uses.end());
  }

  void empty_cache() {
    std::lock_guard<std::mutex> lock(mutex_);
    synchronize_pending();
    release_cached(small_);
    release_cached(large_);
  }

  // torch.npu.empty_cache(mempool_id): the pool's free segments only.
  void empty_pool(c10::MempoolId_t id) {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = private_pools_.find(id);
    if (it == private_pools_.end()) return;
    synchronize_pending();
    PrivatePool* p = it->second.get();
    release_cached(p->small);
    release_cached(p->large);
    maybe_erase_pool(p);
  }

  // The MemPool was deleted: its free segments go back to the device now, the others when their blocks are freed.
  void release_pool(c10::MempoolId_t id) {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = private_pools_.find(id);
    if (it == private_pools_.end()) return;
    PrivatePool* p = it->second.get();
    p->released = true;
    release_cached(p->small);
    release_cached(p->large);
    maybe_erase_pool(p);
  }

  // With a stream, allocations on that stream, or on a stream that joined its capture, from any thread (a graph
  // capture: autograd's device thread allocates the backward's tensors on the capturing stream); without, the calling
  // thread's (use_mem_pool).
  void begin_allocate_to_pool(c10::MempoolId_t id, snpuStream_t stream) {
    std::lock_guard<std::mutex> lock(mutex_);
    allocate_to_.push_back({id, stream ? std::thread::id() : std::this_thread::get_id(), stream});
  }

  void end_allocate_to_pool(c10::MempoolId_t id, snpuStream_t stream) {
    std::lock_guard<std::mutex> lock(mutex_);
    const auto me = stream ? std::thread::id() : std::this_thread::get_id();
    for (auto it = allocate_to_.rbegin(); it != allocate_to_.rend(); ++it) {
      if (it->pool == id && it->thread == me && it->stream == stream) {
        allocate_to_.erase(std::next(it).base());
        return;
      }
    }
  }

  void set_history(bool trace, size_t max_entries, bool clear, const std::vector<TraceEntry::Action>& skip) {
    std::lock_guard<std::mutex> lock(mutex_);
    trace_on_ = trace;
    skip_mask_ = 0;
    for (TraceEntry::Action a : skip) skip_mask_ |= 1u << a;
    max_entries_ = std::max<size_t>(max_entries, 1);
    if (clear || trace_.size() > max_entries_) {
      trace_.clear();
      trace_next_ = 0;
    }
    if (!trace && g_record_when.load() == static_cast<int>(RecordContext::NEVER)) {
      for (Block* head : segments_)
        for (Block* b = head; b; b = b->next) b->context.reset();
    }
  }

  void set_fraction(double fraction) {
    std::lock_guard<std::mutex> lock(mutex_);
    size_t free_bytes = 0, total = 0;
    NPU_CHECK(snpuMemGetInfo(device_, &free_bytes, &total));
    fraction_ = fraction;
    allowed_ = static_cast<size_t>(fraction * static_cast<double>(total));
  }

  double fraction() {
    std::lock_guard<std::mutex> lock(mutex_);
    return fraction_;
  }

  DeviceStats stats() {
    std::lock_guard<std::mutex> lock(mutex_);
    DeviceStats s = stats_;
    s.max_split_size = static_cast<int64_t>(allocator_config().max_split_size);  // set_allocator_settings changes it
    return s;
  }

  int64_t oom_rejections() {
    std::lock_guard<std::mutex> lock(mutex_);
    return oom_rejections_;
  }

  void reset_accumulated() {
    std::lock_guard<std::mutex> lock(mutex_);
    for (size_t i = 0; i < static_cast<size_t>(StatType::NUM_TYPES); ++i) {
      for (auto* arr : {&stats_.allocation, &stats_.segment, &stats_.active, &stats_.inactive_split,
                        &stats_.allocated_bytes, &stats_.reserved_bytes, &stats_.active_bytes,
                        &stats_.inactive_split_bytes, &stats_.requested_bytes})
        (*arr)[i].reset_accumulated();
    }
    stats_.num_alloc_retries = 0;
    stats_.num_ooms = 0;
    oom_rejections_ = 0;
    stats_.num_sync_all_streams = 0;
    stats_.num_device_alloc = 0;
    stats_.num_device_free = 0;
    stats_.oversize_allocations.reset_accumulated();
    stats_.oversize_segments.reset_accumulated();
  }

  void reset_peak() {
    std::lock_guard<std::mutex> lock(mutex_);
    for (size_t i = 0; i < static_cast<size_t>(StatType::NUM_TYPES); ++i) {
      for (auto* arr : {&stats_.allocation, &stats_.segment, &stats_.active, &stats_.inactive_split,
                        &stats_.allocated_bytes, &stats_.reserved_bytes, &stats_.active_bytes,
                        &stats_.inactive_split_bytes, &stats_.requested_bytes})
        (*arr)[i].reset_peak();
    }
    stats_.oversize_allocations.reset_peak();
    stats_.oversize_segments.reset_peak();
  }

  // Segments in address order (of one private pool, if given), and the history oldest first.
  void snapshot(c10::MempoolId_t filter, NPUCachingAllocator::Snapshot& into) {
    std::lock_guard<std::mutex> lock(mutex_);
    std::vector<Block*> heads(segments_.begin(), segments_.end());
    std::sort(heads.begin(), heads.end(), [](const Block* a, const Block* b) { return a->ptr < b->ptr; });
    for (Block* head : heads) {
      if (filter != c10::MempoolId_t{0, 0} && pool_id(*head->pool) != filter) continue;
      // An expandable segment is reported as one segment per mapped range, as c10 does.
      for (Block* first = head; first;) {
        while (first && !first->mapped) first = first->next;
        if (!first) break;
        c10::CachingDeviceAllocator::SegmentInfo seg;
        seg.device = device_;
        seg.address = reinterpret_cast<size_t>(first->ptr);
        seg.stream = first->stream;
        seg.is_large = !first->pool->is_small;
        seg.is_expandable = first->segment != nullptr;
        seg.owner_private_pool_id = pool_id(*first->pool);
        Block* b = first;
        for (; b && b->mapped; b = b->next) {
          c10::CachingDeviceAllocator::BlockInfo bi;
          bi.size = b->size;
          bi.requested_size = b->requested_size;
          bi.allocated = b->allocated;
          bi.active = b->allocated || b->event_count > 0;
          bi.context_when_allocated = b->context;
          seg.total_size += b->size;
          if (b->allocated) {
            seg.allocated_size += b->size;
            seg.requested_size += b->requested_size;
          }
          if (bi.active) seg.active_size += b->size;
          seg.blocks.push_back(bi);
        }
        into.segments.push_back(std::move(seg));
        first = b;
      }
    }
    record_trace(TraceEntry::SNAPSHOT, nullptr, 0, nullptr, {0, 0}, nullptr);
    std::vector<TraceEntry> history(trace_.begin() + static_cast<std::ptrdiff_t>(trace_next_), trace_.end());
    history.insert(history.end(), trace_.begin(), trace_.begin() + static_cast<std::ptrdiff_t>(trace_next_));
    into.device_traces.push_back(std::move(history));
  }

 private:
  Block* find_free(BlockPool& pool, size_t size, snpuStream_t stream) {
    Block key(device_, stream, size, &pool, nullptr);
    auto it = pool.blocks.lower_bound(&key);
    if (it == pool.blocks.end() || (*it)->stream != stream) return nullptr;
    const size_t max_split = allocator_config().max_split_size;
    // Oversize blocks are never split: a small request must not take one, and a large request takes one only if it
    // wastes less than max_non_split_rounding_mb.
    if (size < max_split && (*it)->size >= max_split) return nullptr;
    if (size >= max_split && (*it)->size >= size + allocator_config().max_non_split_rounding) return nullptr;
    Block* b = *it;
    pool.blocks.erase(it);
    return b;
  }

  // Whether `stream` records into the capture begun on `capturing` (is it, or joined it: fork/join).
  static bool same_capture(snpuStream_t capturing, snpuStream_t stream) {
    if (capturing == stream) return true;
    uint64_t a = 0, b = 0;
    return stream && snpuStreamGetCaptureInfo(capturing, nullptr, &a) == snpuSuccess && a != 0 &&
           snpuStreamGetCaptureInfo(stream, nullptr, &b) == snpuSuccess && a == b;
  }

  PrivatePool* private_pool_for(snpuStream_t stream) {
    if (allocate_to_.empty()) return nullptr;
    const auto me = std::this_thread::get_id();
    for (auto it = allocate_to_.rbegin(); it != allocate_to_.rend(); ++it) {
      if (it->stream ? !same_capture(it->stream, stream) : it->thread != me) continue;
      auto& p = private_pools_[it->pool];
      if (!p) {
        const auto [alloc, free] = pool_allocator(it->pool);
        p = std::make_unique<PrivatePool>(it->pool, alloc, free);
        p->whole_segments = pool_keeps_whole_segments(it->pool);
      }
      return p.get();
    }
    return nullptr;
  }

  void maybe_erase_pool(PrivatePool* p) {
    if (p && p->released && p->segments == 0) private_pools_.erase(p->id);
  }

  // Every whole free segment of the default pools and of released private pools.
  void release_all_cached() {
    release_cached(small_);
    release_cached(large_);
    for (auto it = private_pools_.begin(); it != private_pools_.end();) {
      PrivatePool* p = (it++)->second.get();
      if (!p->released) continue;
      release_cached(p->small);
      release_cached(p->large);
      maybe_erase_pool(p);
    }
  }

  void record_trace(TraceEntry::Action action, const void* addr, size_t size, snpuStream_t stream,
                    c10::MempoolId_t pool, std::shared_ptr<c10::GatheredContext> context) {
    const bool record = trace_on_ && !(skip_mask_ & (1u << action));
    const auto trackers = std::atomic_load(&g_trace_trackers);
    if (!record && !trackers) return;
    if (g_record_when.load(std::memory_order_relaxed) < static_cast<int>(RecordContext::ALLOC)) context = nullptr;
    TraceEntry te(action, device_, reinterpret_cast<size_t>(addr), size, stream, pool, 0, std::move(context));
    te.time_.t_ = static_cast<time_t>(now_us());
    if (trackers)
      for (const auto& tracker : *trackers) tracker(te);
    if (!record) return;
    if (trace_.size() < max_entries_) {
      trace_.push_back(std::move(te));
    } else {
      trace_[trace_next_++] = std::move(te);
      if (trace_next_ == max_entries_) trace_next_ = 0;
    }
  }

  Block* new_segment(BlockPool& pool, size_t size, snpuStream_t stream, size_t orig_size,
                     std::unique_lock<std::mutex>& lock) {
    const size_t alloc_size = no_memory_caching() ? size : segment_size(size);
    reject_above_fraction(alloc_size);
    maybe_collect_garbage(alloc_size);
    void* ptr = nullptr;
    snpuError_t err = device_malloc(&ptr, alloc_size, pool, stream);
    if (err == snpuErrorMemoryAllocation) {
      // Release every cached segment, then retry once (as CUDA's allocator does).
      ++stats_.num_alloc_retries;
      synchronize_pending();
      release_all_cached();
      err = device_malloc(&ptr, alloc_size, pool, stream);
    }
    if (err == snpuErrorMemoryAllocation) {
      ++stats_.num_ooms;
      raise_oom(orig_size, alloc_size, stream, pool_id(pool), lock);
    }
    NPU_CHECK(err);
    const StatTypes types = stat_types_for(pool);
    for_stats(types, [&](size_t i) {
      stats_.segment[i].increase(1);
      stats_.reserved_bytes[i].increase(alloc_size);
    });
    if (!pool.is_small && alloc_size >= allocator_config().max_split_size) stats_.oversize_segments.increase(1);
    Block* block = new Block(device_, stream, alloc_size, &pool, ptr);
    segments_.insert(block);
    if (pool.owner) ++pool.owner->segments;
    // No stack of its own (gathering under the lock could wait for the GIL): the alloc event right after has it.
    record_trace(TraceEntry::SEGMENT_ALLOC, ptr, alloc_size, stream, pool_id(pool), nullptr);
    return block;
  }

  // expandable_segments:True. A block of at least `size` for the pool and stream, grown from their segment, or
  // OutOfMemoryError after releasing the cache and retrying (as new_segment).
  Block* expand(BlockPool& pool, size_t size, snpuStream_t stream, size_t orig_size,
                std::unique_lock<std::mutex>& lock) {
    reject_above_fraction(size);
    Block* block = grow(pool, size, stream);
    if (!block) {
      ++stats_.num_alloc_retries;
      synchronize_pending();
      release_all_cached();
      block = grow(pool, size, stream);
    }
    if (!block) {
      ++stats_.num_ooms;
      raise_oom(orig_size, size, stream, pool_id(pool), lock);
    }
    return block;
  }

  // The segment's free pages go back to the device first (the request did not fit in them, and what is unmapped
  // costs nothing); then the first unmapped hole that fits is mapped, or the segment grows at its end (extending a
  // free last block). Returns a free block outside the pool, counted as a pool block would be; null when the
  // device (or the memory fraction) has no room.
  Block* grow(BlockPool& pool, size_t size, snpuStream_t stream) {
    // Unmapping waits for the device, which an NPU graph capture refuses: during one the segment only grows.
    if (auto it = expandable_.find({&pool, stream}); it != expandable_.end() && !capture_underway())
      unmap_free(*it->second);
    ExpandableSegment& seg = segment_for(pool, stream);
    const size_t g = seg.granularity;
    const size_t need = (size + g - 1) / g * g;
    for (Block* b = seg.head; b; b = b->next) {
      if (b->mapped || b->size < need) continue;
      Block* target = b->size > need ? split_front(b, need) : b;
      if (!map_pages(seg, target->ptr, need)) {
        if (target != b) join(target, b);
        return nullptr;
      }
      target->mapped = true;
      count_inactive(target, +1);
      return target;
    }
    Block* tail = seg.head;
    while (tail && tail->next) tail = tail->next;
    const bool extend = tail && tail->mapped && !tail->allocated && tail->event_count == 0;
    const size_t missing = extend ? size - std::min(size, tail->size) : size;
    const size_t grow_by = (missing + g - 1) / g * g;
    if (seg.end + grow_by > seg.reserved) return nullptr;
    if (grow_by > 0 && !map_pages(seg, seg.base + seg.end, grow_by)) return nullptr;
    seg.end += grow_by;
    if (extend) {
      pool.blocks.erase(tail);
      count_inactive(tail, -1);
      tail->size += grow_by;
      count_inactive(tail, +1);
      return tail;
    }
    Block* block = new Block(device_, stream, grow_by, &pool, seg.base + seg.end - grow_by);
    block->segment = &seg;
    if (tail) {
      tail->next = block;
      block->prev = tail;
    } else {
      seg.head = block;
      segments_.insert(block);
    }
    count_inactive(block, +1);
    return block;
  }

  // The pages an expandable segment of the large pool maps: torch_npu's large_segment_size_mb when set, else its
  // deprecated segment_size_mb, else the runtime's granularity (torch_npu maps 20 MiB pages by default; softnpu keeps
  // the runtime's 2 MiB, so reserved memory follows allocated memory closely). Whole multiples of the runtime's.
  static size_t expandable_page(size_t runtime_granularity) {
    const AllocatorConfig& cfg = allocator_config();
    const size_t page = cfg.large_segment_size != kLargeSegment ? cfg.large_segment_size : cfg.segment_size;
    if (page == 0) return runtime_granularity;
    return (page + runtime_granularity - 1) / runtime_granularity * runtime_granularity;
  }

  ExpandableSegment& segment_for(BlockPool& pool, snpuStream_t stream) {
    auto& slot = expandable_[{&pool, stream}];
    if (slot) return *slot;
    size_t free_bytes = 0, total = 0, granularity = 0;
    void* base = nullptr;
    int prev = 0;
    snpuGetDevice(&prev);
    snpuSetDevice(device_);
    snpuError_t err = snpuMemGetInfo(device_, &free_bytes, &total);
    if (err == snpuSuccess) err = snpuMemGetGranularity(&granularity);
    if (err == snpuSuccess && !pool.is_small) granularity = expandable_page(granularity);
    // Addresses for the whole device: the segment can grow to its capacity.
    if (err == snpuSuccess) err = snpuMemAddressReserve(&base, (total + granularity - 1) / granularity * granularity);
    snpuSetDevice(prev);
    if (err != snpuSuccess) {
      expandable_.erase({&pool, stream});
      NPU_CHECK(err);
    }
    slot.reset(new ExpandableSegment{static_cast<char*>(base), (total + granularity - 1) / granularity * granularity,
                                     0, granularity, &pool, stream, nullptr});
    for_stats(stat_types_for(pool), [&](size_t i) { stats_.segment[i].increase(1); });
    if (pool.owner) ++pool.owner->segments;
    return *slot;
  }

  // Unmaps every whole free page of the segment (a free block keeps the partial pages at its ends, which it shares
  // with its neighbours), drops an unmapped end, and releases the segment once nothing is left.
  void unmap_free(ExpandableSegment& seg) {
    const size_t g = seg.granularity;
    std::vector<Block*> free_blocks;
    for (Block* b = seg.head; b; b = b->next)
      if (b->mapped && !b->allocated && b->event_count == 0) free_blocks.push_back(b);
    for (Block* b : free_blocks) {
      const size_t off = static_cast<size_t>(static_cast<char*>(b->ptr) - seg.base);
      const size_t lo = (off + g - 1) / g * g, hi = (off + b->size) / g * g;
      if (hi <= lo) continue;
      seg.pool->blocks.erase(b);
      count_inactive(b, -1);
      unmap_pages(seg, seg.base + lo, hi - lo);
      std::vector<Block*> remnants;
      if (lo > off) remnants.push_back(split_front(b, lo - off));
      Block* hole = b;
      if (b->size > hi - lo) {
        hole = split_front(b, hi - lo);
        remnants.push_back(b);
      }
      hole->mapped = false;
      if (hole->prev && !hole->prev->mapped) {
        Block* before = hole->prev;
        join(before, hole);
        hole = before;
      }
      if (hole->next && !hole->next->mapped) join(hole, hole->next);
      for (Block* r : remnants) {
        seg.pool->blocks.insert(r);
        count_inactive(r, +1);
      }
    }
    Block* tail = seg.head;
    while (tail && tail->next) tail = tail->next;
    if (tail && !tail->mapped) {
      seg.end -= tail->size;
      if (Block* before = tail->prev) {
        const bool pooled = before->mapped && !before->allocated && before->event_count == 0;
        if (pooled) count_inactive(before, -1);
        before->next = nullptr;
        if (pooled) count_inactive(before, +1);
      } else {
        segments_.erase(tail);
        seg.head = nullptr;
      }
      delete tail;
    }
    if (!seg.head) {
      NPU_CHECK(snpuMemAddressFree(seg.base));
      for_stats(stat_types_for(*seg.pool), [&](size_t i) { stats_.segment[i].decrease(1); });
      if (seg.pool->owner) --seg.pool->owner->segments;
      expandable_.erase({seg.pool, seg.stream});  // destroys seg
    }
  }

  bool map_pages(ExpandableSegment& seg, void* ptr, size_t bytes) {
    const auto agg = static_cast<size_t>(StatType::AGGREGATE);
    if (allowed_ != SIZE_MAX && stats_.reserved_bytes[agg].current + bytes > allowed_) return false;
    const snpuError_t err = snpuMemMap(ptr, bytes);
    if (err == snpuErrorMemoryAllocation) return false;
    NPU_CHECK(err);
    ++stats_.num_device_alloc;
    for_stats(stat_types_for(*seg.pool), [&](size_t i) { stats_.reserved_bytes[i].increase(bytes); });
    record_trace(TraceEntry::SEGMENT_MAP, ptr, bytes, seg.stream, pool_id(*seg.pool), nullptr);
    return true;
  }

  // snpuMemUnmap waits for the device's queued work, which may still use the pages (stream-ordered reuse).
  void unmap_pages(ExpandableSegment& seg, void* ptr, size_t bytes) {
    NPU_CHECK(snpuMemUnmap(ptr, bytes));
    ++stats_.num_device_free;
    for_stats(stat_types_for(*seg.pool), [&](size_t i) { stats_.reserved_bytes[i].decrease(bytes); });
    record_trace(TraceEntry::SEGMENT_UNMAP, ptr, bytes, seg.stream, pool_id(*seg.pool), nullptr);
  }

  // A new block of the first n bytes of b (outside any pool), linked before it.
  Block* split_front(Block* b, size_t n) {
    Block* front = new Block(device_, b->stream, n, b->pool, b->ptr);
    front->segment = b->segment;
    front->mapped = b->mapped;
    front->prev = b->prev;
    front->next = b;
    if (front->prev) {
      front->prev->next = front;
    } else {
      segments_.erase(b);
      segments_.insert(front);
      if (b->segment) b->segment->head = front;
    }
    b->prev = front;
    b->ptr = static_cast<char*>(b->ptr) + n;
    b->size -= n;
    return front;
  }

  // Absorbs next (a neighbour outside any pool) into b.
  void join(Block* b, Block* next) {
    b->size += next->size;
    b->next = next->next;
    if (b->next) b->next->prev = b;
    delete next;
  }

  // A free block of a split segment counts in inactive_split (as take and release_to_pool keep it).
  void count_inactive(Block* b, int sign) {
    if (!b->is_split()) return;
    for_stats(stat_types_for(*b->pool), [&](size_t i) {
      if (sign > 0) {
        stats_.inactive_split[i].increase(1);
        stats_.inactive_split_bytes[i].increase(b->size);
      } else {
        stats_.inactive_split[i].decrease(1);
        stats_.inactive_split_bytes[i].decrease(b->size);
      }
    });
  }

  // throw_on_npumalloc_oom:True: memory beyond per_process_memory_fraction of the device (the configuration's, not
  // set_per_process_memory_fraction's) is refused before the device is asked and without releasing the cache, as
  // torch_npu's serving option does; counted as memory_stats()'s num_oom_rejections.
  void reject_above_fraction(size_t size) {
    const AllocatorConfig& cfg = allocator_config();
    if (!cfg.throw_on_oom) return;
    size_t free_bytes = 0, total = 0;
    NPU_CHECK(snpuMemGetInfo(device_, &free_bytes, &total));
    const auto limit = static_cast<size_t>(cfg.memory_fraction * static_cast<double>(total));
    const size_t reserved = static_cast<size_t>(stats_.reserved_bytes[static_cast<size_t>(StatType::AGGREGATE)].current);
    if (reserved + size <= limit) return;
    ++oom_rejections_;
    TORCH_CHECK_WITH(OutOfMemoryError, false, "NPU out of memory. Preemptively rejecting allocation of ",
                     format_size(size), " on NPU ", static_cast<int>(device_), ": reserved memory (",
                     format_size(reserved), ") + requested size would exceed the memory limit (", format_size(limit),
                     " = ", cfg.memory_fraction * 100, "% of ", format_size(total),
                     "). Set throw_on_npumalloc_oom:False to disable this behavior.");
  }

  snpuError_t device_malloc(void** ptr, size_t size, const BlockPool& pool, snpuStream_t stream) {
    const auto agg = static_cast<size_t>(StatType::AGGREGATE);
    if (allowed_ != SIZE_MAX && stats_.reserved_bytes[agg].current + size > allowed_) return snpuErrorMemoryAllocation;
    if (pool.owner && pool.owner->alloc) {
      *ptr = pool.owner->alloc(size, device_, stream);
      if (!*ptr) return snpuErrorMemoryAllocation;
      ++stats_.num_device_alloc;
      return snpuSuccess;
    }
    int prev = 0;
    snpuGetDevice(&prev);
    snpuSetDevice(device_);
    const snpuError_t err = snpuMalloc(ptr, size);
    snpuSetDevice(prev);
    if (err == snpuSuccess) ++stats_.num_device_alloc;
    return err;
  }

  // torch.profiler's memory events (profile_memory=True: key_averages' npu memory, the memory timeline), as CUDA's
  // allocator reports them: each allocation and free with the device's totals after it. Without a profiler recording
  // memory on this thread, one thread-local load.
  void report_to_profiler(void* ptr, int64_t delta) {
    if (C10_LIKELY(!c10::memoryProfilingEnabled())) return;
    const auto agg = static_cast<size_t>(StatType::AGGREGATE);
    c10::reportMemoryUsageToProfiler(ptr, delta, stats_.allocated_bytes[agg].current,
                                     stats_.reserved_bytes[agg].current,
                                     c10::Device(c10::DeviceType::PrivateUse1, device_));
  }

  // Records the OOM, lets the observers look (a snapshot takes the lock, so it is released first), then raises.
  [[noreturn]] void raise_oom(size_t orig_size, size_t alloc_size, snpuStream_t stream, c10::MempoolId_t pool,
                              std::unique_lock<std::mutex>& lock) {
    size_t free_bytes = 0, total = 0;
    snpuMemGetInfo(device_, &free_bytes, &total);
    const auto agg = static_cast<size_t>(StatType::AGGREGATE);
    const uint64_t allocated = stats_.allocated_bytes[agg].current;
    const uint64_t reserved = stats_.reserved_bytes[agg].current;
    record_trace(TraceEntry::OOM, reinterpret_cast<void*>(free_bytes), alloc_size, stream, pool, nullptr);
    c10::reportOutOfMemoryToProfiler(static_cast<int64_t>(alloc_size), allocated, reserved,
                                     c10::Device(c10::DeviceType::PrivateUse1, device_));
    const std::string allowed =
        allowed_ == SIZE_MAX ? "" : " " + format_size(allowed_) + " allowed by set_per_process_memory_fraction;";
    const std::string message = c10::str(
        "NPU out of memory. Tried to allocate ", format_size(alloc_size), " (", format_size(orig_size),
        " requested). NPU ", static_cast<int>(device_), " has a total capacity of ", format_size(total), " of which ",
        format_size(free_bytes), " is free.", allowed, " Of the allocated memory ", format_size(allocated),
 " is allocated by PyTorch, and ", format_size(reserved - allocated),
        " is reserved by PyTorch but unallocated. If reserved but unallocated memory is large try "
        "setting max_split_size_mb to avoid fragmentation. See the documentation of "
        "PYTORCH_NPU_ALLOC_CONF (and SOFTNPU_MEMORY_MB for the device capacity).");
    std::vector<NPUCachingAllocator::OomObserver> observers;
    {
      std::lock_guard<std::mutex> g(g_observers_mutex);
      observers = g_oom_observers;
    }
    lock.unlock();
    for (const auto& observer : observers) observer(device_, alloc_size, free_bytes);
    TORCH_CHECK_WITH(OutOfMemoryError, false, message);
  }

  // Splits the block if the remainder is worth keeping, marks it allocated, updates statistics. inactive_split
  // counts the free blocks of split segments: a split creates one, or shrinks one that existed.
  Block* take(Block* block, BlockPool& pool, size_t size, size_t orig_size,
              std::shared_ptr<c10::GatheredContext> context) {
    const StatTypes types = stat_types_for(pool);
    const size_t remaining = block->size - size;
    const bool split = !no_memory_caching() &&
                       (pool.is_small ? remaining >= kMinBlockSize
                                      : size < allocator_config().max_split_size && remaining > kSmallSize);
    const bool already_split = block->is_split();
    if (split) {
      Block* rest = new Block(device_, block->stream, remaining, &pool, static_cast<char*>(block->ptr) + size);
      rest->segment = block->segment;
      rest->prev = block;
      rest->next = block->next;
      if (rest->next) rest->next->prev = rest;
      block->next = rest;
      block->size = size;
      pool.blocks.insert(rest);
      for_stats(types, [&](size_t i) {
        if (already_split) {
          stats_.inactive_split_bytes[i].decrease(size);
        } else {
          stats_.inactive_split[i].increase(1);
          stats_.inactive_split_bytes[i].increase(remaining);
        }
      });
    } else if (already_split) {
      for_stats(types, [&](size_t i) {
        stats_.inactive_split[i].decrease(1);
        stats_.inactive_split_bytes[i].decrease(block->size);
      });
    }
    mark_allocated(block, pool, orig_size, std::move(context));
    return block;
  }

  // Marks the block allocated and counts it.
  void mark_allocated(Block* block, BlockPool& pool, size_t orig_size, std::shared_ptr<c10::GatheredContext> context) {
    const StatTypes types = stat_types_for(pool);
    block->allocated = true;
    block->requested_size = orig_size;
    record_trace(TraceEntry::ALLOC, block->ptr, orig_size, block->stream, pool_id(pool), context);
    block->context = std::move(context);
    for_stats(types, [&](size_t i) {
      stats_.allocation[i].increase(1);
      stats_.allocated_bytes[i].increase(block->size);
      stats_.requested_bytes[i].increase(orig_size);
      stats_.active[i].increase(1);
      stats_.active_bytes[i].increase(block->size);
    });
    if (!pool.is_small && block->size >= allocator_config().max_split_size) stats_.oversize_allocations.increase(1);
    report_to_profiler(block->ptr, static_cast<int64_t>(block->size));
  }

  // Back to its stream's free list, merged with free neighbours. Without caching, or in a released private pool, a
  // segment that became wholly free goes back to the device.
  void release_to_pool(Block* block, std::shared_ptr<c10::GatheredContext> context = nullptr) {
    BlockPool& pool = *block->pool;
    record_trace(TraceEntry::FREE_COMPLETED, block->ptr, block->requested_size, block->stream, pool_id(pool),
                 std::move(context));
    block->context.reset();
    const StatTypes types = stat_types_for(pool);
    const size_t original_size = block->size;
    for_stats(types, [&](size_t i) {
      stats_.active[i].decrease(1);
      stats_.active_bytes[i].decrease(original_size);
    });
    int64_t inactive_delta = 0;
    int64_t inactive_bytes_delta = 0;
    for (Block* neighbour : {block->prev, block->next}) {
      if (!neighbour || neighbour->allocated || neighbour->event_count > 0 || !neighbour->mapped) continue;
      const size_t absorbed = merge(block, neighbour, pool);
      inactive_delta -= 1;
      inactive_bytes_delta -= static_cast<int64_t>(absorbed);
    }
    if (block->is_split()) {
      inactive_delta += 1;
      inactive_bytes_delta += static_cast<int64_t>(block->size);
    }
    for_stats(types, [&](size_t i) {
      if (inactive_delta > 0) stats_.inactive_split[i].increase(inactive_delta);
      if (inactive_delta < 0) stats_.inactive_split[i].decrease(-inactive_delta);
      if (inactive_bytes_delta > 0) stats_.inactive_split_bytes[i].increase(inactive_bytes_delta);
      if (inactive_bytes_delta < 0) stats_.inactive_split_bytes[i].decrease(-inactive_bytes_delta);
    });
    pool.blocks.insert(block);
    PrivatePool* owner = pool.owner;
    if (no_memory_caching() || (owner && owner->released)) {
      release_cached(pool);
      maybe_erase_pool(owner);
    }
  }

  // Absorbs a free neighbour into block; returns the neighbour's size.
  size_t merge(Block* block, Block* neighbour, BlockPool& pool) {
    if (neighbour == block->prev) {
      block->ptr = neighbour->ptr;
      block->prev = neighbour->prev;
      if (block->prev) block->prev->next = block;
      segments_.erase(neighbour);
      if (!block->prev) {
        segments_.insert(block);
        if (block->segment) block->segment->head = block;
      }
    } else {
      block->next = neighbour->next;
      if (block->next) block->next->prev = block;
    }
    const size_t absorbed = neighbour->size;
    block->size += absorbed;
    pool.blocks.erase(neighbour);
    delete neighbour;
    return absorbed;
  }

  // Returns every whole free segment of the pool to the runtime.
  void release_cached(BlockPool& pool) {
    // Freeing waits for the device, which an NPU graph capture refuses (and would be invalidated by): the segments
    // stay cached until a release after the capture (empty_cache, or the next free into a released pool).
    if (capture_underway()) return;
    if (!expandable_.empty()) {
      std::vector<ExpandableSegment*> mine;
      for (auto& [key, seg] : expandable_)
        if (key.first == &pool) mine.push_back(seg.get());
      for (ExpandableSegment* seg : mine) unmap_free(*seg);
    }
    for (auto it = pool.blocks.begin(); it != pool.blocks.end();) {
      Block* b = *it;
      if (b->is_split() || b->segment) {
        ++it;
        continue;
      }
      it = pool.blocks.erase(it);
      segments_.erase(b);
      if (pool.owner) --pool.owner->segments;
      record_trace(TraceEntry::SEGMENT_FREE, b->ptr, b->size, b->stream, pool_id(pool), nullptr);
      const StatTypes types = stat_types_for(pool);
      for_stats(types, [&](size_t i) {
        stats_.segment[i].decrease(1);
        stats_.reserved_bytes[i].decrease(b->size);
      });
      if (!pool.is_small && b->size >= allocator_config().max_split_size) stats_.oversize_segments.decrease(1);
      if (pool.owner && pool.owner->free) {
        // The user's free gets the stream, as torch_npu's pluggable allocators do, and orders itself after its work.
        pool.owner->free(b->ptr, b->size, device_, b->stream);
      } else {
        // snpuFree waits for the device's queued work, which may still use the block (stream-ordered reuse).
        NPU_CHECK(snpuFree(b->ptr));
      }
      ++stats_.num_device_free;
      delete b;
    }
  }

  // Releases cached segments when reserved memory would cross the garbage-collection threshold.
  void maybe_collect_garbage(size_t alloc_size) {
    const double threshold = allocator_config().garbage_collection_threshold;
    if (threshold <= 0) return;
    size_t free_bytes = 0, total = 0;
    if (snpuMemGetInfo(device_, &free_bytes, &total) != snpuSuccess) return;
    const auto agg = static_cast<size_t>(StatType::AGGREGATE);
    if (static_cast<double>(stats_.reserved_bytes[agg].current + alloc_size) > threshold * total) {
      synchronize_pending();
      release_all_cached();
    }
  }

  snpuEvent_t get_event() {
    if (!free_events_.empty()) {
      snpuEvent_t e = free_events_.back();
      free_events_.pop_back();
      return e;
    }
    snpuEvent_t e = nullptr;
    int prev = 0;
    snpuGetDevice(&prev);
    snpuSetDevice(device_);
    const snpuError_t err = snpuEventCreate(&e, snpuEventDisableTiming);
    snpuSetDevice(prev);
    NPU_CHECK(err);
    return e;
  }

  void event_done(snpuEvent_t e, Block* block) {
    free_events_.push_back(e);
    if (--block->event_count == 0) release_to_pool(block);
  }

  // Returns blocks whose cross-stream uses have completed.
  void process_events() {
    while (!pending_.empty()) {
      auto [e, block] = pending_.front();
      const snpuError_t err = snpuEventQuery(e);
      if (err == snpuErrorNotReady) break;
      pending_.pop_front();
      event_done(e, block);
    }
  }

  void synchronize_pending() {
    if (pending_.empty()) return;
    ++stats_.num_sync_all_streams;
    while (!pending_.empty()) {
      auto [e, block] = pending_.front();
      pending_.pop_front();
      // Kernel errors stay with their streams for the user's next synchronizing call; here only completion counts.
      snpuEventSynchronize(e);
      event_done(e, block);
    }
  }

  const c10::DeviceIndex device_;
  std::mutex mutex_;
  BlockPool small_;
  BlockPool large_;
  std::set<Block*> segments_;  // first block of every segment
  std::map<std::pair<BlockPool*, snpuStream_t>, std::unique_ptr<ExpandableSegment>> expandable_;
  std::deque<std::pair<snpuEvent_t, Block*>> pending_;
  std::vector<snpuEvent_t> free_events_;
  DeviceStats stats_;
  std::map<c10::MempoolId_t, std::unique_ptr<PrivatePool>> private_pools_;
  struct AllocateTo {
    c10::MempoolId_t pool;
    std::thread::id thread;  // use_mem_pool's thread, or none for a stream's
    snpuStream_t stream;     // a capturing stream, or null
  };
  std::vector<AllocateTo> allocate_to_;  // use_mem_pool contexts and captures, innermost last
  double fraction_ = 1.0;
  int64_t oom_rejections_ = 0;  // allocations refused by throw_on_npumalloc_oom
  size_t allowed_ = SIZE_MAX;  // reserved bytes allowed by set_per_process_memory_fraction
  bool trace_on_ = false;
  uint32_t skip_mask_ = 0;  // bit per TraceEntry::Action not recorded
  size_t max_entries_ = 1;
  std::vector<TraceEntry> trace_;  // a ring buffer of max_entries_; trace_next_ is the oldest once full
  size_t trace_next_ = 0;
};

// MemPool references (the MemPool objects and use_mem_pool contexts), for every device.
std::mutex g_pools_mutex;
std::map<c10::MempoolId_t, int> g_pool_refs;
std::map<c10::MempoolId_t, std::pair<NPUCachingAllocator::PluggableAllocFn, NPUCachingAllocator::PluggableFreeFn>>
    g_pool_allocators;  // the MemPools created with an allocator
c10::CaptureId_t g_next_pool_uid = 1;

std::mutex g_raw_mutex;
std::unordered_map<void*, c10::DataPtr> g_raw_allocations;  // caching_allocator_alloc's blocks

std::set<c10::MempoolId_t> g_whole_segment_pools;  // keep_whole_segments' pools

bool pool_keeps_whole_segments(c10::MempoolId_t id) {
  std::lock_guard<std::mutex> g(g_pools_mutex);
  return g_whole_segment_pools.count(id) > 0;
}

std::pair<NPUCachingAllocator::PluggableAllocFn, NPUCachingAllocator::PluggableFreeFn> pool_allocator(
    c10::MempoolId_t id) {
  std::lock_guard<std::mutex> g(g_pools_mutex);
  auto it = g_pool_allocators.find(id);
  return it == g_pool_allocators.end() ? std::make_pair(nullptr, nullptr) : it->second;
}

DeviceAllocatorState& state(c10::DeviceIndex device) {
  static std::vector<std::unique_ptr<DeviceAllocatorState>> all = [] {
    std::vector<std::unique_ptr<DeviceAllocatorState>> v;
    for (c10::DeviceIndex d = 0; d < device_count(); ++d) v.push_back(std::make_unique<DeviceAllocatorState>(d));
    return v;
  }();
  check_device_index(device);
  return *all[device];
}

void free_block(void* ctx) {
  // In a bad fork the block belongs to the parent's pools, whose lock a parent thread may have held at fork time:
  // the child leaves it alone (its memory goes with the process).
  if (C10_UNLIKELY(in_bad_fork())) return;
  Block* block = static_cast<Block*>(ctx);
  if (C10_UNLIKELY(recovery::any_unsafe())) recovery::mark_safe(block->ptr);  // allocated again, it holds new data
  gpu_trace::memory_deallocation(block->ptr);  // before the block can be handed out again
  state(block->device).free(block);
}

// The user's allocator of change_current_allocator (NPUPluggableAllocator), in place of the caching allocator.
std::atomic<NPUCachingAllocator::PluggableAllocFn> g_plug_alloc{nullptr};
std::atomic<NPUCachingAllocator::PluggableFreeFn> g_plug_free{nullptr};
std::atomic<NPUCachingAllocator::PluggableDeviceStatsFn> g_plug_stats{nullptr};
std::atomic<NPUCachingAllocator::PluggableResetPeakFn> g_plug_reset_peak{nullptr};
std::atomic<bool> g_allocated_once{false};  // the allocator can no longer be swapped

struct PluggableBlock {
  void* ptr;
  size_t size;
  int device;
  snpuStream_t stream;
};

void free_pluggable(void* ctx) {
  if (C10_UNLIKELY(in_bad_fork())) return;
  auto* b = static_cast<PluggableBlock*>(ctx);
  gpu_trace::memory_deallocation(b->ptr);
  g_plug_free.load()(b->ptr, b->size, b->device, b->stream);
  delete b;
}

}  // namespace

NPUCachingAllocator* NPUCachingAllocator::get() {
  static NPUCachingAllocator instance;
  return &instance;
}

c10::DataPtr NPUCachingAllocator::allocate_on(size_t nbytes, const NPUStream& stream) {
  check_not_in_bad_fork();  // a cached block would be handed out without entering the runtime
  const c10::Device device = stream.device();
  if (nbytes == 0) return c10::DataPtr(nullptr, nullptr, &free_block, device);
  g_allocated_once.store(true, std::memory_order_relaxed);
  if (const PluggableAllocFn user_alloc = g_plug_alloc.load(std::memory_order_relaxed)) {
    const c10::DeviceGuard guard(device);  // the user's allocator allocates on the runtime's current device
    void* ptr = user_alloc(nbytes, device.index(), stream.handle());
    TORCH_CHECK_WITH(OutOfMemoryError, ptr, "NPU out of memory: the pluggable allocator (NPUPluggableAllocator) "
                     "returned no memory for ", format_size(nbytes), " on NPU ", static_cast<int>(device.index()));
    gpu_trace::memory_allocation(ptr);
    return c10::DataPtr(ptr, new PluggableBlock{ptr, nbytes, device.index(), stream.handle()}, &free_pluggable,
                        device);
  }
  Block* block = state(device.index()).malloc(nbytes, stream.handle());
  gpu_trace::memory_allocation(block->ptr);
  return c10::DataPtr(block->ptr, block, &free_block, device);
}

c10::DataPtr NPUCachingAllocator::allocate(size_t nbytes) { return allocate_on(nbytes, getCurrentNPUStream()); }

c10::DeleterFnPtr NPUCachingAllocator::raw_deleter() const { return nullptr; }

void NPUCachingAllocator::copy_data(void* dest, const void* src, std::size_t count) const {
  const NPUStream stream = getCurrentNPUStream();
  NPU_CHECK(snpuMemcpyAsync(dest, src, count, snpuMemcpyDeviceToDevice, stream.handle()));
  stream.synchronize();
}

bool NPUCachingAllocator::initialized() { return true; }

void NPUCachingAllocator::emptyCache(c10::MempoolId_t mempool_id) {
  for (c10::DeviceIndex d = 0; d < device_count(); ++d) {
    if (mempool_id == c10::MempoolId_t{0, 0}) {
      state(d).empty_cache();
    } else {
      state(d).empty_pool(mempool_id);
    }
  }
}

void NPUCachingAllocator::recordStream(const c10::DataPtr& ptr, c10::Stream stream) {
  // Tensors not from this allocator (e.g. zero-size ones) have nothing to track.
  if (!ptr.get() || ptr.get_deleter() != &free_block) return;
  Block* block = static_cast<Block*>(ptr.get_context());
  gpu_trace::record_stream(block->ptr, NPUStream(stream));
  state(block->device).record_stream(block, NPUStream(stream).handle());
}

void NPUCachingAllocator::eraseStream(const c10::DataPtr& ptr, c10::Stream stream) {
  if (!ptr.get() || ptr.get_deleter() != &free_block) return;
  Block* block = static_cast<Block*>(ptr.get_context());
  gpu_trace::erase_stream(block->ptr, NPUStream(stream));
  state(block->device).erase_stream(block, NPUStream(stream).handle());
}

DeviceStats NPUCachingAllocator::getDeviceStats(c10::DeviceIndex device) {
  const PluggableDeviceStatsFn user_stats = g_plug_stats.load();
  if (user_stats && g_plug_alloc.load()) return user_stats(device);
  return state(device).stats();
}

void NPUCachingAllocator::resetAccumulatedStats(c10::DeviceIndex device) { state(device).reset_accumulated(); }

void NPUCachingAllocator::resetPeakStats(c10::DeviceIndex device) {
  const PluggableResetPeakFn user_reset = g_plug_reset_peak.load();
  if (user_reset && g_plug_alloc.load()) {
    user_reset(device);
    return;
  }
  state(device).reset_peak();
}

std::pair<size_t, size_t> NPUCachingAllocator::getMemoryInfo(c10::DeviceIndex device) {
  check_device_index(device);
  size_t free_bytes = 0, total = 0;
  NPU_CHECK(snpuMemGetInfo(device, &free_bytes, &total));
  return {free_bytes, total};
}

NPUCachingAllocator::Snapshot NPUCachingAllocator::snapshot(c10::MempoolId_t pool) {
  Snapshot out;
  for (c10::DeviceIndex d = 0; d < device_count(); ++d) state(d).snapshot(pool, out);
  return out;
}

void NPUCachingAllocator::record_history(bool enabled, CreateContextFn gather, RecordContext when, bool trace,
                                         size_t max_entries, bool clear_history,
                                         const std::vector<TraceEntry::Action>& skip) {
  g_history_enabled.store(enabled);
  g_gather.store(enabled ? gather : nullptr);
  g_record_when.store(static_cast<int>(enabled ? when : RecordContext::NEVER));
  for (c10::DeviceIndex d = 0; d < device_count(); ++d)
    state(d).set_history(enabled && trace, max_entries, clear_history, skip);
}

bool NPUCachingAllocator::history_enabled() const { return g_history_enabled.load(); }

void NPUCachingAllocator::attach_trace_tracker(TraceTracker tracker) {
  std::lock_guard<std::mutex> lock(g_observers_mutex);
  auto trackers = std::make_shared<std::vector<TraceTracker>>();
  if (const auto current = std::atomic_load(&g_trace_trackers)) *trackers = *current;
  trackers->push_back(std::move(tracker));
  std::atomic_store(&g_trace_trackers, std::shared_ptr<const std::vector<TraceTracker>>(std::move(trackers)));
}

void NPUCachingAllocator::attach_oom_observer(OomObserver observer) {
  std::lock_guard<std::mutex> g(g_observers_mutex);
  g_oom_observers.push_back(std::move(observer));
}

void NPUCachingAllocator::set_memory_fraction(double fraction, c10::DeviceIndex device) {
  TORCH_CHECK_VALUE(fraction >= 0 && fraction <= 1, "Invalid fraction value: ", fraction, ". Allowed range: 0~1");
  state(device).set_fraction(fraction);
}

double NPUCachingAllocator::memory_fraction(c10::DeviceIndex device) { return state(device).fraction(); }

int64_t NPUCachingAllocator::oom_rejections(c10::DeviceIndex device) { return state(device).oom_rejections(); }

c10::MempoolId_t NPUCachingAllocator::create_pool(PluggableAllocFn alloc, PluggableFreeFn free) {
  TORCH_CHECK(!alloc == !free, "MemPool: the allocator's alloc and free functions must both be given");
  std::lock_guard<std::mutex> g(g_pools_mutex);
  const c10::MempoolId_t id{0, g_next_pool_uid++};
  g_pool_refs[id] = 1;
  if (alloc) g_pool_allocators[id] = {alloc, free};
  return id;
}

void NPUCachingAllocator::release_pool(c10::MempoolId_t pool) {
  {
    std::lock_guard<std::mutex> g(g_pools_mutex);
    auto it = g_pool_refs.find(pool);
    if (it == g_pool_refs.end() || --it->second > 0) return;
    g_pool_refs.erase(it);
    g_pool_allocators.erase(pool);
    g_whole_segment_pools.erase(pool);
  }
  for (c10::DeviceIndex d = 0; d < device_count(); ++d) state(d).release_pool(pool);
}

int NPUCachingAllocator::pool_use_count(c10::MempoolId_t pool) {
  std::lock_guard<std::mutex> g(g_pools_mutex);
  auto it = g_pool_refs.find(pool);
  return it == g_pool_refs.end() ? 0 : it->second;
}

void NPUCachingAllocator::retain_pool(c10::MempoolId_t pool) {
  std::lock_guard<std::mutex> g(g_pools_mutex);
  ++g_pool_refs[pool];
}

c10::MempoolId_t NPUCachingAllocator::new_pool_id() {
  std::lock_guard<std::mutex> g(g_pools_mutex);
  return {0, g_next_pool_uid++};
}

void NPUCachingAllocator::begin_allocate_to_pool(c10::DeviceIndex device, c10::MempoolId_t pool,
                                                 snpuStream_t stream) {
  {
    std::lock_guard<std::mutex> g(g_pools_mutex);
    auto it = g_pool_refs.find(pool);
    TORCH_CHECK(it != g_pool_refs.end(), "use_mem_pool: the MemPool (", pool.first, ", ", pool.second,
                ") was released");
    ++it->second;
  }
  state(device).begin_allocate_to_pool(pool, stream);
}

void NPUCachingAllocator::end_allocate_to_pool(c10::DeviceIndex device, c10::MempoolId_t pool,
                                               snpuStream_t stream) {
  state(device).end_allocate_to_pool(pool, stream);
  release_pool(pool);
}

void* NPUCachingAllocator::raw_alloc(size_t nbytes, const NPUStream& stream) {
  if (nbytes == 0) return nullptr;
  c10::DataPtr data = allocate_on(nbytes, stream);
  void* ptr = data.get();
  std::lock_guard<std::mutex> g(g_raw_mutex);
  g_raw_allocations.emplace(ptr, std::move(data));
  return ptr;
}

void NPUCachingAllocator::set_pluggable_device_stats_fn(PluggableDeviceStatsFn fn) { g_plug_stats.store(fn); }

void NPUCachingAllocator::set_pluggable_reset_peak_fn(PluggableResetPeakFn fn) { g_plug_reset_peak.store(fn); }

void NPUCachingAllocator::use_pluggable(PluggableAllocFn alloc, PluggableFreeFn free) {
  TORCH_CHECK(alloc && free, "change_current_allocator: the allocator's alloc and free functions must not be null");
  TORCH_CHECK(!g_allocated_once.load() && !g_plug_alloc.load(),
              "Can't swap an already initialized allocator: change_current_allocator must be called before the "
              "first npu allocation");
  g_plug_free.store(free);
  g_plug_alloc.store(alloc);
}

void NPUCachingAllocator::raw_delete(void* ptr) {
  if (!ptr) return;
  c10::DataPtr data;
  {
    std::lock_guard<std::mutex> g(g_raw_mutex);
    auto it = g_raw_allocations.find(ptr);
    TORCH_CHECK(it != g_raw_allocations.end(), "caching_allocator_delete: invalid device pointer: ", ptr,
                " (not from caching_allocator_alloc, or already deleted)");
    data = std::move(it->second);
    g_raw_allocations.erase(it);
  }
}

std::shared_ptr<NPUCachingAllocator::PoolCheckpoint> NPUCachingAllocator::checkpoint_pool(c10::DeviceIndex device,
                                                                                         c10::MempoolId_t pool) {
  return std::make_shared<PoolCheckpoint>(PoolCheckpoint{device, pool, state(device).checkpoint(pool)});
}

void NPUCachingAllocator::restore_pool_checkpoint(const PoolCheckpoint& checkpoint,
                                                  const std::vector<c10::StorageImpl*>& stale,
                                                  const std::vector<c10::StorageImpl*>& live) {
  // Every block of the pool is freed below: storages owning one let go of it first (the Block objects do not survive
  // the merges), the stale ones for good, the live ones until they own their restored block.
  for (const auto* storages : {&stale, &live}) {
    for (c10::StorageImpl* s : *storages) {
      if (!owns_block(s)) continue;
      c10::DataPtr& data = s->mutable_data_ptr();
      data.release_context();
      data = c10::DataPtr(data.get(), data.device());
    }
  }
  std::vector<void*> freed;
  std::vector<Block*> allocated;
  state(checkpoint.device).restore(checkpoint.pool, checkpoint.segments, freed, allocated);
  std::unordered_map<void*, Block*> by_ptr;
  for (Block* b : allocated) by_ptr.emplace(b->ptr, b);
  const c10::Device device(c10::DeviceType::PrivateUse1, checkpoint.device);
  for (c10::StorageImpl* s : live) {
    auto it = by_ptr.find(s->mutable_data());
    TORCH_CHECK(it != by_ptr.end(), "NPU graph trees: a live storage at ", s->mutable_data(),
                " is not a block allocated in the checkpoint");
    s->set_data_ptr_noswap(c10::DataPtr(it->second->ptr, it->second, &free_block, device));
    by_ptr.erase(it);
  }
  std::lock_guard<std::mutex> g(g_raw_mutex);
  for (auto& [ptr, block] : by_ptr) g_raw_allocations.emplace(ptr, c10::DataPtr(ptr, block, &free_block, device));
}

void NPUCachingAllocator::keep_whole_segments(c10::MempoolId_t pool) {
  std::lock_guard<std::mutex> g(g_pools_mutex);
  g_whole_segment_pools.insert(pool);
}

bool NPUCachingAllocator::pool_live_allocations_are(c10::DeviceIndex device, c10::MempoolId_t pool,
                                                    const std::set<void*>& ptrs) {
  return state(device).live_allocations_are(pool, ptrs);
}

bool NPUCachingAllocator::owns_block(const c10::StorageImpl* storage) {
  return storage->data_ptr().get_deleter() == &free_block;
}

void NPUCachingAllocator::free_and_remove_deleter(c10::StorageImpl* storage) {
  TORCH_CHECK(owns_block(storage), "_free_And_Remove_DeleterFn: the storage does not own a block of the npu caching "
              "allocator");
  c10::DataPtr& data = storage->mutable_data_ptr();
  void* block = data.release_context();
  data = c10::DataPtr(data.get(), data.device());  // the address stays, owned by nobody
  free_block(block);
}

REGISTER_ALLOCATOR(c10::DeviceType::PrivateUse1, NPUCachingAllocator::get());

}  // namespace softnpu
