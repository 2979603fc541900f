// The generic op path: every ATen op on npu tensors that has no dedicated kernel comes here (the PrivateUse1 boxed
// fallback) and runs asynchronously on the current stream:
//
//   host thread                                          device compute thread (the runtime's)
//   1. check devices (CUDA's error on a mismatch)
//   2. infer outputs with the Meta kernel (cached)
//   3. allocate outputs from the caching allocator
//   4. enqueue a kernel  --------------------------->    5. run ATen's CPU kernel (the op's out= overload when it
//   6. return the outputs at once                           has one) on CPU views of the device memory, no copies
//
// Ops whose outputs depend on data (nonzero, unique, masked_select, ops returning a Python scalar, ops without a
// Meta kernel) cannot size their outputs in advance: they are sync points. They wait for the stream, run on the
// compute thread, and copy their results into device memory; they are counted, and TORCH_NPU_FALLBACK_CPU_DISABLE=1
// makes them errors naming the op.
#pragma once

#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/library.h>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace softnpu {

// Runs an op on npu tensors through the generic path (the fallback kernel itself; other kernels reuse it).
void execute_op(const c10::OperatorHandle& op, torch::jit::Stack* stack);

// Registers the generic path as npu's kernel of every aten op for which take(op) holds, where the fallback alone
// would not see the op (it has a kernel for every backend, which would run on npu tensors).
void take_over_aten_ops(torch::Library& m, const std::function<bool(const c10::OperatorHandle&)>& take);

// Benchmarks only: run every op as PyTorch's generic CPU fallback does (torch_npu's and OpenReg's CPU fallbacks):
// wait for the device, copy the inputs to the host, run the CPU kernel there, copy the results back. The baseline
// that `make bench` measures softnpu's op path against.
void set_copy_through_cpu(bool enabled);

struct SyncPointCount {
  std::string op;
  uint64_t count;
};
// Counts a sync point taken outside this path (the data-dependent kernels of sparse tensors, ops/sparse.cpp).
void count_sync_point(const c10::OperatorHandle& op);

// Sync points taken so far, per op, most frequent first.
std::vector<SyncPointCount> sync_point_counts();
uint64_t total_sync_points();

}  // namespace softnpu
