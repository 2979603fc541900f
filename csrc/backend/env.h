// The backend's configuration: the BACKEND rows of csrc/common/env_vars.def, parsed once, with errors that name the
// variable.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace softnpu {

// PYTORCH_NPU_ALLOC_CONF, with the meaning of the same keys in PYTORCH_CUDA_ALLOC_CONF.
struct AllocatorConfig {
  size_t max_split_size = SIZE_MAX;         // max_split_size_mb: blocks above it are never split
  double garbage_collection_threshold = 0;  // fraction of capacity above which unused cached blocks are released
  size_t roundup_power2_divisions = 0;      // round requests up to power-of-2 divisions (0: 512-byte rounding)
};

const AllocatorConfig& allocator_config();

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
