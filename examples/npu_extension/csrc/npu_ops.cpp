// Two custom operators for npu written as torch_npu's documentation shows, registered in the dispatcher for
// PrivateUse1 (npu) and run on the current NPU stream:
//   example_ops::axpy(x, y, alpha) = y + alpha * x    -- an Ascend operator through at_npu::native::OpCommand
//   example_ops::swiglu(gate, up)  = silu(gate) * up  -- two aclnn operators through libopapi.so's two phases
//   example_ops::rms_norm(x, gamma, epsilon) -> (y, rstd) -- aclnnRmsNorm through OpCommand's custom handler, the way
//                                     extensions' EXEC_NPU_CMD macros (mmcv's) run an aclnn call
#include <ATen/ATen.h>
#include <dlfcn.h>
#include <torch/library.h>

#include "torch_npu/csrc/core/npu/DeviceUtils.h"
#include "torch_npu/csrc/core/npu/NPUCachingAllocator.h"
#include "torch_npu/csrc/core/npu/NPUGuard.h"
#include "torch_npu/csrc/core/npu/NPUStream.h"
#include "torch_npu/csrc/core/npu/npu_log.h"
#include "torch_npu/csrc/framework/OpCommand.h"
#include "torch_npu/csrc/framework/utils/CalcuOpUtil.h"
#include "torch_npu/csrc/framework/utils/OpPreparation.h"

