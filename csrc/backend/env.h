// The backend's configuration: the BACKEND rows of csrc/common/env_vars.def, parsed once, with errors that name the
// variable.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace softnpu {

// PYTORCH_NPU_ALLOC_CONF, with the meaning of the same keys in PYTORCH_CUDA_ALLOC_CONF and torch_npu.
struct AllocatorConfig {
  // roundup_power2_divisions has a value per power-of-2 interval of request sizes, as c10's: interval 0 holds sizes
  // below 2 MiB, interval i sizes in [2^(20+i), 2^(21+i)), the last everything above.
  static constexpr size_t kRoundupIntervals = 16;

  size_t max_split_size = SIZE_MAX;         // max_split_size_mb: blocks above it are never split
  // max_non_split_rounding_mb: a request of max_split_size or more takes a cached unsplittable block only if the block
  // is at most this much larger (c10's default, 20 MiB).
  size_t max_non_split_rounding = 20 << 20;
  double garbage_collection_threshold = 0;  // fraction of capacity above which unused cached blocks are released
  size_t roundup_power2_divisions[kRoundupIntervals] = {};  // per interval; 0 or 1: 512-byte rounding
  // segment_size_mb (torch_npu's, deprecated there for large_segment_size_mb; 0: not set): the pages an expandable
  // segment of the large pool maps, when large_segment_size_mb is not set.
  size_t segment_size = 0;
  size_t large_segment_size = 20 << 20;  // large_segment_size_mb: the segments of large requests below 10 MiB
  double memory_fraction = 1;            // per_process_memory_fraction: the initial set_per_process_memory_fraction
  bool pinned_use_background_threads = false;  // completed pinned-memory uses are processed by a thread of their own
  bool expandable_segments = false;  // one segment per stream and pool that grows in place (runtime virtual memory)
  // pin_memory_expandable_segments: torch_npu's expandable pinned-memory allocator (expandable_host_allocator.h); NPU
  // graphs refuse to capture with it, as torch_npu's (it has no graph pools).
  bool pin_memory_expandable_segments = false;
  // throw_on_npumalloc_oom: a new segment that would take the reserved memory above per_process_memory_fraction of the
  // device is refused with OutOfMemoryError before the device is asked (torch_npu's num_oom_rejections).
  bool throw_on_oom = false;
  // pinned_max_round_threshold_mb / pinned_max_cached_size_mb: pinned blocks above the first are not rounded to a
  // power of 2, above the second not cached once freed.
  size_t pinned_max_round_threshold = SIZE_MAX;
  size_t pinned_max_cached_size = SIZE_MAX;

  size_t divisions_for(size_t size) const {
    const size_t log2 = 63 - static_cast<size_t>(__builtin_clzll(size | 1));
    const size_t i = log2 > 20 ? log2 - 20 : 0;
    return roundup_power2_divisions[i < kRoundupIntervals ? i : kRoundupIntervals - 1];
  }
};

// The configuration in force: PYTORCH_NPU_ALLOC_CONF, then each set_allocator_settings. A snapshot, valid for the
// process's life (a change publishes a new one).
const AllocatorConfig& allocator_config();

// torch.npu.memory._set_allocator_settings (torch_npu._C._npu_npuCachingAllocator_set_allocator_settings): the keys of
// PYTORCH_NPU_ALLOC_CONF that torch_npu changes at run time (expandable_segments, max_split_size_mb,
// max_non_split_rounding_mb, release_lock_on_npumalloc, throw_on_npumalloc_oom, per_process_memory_fraction,
// pinned_max_round_threshold_mb, pinned_max_cached_size_mb) over the configuration in force. A bad value raises
// RuntimeError naming the key; another key, ValueError, as torch_npu's. Returns the new configuration.
const AllocatorConfig& set_allocator_settings(const std::string& settings);

// PYTORCH_NO_NPU_MEMORY_CACHING: the caching allocator caches nothing (PYTORCH_NO_CUDA_MEMORY_CACHING's meaning).
bool no_memory_caching();

// OOM_SNAPSHOT_ENABLE (0 off, 1 history and state, 2 state only) and OOM_SNAPSHOT_PATH: the snapshot written when an
// OutOfMemoryError is raised (python/softnpu/npu/memory.py writes it).
int oom_snapshot_mode();
const std::string& oom_snapshot_path();

// SOFTNPU_HALF_COMPUTE: how the cube ops (ops/cube.h) compute in float16 and bfloat16.
enum class HalfCompute { kAuto, kNative, kFloat32 };
HalfCompute half_compute();

// TORCH_NPU_FALLBACK_CPU_DISABLE: host fallbacks (synchronizing ops) are errors.
bool fallback_cpu_disabled();

}  // namespace softnpu
