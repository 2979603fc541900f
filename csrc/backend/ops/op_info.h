// What the generic op path needs to know about an operator, worked out once from its schema and cached by schema
// address: whether it is a view, which arguments it writes, which of its returns are fresh tensors, its out=
// overload (found by schema, since overload names follow no single pattern: max.dim -> max.dim_max), its generator
// arguments, and whether a Meta kernel can infer its outputs.
#pragma once

#include <ATen/core/dispatch/Dispatcher.h>

#include "backend/ops/cube.h"
#include "backend/ops/meta_fixes.h"

#include <atomic>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

namespace softnpu {

class MetaCache;

struct OpInfo {
  explicit OpInfo(const c10::OperatorHandle& op);
  ~OpInfo();

  c10::OperatorHandle op;
  // "aten::add.Tensor": the kernel name in errors, logs and the profiler. Lives as long as the process.
  std::string name;

  // Metadata only: every return aliases an argument without writing it (transpose, view, unfold, ...), or the op
  // is an in-place view (as_strided_, squeeze_, ...).
  bool is_view = false;
  // Some return is not a tensor (bool, int, Scalar, ...): its value needs the data.
  bool returns_non_tensor = false;
  // The outputs are values computed from the data (a non-tensor return, or ATen's data_dependent_output tag, as
  // for equal or _local_scalar_dense), or shaped by the CPU kernel otherwise than the Meta kernel says
  // (_embedding_bag): the op always synchronizes, without trying shape inference.
  bool data_dependent = false;
  // A Meta kernel (direct, composite, or registered from Python) can infer the outputs.
  bool has_meta = false;
  // Corrects the Meta kernel's result where it disagrees with CPU and CUDA (ops/meta_fixes.h), or null.
  MetaFix meta_fix = nullptr;

  // The half-precision dtypes in which the op may compute in float32 (ops/cube.h): the matrix and convolution
  // family, and a few ops whose half-precision CPU kernels are slow.
  unsigned float32_dtypes = 0;
  CubeGemm cube_gemm = CubeGemm::kNone;  // a GEMM the cube runs itself in float16 (ops/cube.h)
  // For the ops of the float32 contract: the parameter arguments (weight, bias, running statistics), which alone
  // widen when the weight is given (ops/cube.h, float32_contract_operands), and the weight's position.
  std::vector<int> contract_args;
  int contract_weight = -1;
  // The dtypes its CPU kernel lacks where CUDA's has them: computed wider (ops/widen.h), as a mask of 1 << ScalarType.
  uint64_t widened_dtypes = 0;
  std::vector<int> dtype_args;  // ScalarType arguments (norm's dtype=, ...): the float32 route widens them too

  std::vector<int> written_args;  // arguments the op writes (in-place self, out= tensors, running stats, ...)
  std::vector<int> out_args;      // the subset declared out= (kwarg outputs, which the op may resize)
  std::vector<int> generator_args;
  // For each return: the index of the argument it aliases (written in place), or -1 for a fresh output.
  std::vector<int> return_alias;
  int fresh_returns = 0;

  // For ops with fresh returns: the out= overload taking the same arguments plus one out tensor per return.
  std::optional<c10::OperatorHandle> out_variant;

  // Counters for torch.npu's sync-point report. On a cache line of their own: the host bumps them for every launch
  // while compute threads read the facts above (out_variant, written_args), which would otherwise bounce the line
  // between the cores once per launch.
  alignas(64) std::atomic<uint64_t> launches{0};
  std::atomic<uint64_t> sync_points{0};

  MetaCache& meta_cache() { return *meta_cache_; }

 private:
  std::shared_ptr<MetaCache> meta_cache_;  // the FFT ops share one (fft_plan_cache.h)
};

// The info of an op, created on first use (thread-safe; never freed).
OpInfo& op_info(const c10::OperatorHandle& op);

// Every op seen so far (for reports).
std::vector<OpInfo*> all_op_infos();

}  // namespace softnpu