namespace {

at::Tensor axpy_npu(const at::Tensor& x, const at::Tensor& y, double alpha) {
  torch_npu::utils::torch_check_npu(x);
  at::Tensor result = at_npu::native::OpPreparation::apply_tensor(y);
  at_npu::native::OpCommand cmd;
  cmd.Name("Axpy").Input(y).Input(x).Output(result).Attr("alpha", static_cast<float>(alpha)).Run();
  return result;
}

// The aclnn interface as extensions reach it: libopapi.so opened by name, each operator's two entry points looked up,
// tensors described by aclCreateTensor over their storage, the workspace from the caching allocator, the run on the
// current stream.
struct aclTensor;
struct aclOpExecutor;
using CreateTensor = aclTensor* (*)(const int64_t*, uint64_t, aclDataType, const int64_t*, int64_t, aclFormat,
                                    const int64_t*, uint64_t, void*);
using DestroyTensor = int (*)(const aclTensor*);
using UnaryWorkspace = int (*)(const aclTensor*, aclTensor*, uint64_t*, aclOpExecutor**);
using BinaryWorkspace = int (*)(const aclTensor*, const aclTensor*, aclTensor*, uint64_t*, aclOpExecutor**);
using Launch = int (*)(void*, uint64_t, aclOpExecutor*, aclrtStream);

void* opapi(const char* name) {
  static void* handle = dlopen("libopapi.so", RTLD_LAZY);
  TORCH_CHECK(handle != nullptr, "libopapi.so was not found: ", dlerror());
  void* fn = dlsym(handle, name);
  if (fn == nullptr) ASCEND_LOGW("dlsym %s from libopapi.so failed: %s", name, dlerror());
  TORCH_CHECK(fn != nullptr, name, " is not in libopapi.so");
  return fn;
}

aclTensor* describe(const at::Tensor& t) {
  static const auto create = reinterpret_cast<CreateTensor>(opapi("aclCreateTensor"));
  const int64_t storage_elements = static_cast<int64_t>(t.storage().nbytes() / t.itemsize());
  const aclFormat format = t.dim() == 3 ? ACL_FORMAT_NCL : t.dim() == 4 ? ACL_FORMAT_NCHW : ACL_FORMAT_ND;
  return create(t.sizes().data(), t.dim(), at_npu::native::CalcuOpUtil::ConvertToAclDataType(t.scalar_type()),
                t.strides().data(), t.storage_offset(), format, &storage_elements, 1,
                const_cast<void*>(t.storage().data()));
}

// Runs an operator's second phase on the current stream through OpCommand's aclnn entry (as torch_npu's
// EXEC_NPU_CMD does), its workspace (if any) from the caching allocator.
void launch(const char* name, uint64_t workspace_size, aclOpExecutor* executor) {
  at::Tensor workspace;
  if (workspace_size > 0) {
    workspace = at_npu::native::OpPreparation::apply_tensor_without_format(
        {static_cast<int64_t>(workspace_size)}, at::TensorOptions().dtype(at::kByte).device(c10::DeviceType::PrivateUse1));
  }
  void* workspace_addr = workspace_size > 0 ? workspace.data_ptr() : nullptr;
  const auto run = reinterpret_cast<Launch>(opapi(name));
  const aclrtStream stream = c10_npu::getCurrentNPUStream().stream(false);
  at_npu::native::OpCommand::RunOpApiV2(name, [=] { return run(workspace_addr, workspace_size, executor, stream); });
}

at::Tensor swiglu_npu(const at::Tensor& gate, const at::Tensor& up) {
  TORCH_CHECK(gate.sizes() == up.sizes(), "swiglu: gate and up must have the same shape");
  const c10_npu::NPUGuard guard(gate.device());
  static const auto destroy = reinterpret_cast<DestroyTensor>(opapi("aclDestroyTensor"));
  at::Tensor activated = at_npu::native::OpPreparation::apply_tensor(gate);
  at::Tensor result = at_npu::native::OpPreparation::apply_tensor(gate);
  aclTensor* g = describe(gate);
  aclTensor* u = describe(up);
  aclTensor* a = describe(activated);
  aclTensor* r = describe(result);

  uint64_t workspace_size = 0;
  aclOpExecutor* executor = nullptr;
  static const auto silu = reinterpret_cast<UnaryWorkspace>(opapi("aclnnSiluGetWorkspaceSize"));
  TORCH_CHECK(silu(g, a, &workspace_size, &executor) == 0, "aclnnSiluGetWorkspaceSize failed");
  launch("aclnnSilu", workspace_size, executor);
  static const auto mul = reinterpret_cast<BinaryWorkspace>(opapi("aclnnMulGetWorkspaceSize"));
  TORCH_CHECK(mul(a, u, r, &workspace_size, &executor) == 0, "aclnnMulGetWorkspaceSize failed");
  launch("aclnnMul", workspace_size, executor);

  for (aclTensor* t : {g, u, a, r}) destroy(t);
  return result;
}

using RmsNormWorkspace = int (*)(const aclTensor*, const aclTensor*, double, const aclTensor*, const aclTensor*,
                                 uint64_t*, aclOpExecutor**);

std::tuple<at::Tensor, at::Tensor> rms_norm_npu(const at::Tensor& x, const at::Tensor& gamma, double epsilon) {
  const c10_npu::NPUGuard guard(x.device());
  static const auto destroy = reinterpret_cast<DestroyTensor>(opapi("aclDestroyTensor"));
  static const auto prepare = reinterpret_cast<RmsNormWorkspace>(opapi("aclnnRmsNormGetWorkspaceSize"));
  static const auto run = reinterpret_cast<Launch>(opapi("aclnnRmsNorm"));
  at::Tensor y = at_npu::native::OpPreparation::apply_tensor(x);
  std::vector<int64_t> rstd_shape(x.sizes().begin(), x.sizes().end() - gamma.dim());
  rstd_shape.resize(x.dim(), 1);
  at::Tensor rstd = at_npu::native::OpPreparation::apply_tensor(x, rstd_shape);
  aclTensor* args[] = {describe(x), describe(gamma), describe(y), describe(rstd)};
  uint64_t workspace_size = 0;
  aclOpExecutor* executor = nullptr;
  TORCH_CHECK(prepare(args[0], args[1], epsilon, args[2], args[3], &workspace_size, &executor) == 0,
              "aclnnRmsNormGetWorkspaceSize failed");
  TORCH_CHECK(workspace_size == 0, "aclnnRmsNorm: this example gives no workspace");
  const aclrtStream stream = c10_npu::getCurrentNPUStream().stream(false);
  at_npu::native::OpCommand cmd;
  cmd.Name("aclnnRmsNorm");
  cmd.SetCustomHandler([=] {
    const int status = run(nullptr, 0, executor, stream);
    for (aclTensor* t : args) destroy(t);
    return status;
  });
  cmd.Run();
  return {y, rstd};
}

}  // namespace

TORCH_LIBRARY(example_ops, m) {
  m.def("axpy(Tensor x, Tensor y, float alpha) -> Tensor");
  m.def("swiglu(Tensor gate, Tensor up) -> Tensor");
  m.def("rms_norm(Tensor x, Tensor gamma, float epsilon) -> (Tensor, Tensor)");
}

TORCH_LIBRARY_IMPL(example_ops, PrivateUse1, m) {
  m.impl("axpy", &axpy_npu);
  m.impl("swiglu", &swiglu_npu);
  m.impl("rms_norm", &rms_norm_npu);
}
