// The device side of the generic op path: the record the host fills for a launch (KernelLaunch), and how a compute
// thread of the runtime runs it (run_kernel): rebuild the arguments as CPU tensors over device memory, run ATen's CPU
// kernel, hand the record back for reuse.
//
// Nothing the host allocates is freed by a compute thread, nor the reverse: records are recycled, and the tensor
// objects a kernel needs are made and destroyed on the compute thread from plain descriptions. (Freeing memory
// across threads defeats malloc's per-thread caches; it was a fifth of the host's time per launch.)
#pragma once

#include <ATen/core/Tensor.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <c10/util/SmallVector.h>

#include <atomic>
#include <exception>
#include <memory>
#include <vector>

#include "backend/generator.h"
#include "common/kernel_threads.h"

namespace softnpu {

struct OpInfo;

// A tensor as the kernel rebuilds it.
struct TensorRef {
  enum class Kind : uint8_t {
    kUndefined,
    kDevice,     // a CPU view over device memory
    kCpuScalar,  // a 0-dim CPU tensor, by value as of the launch (the host may change it before the kernel runs)
  };
  Kind kind = Kind::kUndefined;
  c10::ScalarType dtype = c10::ScalarType::Undefined;
  bool conj = false;
  bool neg = false;
  bool wrapped_number = false;
  const void* identity = nullptr;  // kDevice: the host's TensorImpl, compared only (one host tensor is one CPU tensor)
  void* base = nullptr;            // kDevice: storage data and size
  size_t nbytes = 0;
  int64_t offset = 0;
  c10::SmallVector<int64_t, 5> sizes;
  c10::SmallVector<int64_t, 5> strides;
  c10::Scalar value;  // kCpuScalar

  void assign(const at::Tensor& t);
};

// Where the tensors of one argument or return go: a tensor, a tensor list, or an optional-tensor list.
struct TensorSlot {
  enum class Kind : uint8_t { kTensor, kList, kOptionalList };
  Kind kind;
  uint32_t position;  // index in the stack (arguments) or among the returns
  uint32_t first;     // refs[first, first + count)
  uint32_t count;
};

// What a synchronizing launch hands back to the waiting host thread: the returns, and the arguments as the kernel saw
// them (CPU tensors over device memory), so the host can take over what the CPU kernel did to the tensors it wrote
// (resized, or moved to host memory to grow them).
struct SyncResult {
  torch::jit::Stack returns;
  torch::jit::Stack arguments;
  std::exception_ptr error;
};

struct KernelLaunch {
  // A cleared record, reused when one is free (host thread).
  static KernelLaunch* acquire(OpInfo* info);

  // Host side: the op's arguments, and the preallocated outputs for its fresh returns.
  void add_argument(const c10::IValue& value);
  void add_output(uint32_t return_index, const c10::IValue& output);

  OpInfo* info = nullptr;
  torch::jit::Stack stack;  // the arguments; the kernel fills the tensor slots
  std::vector<TensorRef> refs;
  std::vector<TensorSlot> argument_slots;
  std::vector<TensorSlot> output_slots;
  // generator argument -> its draw at launch (while an NPU graph captures, completed at run time by the replay)
  c10::SmallVector<std::pair<size_t, RngDraw>, 1> seeds;
  // Launched while an NPU graph captures: the record may run many times, and running consumes the stack (the op
  // replaces its arguments with its returns), so each run starts from a copy kept at the first.
  bool replayable = false;
  torch::jit::Stack pristine;
  bool use_out_variant = false;                           // write through the op's out= overload
  std::shared_ptr<std::atomic<bool>> out_variant_failed;  // set when the out= overload misbehaves
  std::shared_ptr<SyncResult> sync;

 private:
  void add_slot(std::vector<TensorSlot>& slots, uint32_t position, const c10::IValue& value);
};

// snpuKernelFn and snpuKernelCleanupFn for KernelLaunch records.
int run_kernel(void* launch);
void recycle_kernel(void* launch);

}  // namespace softnpu
