// torch_npu's unsafe-data check after a device fault (its NPURecovery; Python: torch.npu._recovery). After
// restart_device(rebuild_all_resources=True) every live block of the device is unsafe and the check is on: an op
// reading a tensor whose block is unsafe raises "There is unsafe data in the input tensor."; a copy into a tensor
// makes its block safe again, and a freed block is safe when it is allocated again. Blocks are named by their base
// address (a storage's data pointer).
#pragma once

#include <ATen/core/Tensor.h>

#include <atomic>

namespace softnpu::recovery {

extern std::atomic<bool> g_any_unsafe;

// Some block is marked: one relaxed load on every op and every free while none is.
inline bool any_unsafe() { return g_any_unsafe.load(std::memory_order_relaxed); }

void mark_unsafe(const void* block);
void mark_safe(const void* block);
bool is_safe(const void* block);

// torch_npu's npu data unsafe flag: whether ops check their inputs.
void set_check(bool on);
bool check_enabled();

// Raises torch_npu's error for an npu tensor in an unsafe block while the check is on.
void check_safe(const at::Tensor& t);

}  // namespace softnpu::recovery
