// The caching device allocator, in the manner of CUDA's (c10/cuda/CUDACachingAllocator) and torch_npu's:
//
//  - Requests are padded by 32 bytes (torch_npu's pad) and rounded (512 bytes, or PYTORCH_NPU_ALLOC_CONF roundup_power2_divisions per size range) and served
//    from two pools: small (<= 1 MiB, carved from 2 MiB segments) and large (carved from 20 MiB
//    segments: large_segment_size_mb, or an exact segment rounded to 2 MiB above 10 MiB). Blocks are split on allocation and merged with free neighbours on free.
//  - Free lists are per stream. A block freed by the host goes back to its stream's free list at once: work queued
//    later on that stream runs after the work that used the block, so reuse is safe without waiting. If the block was
//    used on other streams (record_stream), it returns only after events recorded on those streams complete.
//  - Segments come from the runtime (snpuMalloc). When the device is exhausted, cached segments are released and the
//    allocation retried; if it still fails, torch.OutOfMemoryError is raised with CUDA's kind of message.
//  - Statistics are c10's DeviceStats, so torch.npu.memory_stats() reads like torch.cuda.memory_stats().
//  - Memory history (torch.npu.memory._record_memory_history): c10's TraceEntry ring buffer per device and the stack
//    of every live block, gathered by a CreateContextFn the Python bindings install (Python and C++ frames).
//  - Private pools (torch.npu.MemPool / use_mem_pool): allocations of a thread inside use_mem_pool come from the
//    pool's own blocks; a released pool returns its segments to the device as soon as they are free.
//  - set_per_process_memory_fraction caps the reserved memory of a device: beyond it, OutOfMemoryError.
//  - PYTORCH_NO_NPU_MEMORY_CACHING=1: every block is a segment of its own, returned to the device when freed.
//  - expandable_segments:True: one segment per stream and pool, an address range reserved from the runtime that grows
//    by mapping pages (snpuMemMap); whole free pages are unmapped before it grows and on empty_cache. The large pool's
//    pages are large_segment_size_mb, else segment_size_mb (torch_npu's deprecated key), when set; else 2 MiB.
#pragma once

#include <c10/core/CachingDeviceAllocator.h>

#include <c10/core/StorageImpl.h>

#include <functional>
#include <memory>
#include <set>
#include <vector>

#include "backend/stream.h"

namespace softnpu {

class NPUCachingAllocator final : public c10::DeviceAllocator {
 public:
  static NPUCachingAllocator* get();

  // c10::Allocator: allocates on the current device, for its current stream.
  c10::DataPtr allocate(size_t nbytes) override;
  c10::DeleterFnPtr raw_deleter() const override;
  // Synchronous device-to-device copy (used by storage copies outside the op path).
  void copy_data(void* dest, const void* src, std::size_t count) const override;

  // c10::DeviceAllocator.
  bool initialized() override;
  void emptyCache(c10::MempoolId_t mempool_id = {0, 0}) override;
  void recordStream(const c10::DataPtr& ptr, c10::Stream stream) override;
  // torch_npu's eraseStream: undoes recordStream(ptr, stream), so freeing the block no longer waits for that stream.
  void eraseStream(const c10::DataPtr& ptr, c10::Stream stream);
  c10::CachingDeviceAllocator::DeviceStats getDeviceStats(c10::DeviceIndex device) override;
  void resetAccumulatedStats(c10::DeviceIndex device) override;
  void resetPeakStats(c10::DeviceIndex device) override;
  std::pair<size_t, size_t> getMemoryInfo(c10::DeviceIndex device) override;

  // Allocates for a given stream of the current device (the op path passes the stream it launches on).
  c10::DataPtr allocate_on(size_t nbytes, const NPUStream& stream);

  // Segments and blocks of every device (or of one private pool), for torch.npu.memory_snapshot(), and each
  // device's recorded history (empty unless recording).
  struct Snapshot {
    std::vector<c10::CachingDeviceAllocator::SegmentInfo> segments;
    std::vector<std::vector<c10::CachingDeviceAllocator::TraceEntry>> device_traces;
  };
  Snapshot snapshot(c10::MempoolId_t pool = {0, 0});

  // torch.npu.memory._record_memory_history: trace keeps a history of up to max_entries events per device (else only
  // the live blocks' stacks), but none of the actions in `skip`; `when` says which events get a stack from
  // `gather`. enabled=false stops recording.
  void record_history(bool enabled, c10::CachingDeviceAllocator::CreateContextFn gather,
                      c10::CachingDeviceAllocator::RecordContext when, bool trace, size_t max_entries,
                      bool clear_history, const std::vector<c10::CachingDeviceAllocator::TraceEntry::Action>& skip);
  // Whether _record_memory_history is on (torch_npu._C._npu_isHistoryEnabled).
  bool history_enabled() const;
  // CUDA's and torch_npu's attachAllocatorTraceTracker: every tracker sees each event of every device (the ones
  // _record_memory_history records) as it happens, whether or not history is recorded. Called with the allocator
  // locked: a tracker must not allocate on npu or call into torch.
  using TraceTracker = std::function<void(const c10::CachingDeviceAllocator::TraceEntry&)>;
  void attach_trace_tracker(TraceTracker tracker);
  // Called (allocator unlocked) before an OutOfMemoryError is raised: device, bytes requested, bytes free on it.
  using OomObserver = std::function<void(c10::DeviceIndex, size_t, size_t)>;
  void attach_oom_observer(OomObserver observer);

