// torch_npu's OpCommand: an Ascend operator by its CANN type name ("Add", "MatMul", "Cast", ...) with inputs, outputs
// and attributes. Run() executes it through the dispatcher on npu tensors, so it takes the op path like any ATen op:
// the current stream, the caching allocator, the profiler. The operator types softnpu provides, and how each maps onto
// ATen, are listed in csrc/torch_npu_api/src/op_command_table.cpp; another type raises c10::NotImplementedError
// naming it.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/Scalar.h>
#include <c10/util/ArrayRef.h>
#include <c10/util/Optional.h>
#include <c10/core/ScalarType.h>
#include <c10/util/SmallVector.h>

#include <functional>
#include <optional>
#include <string>
#include <type_traits>
#include <variant>
#include <vector>

#include "third_party/acl/inc/acl/acl_base.h"
#include "torch_npu/csrc/core/npu/NPUMacros.h"
#include "torch_npu/csrc/core/npu/NPUStream.h"
#include "torch_npu/csrc/framework/utils/NPUDefinition.h"
#include "torch_npu/csrc/framework/utils/NpuUtils.h"

namespace at_npu::native {

using OpAttrValue = std::variant<bool, int64_t, double, std::string, std::vector<int64_t>, std::vector<double>,
                                 at::ScalarType>;

// What torch_npu's OpPreparation checks give: the dtype (and shape) the operator's tensor inputs take.
struct UnifiedResult {
  c10::optional<at::ScalarType> common_type = c10::nullopt;
  c10::optional<c10::IntArrayRef> common_shape = c10::nullopt;
  // The output's dtype is the caller's (inputs are still cast to common_type).
  bool result_type_defined = false;
};

class TORCH_NPU_API OpCommand {
 public:
  // A host input (CANN's const inputs: an int list, values of a given shape, or a scalar) and the dtype the operator
  // reads it in.
  struct HostInput {
    std::vector<int64_t> ints;
    std::optional<c10::Scalar> scalar;
    at::ScalarType dtype = at::kLong;
    at::Tensor values;  // a CPU tensor of the values, when they have a shape
  };
  using Operand = std::variant<std::monostate, at::Tensor, HostInput>;
  using PROC_FUNC = std::function<int()>;

  OpCommand();
  ~OpCommand() {}

  OpCommand(const OpCommand& other) = delete;
  OpCommand(OpCommand&& other) = delete;
  OpCommand& operator=(const OpCommand&) = delete;
  OpCommand& operator=(OpCommand&&) = delete;

  // The CANN operator type.
  OpCommand& Name(const string& name);

  // What Run() calls instead of an operator type: an aclnn call (its two phases) on the current stream; a non-zero
  // return raises. torch_npu's EXEC_NPU_CMD path, mmcv's included, sets one.
  OpCommand& SetCustomHandler(PROC_FUNC func);

  // torch_npu registers a GE graph operator for a variable number of inputs here; softnpu's operators take the
  // inputs as given, so the function is accepted and not called.
  OpCommand& DynamicInputReg(DynamicInputRegFunc func, DyNumAndIndex num_and_index);

  // Tensor inputs given after this are cast to unified_result.common_type, when it is set.
  OpCommand& Expect(UnifiedResult unified_result);

  // An absent optional input.
  OpCommand& Input();

  // A tensor input; descName, sensitive_format and realData name CANN's tensor description, with no meaning here.
  OpCommand& Input(
      const at::Tensor& input,
      const string& descName = "",
      const c10::optional<aclFormat>& sensitive_format = c10::nullopt,
      const string& realData = "");

  OpCommand& InputWithoutContiguous(const at::Tensor& input, const string& descName = "", const string& realData = "");

  // Host values of shape realShape, read as toType; compileType, realDtype and descName are CANN's compiler hints.
  template <typename T>
  OpCommand& Input(
      const c10::ArrayRef<T>& dimListRef,
      at::IntArrayRef realShape,
      at::ScalarType toType,
      CompileType compileType = CompileType::MEMORY_HOST_COMPILE_DEPENDENT,
      const string& realDtype = "",
      const string& descName = "") {
    return AddHostValues(dimListRef.data(), realShape, c10::CppTypeToScalarType<T>::value, toType);
  }

