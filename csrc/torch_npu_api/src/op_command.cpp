// OpCommand: collects an operator's inputs, outputs and attributes, and at Run() computes it with the table's ATen
// ops on the outputs' device (the op path: current stream, caching allocator), copying each result into the output
// the caller prepared.
#include "torch_npu/csrc/framework/OpCommand.h"

#include <ATen/ATen.h>
#include <c10/core/DeviceGuard.h>
#include <c10/util/irange.h>

#include "op_command_table.h"
#include "torch_npu/csrc/core/npu/DeviceUtils.h"
#include "torch_npu/csrc/core/npu/NPUFunctions.h"

namespace at_npu::native {

OpCommand::OpCommand() = default;

OpCommand& OpCommand::Name(const string& name) {
  name_ = name;
  return *this;
}

OpCommand& OpCommand::Input() {
  inputs_.emplace_back(std::monostate{});
  return *this;
}

OpCommand& OpCommand::DynamicInputReg(DynamicInputRegFunc func, DyNumAndIndex num_and_index) { return *this; }

OpCommand& OpCommand::Expect(UnifiedResult unified_result) {
  common_type_ = unified_result.common_type;
  return *this;
}

void OpCommand::add_tensor_input(const at::Tensor& input) {
  if (common_type_ && input.defined() && input.scalar_type() != *common_type_) {
    inputs_.emplace_back(input.to(*common_type_));
  } else {
    inputs_.emplace_back(input);
  }
}

OpCommand& OpCommand::Input(const at::Tensor& input, const string& descName,
                            const c10::optional<aclFormat>& sensitive_format, const string& realData) {
  add_tensor_input(input);
  return *this;
}

OpCommand& OpCommand::InputWithoutContiguous(const at::Tensor& input, const string& descName,
                                             const string& realData) {
  add_tensor_input(input);
  return *this;
}

OpCommand& OpCommand::Inputs(const at::TensorList& inputs) {
  for (const auto& input : inputs) add_tensor_input(input);
  return *this;
}

OpCommand& OpCommand::InputScalarToNPUTensor(const c10::Scalar& input, const at::ScalarType type) {
  inputs_.emplace_back(at::scalar_tensor(input, at::TensorOptions().dtype(type).device(
                                                    c10::DeviceType::PrivateUse1, c10_npu::current_device())));
  return *this;
}

OpCommand& OpCommand::AddHostValues(const void* data, at::IntArrayRef shape, at::ScalarType from,
                                    at::ScalarType to) {
  // Copied at once: the caller's array need not outlive the command.
  const at::Tensor values =
      at::from_blob(const_cast<void*>(data), shape, at::TensorOptions().dtype(from)).to(to, false, true);
  HostInput host{{}, std::nullopt, to, values};
  if (at::isIntegralType(to, true)) {
    const at::Tensor longs = values.to(at::kLong).contiguous();
    host.ints.assign(longs.data_ptr<int64_t>(), longs.data_ptr<int64_t>() + longs.numel());
  }
  inputs_.emplace_back(std::move(host));
  return *this;
}

OpCommand& OpCommand::Input(const c10::ArrayRef<double>& dimListRef, at::IntArrayRef realShape,
                            at::ScalarType toType, CompileType compileType, const string& realDtype) {
  return AddHostValues(dimListRef.data(), realShape, at::kDouble, toType);
}

OpCommand& OpCommand::Input(const c10::IntArrayRef& dimListRef, at::ScalarType toType, CompileType compileType,
                            const string& realDtype, const string& descName) {
  inputs_.emplace_back(HostInput{std::vector<int64_t>(dimListRef.begin(), dimListRef.end()), std::nullopt, toType});
  return *this;
}

OpCommand& OpCommand::Input(const c10::Scalar& input, const at::ScalarType type, CompileType compileType) {
  inputs_.emplace_back(HostInput{{}, input, type});
  return *this;
}

OpCommand& OpCommand::Output(at::Tensor& output, const string& descName,
                             const c10::optional<aclFormat>& sensitive_format, const string& realType) {
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
    } else if (h != nullptr && h->values.defined() && h->ints.empty()) {
      // Non-integral values read as a tensor on the outputs' device (integers stay a list for ints()).
      inputs.emplace_back(h->values.to(outputs_.front().device()));
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

void OpCommand::RunOpApi(const string& op_name, PROC_FUNC func, bool sync) {
  const int status = func();
  TORCH_CHECK(status == 0, op_name, " failed with error code ", status);
  if (sync) c10_npu::getCurrentNPUStream().synchronize();
}

void OpCommand::RunOpApiV2(const string& op_name, const PROC_FUNC& func, bool sync) {
  RunOpApi(op_name, func, sync);
}

}  // namespace at_npu::native