  // The cap of reserved memory, as a fraction of the device's capacity (1 by default).
  void set_memory_fraction(double fraction, c10::DeviceIndex device);
  double memory_fraction(c10::DeviceIndex device);
  // Allocations refused by PYTORCH_NPU_ALLOC_CONF's throw_on_npumalloc_oom (memory_stats()' num_oom_rejections).
  int64_t oom_rejections(c10::DeviceIndex device);

  // Private pools: create returns a new id, release drops the creator's reference. While begin/end bracket a
  // thread's work, that thread's allocations on the device come from the pool; with a stream (an NPU graph's
  // capture), the allocations on that stream from any thread. A pool created with alloc/free (an
  // NPUPluggableAllocator's, see use_pluggable) gets its segments from them instead of the runtime. retain adds
  // a reference (creating the pool for an id from new_pool_id, torch.npu.graph_pool_handle: the graphs that
  // capture into it hold it).
  using PluggableAllocFn = void* (*)(size_t size, int device, snpuStream_t stream);
  using PluggableFreeFn = void (*)(void* ptr, size_t size, int device, snpuStream_t stream);
  c10::MempoolId_t create_pool(PluggableAllocFn alloc = nullptr, PluggableFreeFn free = nullptr);
  c10::MempoolId_t new_pool_id();
  void retain_pool(c10::MempoolId_t pool);
  void release_pool(c10::MempoolId_t pool);
  int pool_use_count(c10::MempoolId_t pool);
  void begin_allocate_to_pool(c10::DeviceIndex device, c10::MempoolId_t pool, snpuStream_t stream = nullptr);
  void end_allocate_to_pool(c10::DeviceIndex device, c10::MempoolId_t pool, snpuStream_t stream = nullptr);

  // torch.npu.memory.change_current_allocator(NPUPluggableAllocator(...)): every later allocation calls the user's
  // functions (torch_npu's signatures, the stream as the runtime's handle) instead of the cache. Only before the first
  // allocation; the statistics then stay those of the unused cache, unless the functions below are given.
  void use_pluggable(PluggableAllocFn alloc, PluggableFreeFn free);
  // NPUPluggableAllocator.allocator()'s set_get_device_stats_fn / set_reset_peak_status_fn (torch_npu's): while a
  // pluggable allocator is current, getDeviceStats answers with the user's function and resetPeakStats calls theirs.
  using PluggableDeviceStatsFn = c10::CachingDeviceAllocator::DeviceStats (*)(c10::DeviceIndex device);
  using PluggableResetPeakFn = void (*)(c10::DeviceIndex device);
  void set_pluggable_device_stats_fn(PluggableDeviceStatsFn fn);
  void set_pluggable_reset_peak_fn(PluggableResetPeakFn fn);

  // Graph trees (torch_npu._C._npu_getCheckpointState / _npu_setCheckpointPoolState / _npu_checkPoolLiveAllocations,
  // CUDA's checkpoints of a private pool): a pool's segments on a device, block by block, so that a later recording
  // can start from the memory state that followed an earlier one.
  struct BlockCheckpoint {
    size_t size;
    size_t requested_size;
    bool allocated;
  };
  struct SegmentCheckpoint {
    void* ptr;
    snpuStream_t stream;
    bool is_small;
    std::vector<BlockCheckpoint> blocks;
  };
  struct PoolCheckpoint {
    c10::DeviceIndex device;
    c10::MempoolId_t pool;
    std::vector<SegmentCheckpoint> segments;
  };
  std::shared_ptr<PoolCheckpoint> checkpoint_pool(c10::DeviceIndex device, c10::MempoolId_t pool);
  // Frees every block the pool has allocated now and allocates again those the checkpoint had allocated, at the same
  // addresses. `stale` storages (whose blocks are freed) lose their deleter; each of `live` whose address is a
  // restored block owns that block from now on; the other restored blocks are raw allocations (raw_delete frees them).
  void restore_pool_checkpoint(const PoolCheckpoint& checkpoint, const std::vector<c10::StorageImpl*>& stale,
                               const std::vector<c10::StorageImpl*>& live);
  // The pool's segments stay whole under expandable_segments:True, so that its checkpoints restore block by block (an
  // expandable segment's free pages are unmapped as it grows, which a checkpoint's blocks cannot follow). Before its
  // first allocation; graph trees mark their pools when they first allocate to them.
  void keep_whole_segments(c10::MempoolId_t pool);
  // Whether the pool's allocated blocks on the device are exactly those at `ptrs`.
  bool pool_live_allocations_are(c10::DeviceIndex device, c10::MempoolId_t pool, const std::set<void*>& ptrs);
  // torch._C._has_Standard_Deleter / _free_And_Remove_DeleterFn for npu storages (this allocator's DataPtrs carry
  // their block, not raw_deleter()): whether the storage owns a block of this allocator; free its block now and leave
  // the storage pointing at it without owning it.
  static bool owns_block(const c10::StorageImpl* storage);
  void free_and_remove_deleter(c10::StorageImpl* storage);

  // caching_allocator_alloc / caching_allocator_delete: raw pointers, the block tracked here.
  void* raw_alloc(size_t nbytes, const NPUStream& stream);
  void raw_delete(void* ptr);

 private:
  NPUCachingAllocator() = default;
};

}  // namespace softnpu