  // An int list, read as toType.
  OpCommand& Input(
      const c10::IntArrayRef& dimListRef,
      at::ScalarType toType = at::kLong,
      CompileType compileType = CompileType::MEMORY_HOST_COMPILE_DEPENDENT,
      const string& realDtype = "",
      const string& descName = "");

  // Doubles of shape realShape, read as toType.
  OpCommand& Input(
      const c10::ArrayRef<double>& dimListRef,
      at::IntArrayRef realShape,
      at::ScalarType toType = at::kDouble,
      CompileType compileType = CompileType::MEMORY_HOST_COMPILE_DEPENDENT,
      const string& realDtype = "");

  // A host scalar, read as type.
  OpCommand& Input(
      const c10::Scalar& input,
      const at::ScalarType type,
      CompileType compileType = CompileType::MEMORY_HOST_COMPILE_INDEPENDENT);

  // Each tensor as an input.
  OpCommand& Inputs(const at::TensorList& inputs);

  // The scalar as a 0-dim tensor of type on the current npu device.
  OpCommand& InputScalarToNPUTensor(const c10::Scalar& input, const at::ScalarType type);

  // An output the caller prepared (right shape and dtype, on npu): Run() writes the operator's result into it.
  OpCommand& Output(
      at::Tensor& output,
      const string& descName = "",
      const c10::optional<aclFormat>& sensitive_format = c10::nullopt,
      const string& realType = "");

  // An attribute: bool, integers and enums, floating point, strings, at::ScalarType, c10::Scalar, int lists and
  // float lists.
  template <typename dataType>
  OpCommand& Attr(const string& name, dataType value) {
    add_attr(name, to_attr_value(value));
    return *this;
  }

  // The attribute only when cond holds.
  template <typename dataType>
  OpCommand& Attr(const string& name, dataType value, bool cond) {
    if (!cond) return *this;
    return Attr(name, value);
  }

  // Runs the operator on the current stream of the outputs' device, or the custom handler when one is set.
  void Run();
  // torch_npu waits for the operator here; so does softnpu (the current stream is synchronized after Run).
  OpCommand& Sync(c10::SmallVector<int64_t, N>& sync_index);
  OpCommand& Sync();

  // The aclnn path: func calls an aclnn operator (its two phases) on the current stream; a non-zero return raises.
  static void RunOpApi(const string& op_name, PROC_FUNC func, bool sync = false);
  static void RunOpApiV2(const string& op_name, const PROC_FUNC& func, bool sync = false);

 private:
  template <typename V>
  static OpAttrValue to_attr_value(const V& value) {
    if constexpr (std::is_same_v<V, bool>) {
      return OpAttrValue(value);
    } else if constexpr (std::is_same_v<V, at::ScalarType>) {
      return OpAttrValue(value);
    } else if constexpr (std::is_integral_v<V> || std::is_enum_v<V>) {
      return OpAttrValue(static_cast<int64_t>(value));
    } else if constexpr (std::is_floating_point_v<V>) {
      return OpAttrValue(static_cast<double>(value));
    } else if constexpr (std::is_convertible_v<V, std::string>) {
      return OpAttrValue(std::string(value));
    } else if constexpr (std::is_same_v<V, c10::Scalar>) {
      return value.isIntegral(false) ? OpAttrValue(value.toLong()) : OpAttrValue(value.toDouble());
    } else if constexpr (std::is_convertible_v<V, c10::IntArrayRef>) {
      const c10::IntArrayRef list(value);
      return OpAttrValue(std::vector<int64_t>(list.begin(), list.end()));
    } else {
      std::vector<double> list;
      for (const auto& v : value) list.push_back(static_cast<double>(v));
      return OpAttrValue(std::move(list));
    }
  }
  OpCommand& AddHostValues(const void* data, at::IntArrayRef shape, at::ScalarType from, at::ScalarType to);
  void add_tensor_input(const at::Tensor& input);
  void add_attr(const std::string& name, const OpAttrValue& value);

  std::string name_;
  std::vector<Operand> inputs_;
  std::vector<at::Tensor> outputs_;
  std::vector<std::pair<std::string, OpAttrValue>> attrs_;
  c10::optional<at::ScalarType> common_type_;
  bool sync_ = false;
  PROC_FUNC custom_handler_;
};

}  // namespace at_npu::native
