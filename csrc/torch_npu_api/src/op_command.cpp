// OpCommand: collects an operator's inputs, outputs and attributes, and at Run() computes it with the table's ATen
// ops on the outputs' device (the op path: current stream, caching allocator), copying each result into the output
// the caller prepared.
#include "torch_npu/csrc/framework/OpCommand.h"

#include <ATen/ATen.h>
#include <c10/core/DeviceGuard.h>
#include <c10/util/irange.h>

#include "op_command_table.h"
#include "torch_npu/csrc/core/npu/DeviceUtils.h"

namespace at_npu::native {

OpCommand& OpCommand::Name(const std::string& name) {
  name_ = name;
  return *this;
}

OpCommand& OpCommand::Input() {
  inputs_.emplace_back(std::monostate{});
  return *this;
}

OpCommand& OpCommand::Input(const at::Tensor& input, const std::string& descName,
                            const std::optional<aclFormat>& sensitive_format, const std::string& realData) {
  inputs_.emplace_back(input);
  return *this;
}

OpCommand& OpCommand::InputWithoutContiguous(const at::Tensor& input, const std::string& descName,
                                             const std::string& realData) {
  inputs_.emplace_back(input);
  return *this;
}

OpCommand& OpCommand::Input(const c10::IntArrayRef& dimListRef, at::ScalarType toType, CompileType compileType,
                            const std::string& realDtype, const std::string& descName) {
  inputs_.emplace_back(HostInput{std::vector<int64_t>(dimListRef.begin(), dimListRef.end()), std::nullopt, toType});
  return *this;
}

OpCommand& OpCommand::Input(const c10::Scalar& input, const at::ScalarType type, CompileType compileType) {
  inputs_.emplace_back(HostInput{{}, input, type});
  return *this;
}

OpCommand& OpCommand::Output(at::Tensor& output, const std::string& descName,
                             const std::optional<aclFormat>& sensitive_format, const std::string& realType) {
  torch_npu::utils::torch_check_npu(output);
  outputs_.push_back(output);
  return *this;
}

void OpCommand::add_attr(const std::string& name, const OpAttrValue& value) { attrs_.emplace_back(name, value); }

OpCommand& OpCommand::SetCustomHandler(PROC_FUNC func) {
  custom_handler_ = std::move(func);
  return *this;
}

void OpCommand::Run() {
  if (custom_handler_) {
    RunOpApi(name_, custom_handler_, sync_);
    return;
  }
  TORCH_CHECK(!name_.empty(), "OpCommand: Name() was not given");
  const auto fn = torch_npu_api::find_op_command(name_);
  if (fn == nullptr) {
    std::string known;
    for (const auto& n : torch_npu_api::op_command_types()) known += (known.empty() ? "" : ", ") + n;
    TORCH_CHECK_NOT_IMPLEMENTED(false, "OpCommand: the CANN operator type '", name_,
                                "' is not one softnpu provides (", known, ")");
  }
  TORCH_CHECK(!outputs_.empty(), "OpCommand ", name_, ": no Output() was given");
  const c10::DeviceGuard guard(outputs_.front().device());
  // A host scalar input reads as a 0-dim tensor where the table asks for a tensor (CANN's const inputs).
  std::vector<Operand> inputs;
  inputs.reserve(inputs_.size());
  for (const auto& in : inputs_) {
    const auto* h = std::get_if<HostInput>(&in);
    if (h != nullptr && h->scalar) {
      inputs.emplace_back(at::scalar_tensor(*h->scalar, at::TensorOptions().dtype(h->dtype)));
    } else {
      inputs.emplace_back(in);
    }
  }
  const std::vector<at::Tensor> results = fn(torch_npu_api::OpCommandArgs(name_, inputs, attrs_));
  TORCH_CHECK(results.size() >= outputs_.size(), "OpCommand ", name_, ": ", outputs_.size(),
              " outputs were given, the operator has ", results.size());
  for (const auto i : c10::irange(outputs_.size())) {
    TORCH_CHECK(outputs_[i].sizes() == results[i].sizes(), "OpCommand ", name_, ": output ", i, " has shape ",
                outputs_[i].sizes(), ", the operator's result has shape ", results[i].sizes());
    outputs_[i].copy_(results[i]);
  }
  if (sync_) c10_npu::getCurrentNPUStream().synchronize();
}

OpCommand& OpCommand::Sync() {
  sync_ = true;
  return *this;
}

OpCommand& OpCommand::Sync(c10::SmallVector<int64_t, N>& sync_index) { return Sync(); }

void OpCommand::RunOpApi(const std::string& op_name, PROC_FUNC func, bool sync) {
  const int status = func();
  TORCH_CHECK(status == 0, op_name, " failed with error code ", status);
  if (sync) c10_npu::getCurrentNPUStream().synchronize();
}

void OpCommand::RunOpApiV2(const std::string& op_name, const PROC_FUNC& func, bool sync) {
  RunOpApi(op_name, func, sync);
}

}  // namespace at_npu::native
