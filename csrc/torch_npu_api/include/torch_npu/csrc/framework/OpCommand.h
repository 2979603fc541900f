// torch_npu's OpCommand: an Ascend operator by its CANN type name ("Add", "MatMul", "Cast", ...) with inputs, outputs
// and attributes. Run() executes it through the dispatcher on npu tensors, so it takes the op path like any ATen op:
// the current stream, the caching allocator, the profiler. The operator types softnpu provides, and how each maps onto
// ATen, are listed in csrc/torch_npu_api/src/op_command_table.cpp; another type raises c10::NotImplementedError
// naming it.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/Scalar.h>
#include <c10/util/ArrayRef.h>
#include <c10/util/SmallVector.h>

#include <functional>
#include <optional>
#include <string>
#include <type_traits>
#include <variant>
#include <vector>

#include "third_party/acl/inc/acl/acl_base.h"
#include "torch_npu/csrc/core/npu/NPUStream.h"
#include "torch_npu/csrc/framework/utils/NpuUtils.h"

namespace at_npu::native {

using OpAttrValue = std::variant<bool, int64_t, double, std::string, std::vector<int64_t>, std::vector<double>,
                                 at::ScalarType>;

class OpCommand {
 public:
  // A host input (an int list or a scalar) as CANN's const inputs: values and the dtype the operator reads them in.
  struct HostInput {
    std::vector<int64_t> ints;
    std::optional<c10::Scalar> scalar;
    at::ScalarType dtype = at::kLong;
  };
  using Operand = std::variant<std::monostate, at::Tensor, HostInput>;
  using PROC_FUNC = std::function<int()>;

  OpCommand() = default;

  OpCommand& Name(const std::string& name);
  // An absent optional input.
  OpCommand& Input();
  OpCommand& Input(const at::Tensor& input, const std::string& descName = "",
                   const std::optional<aclFormat>& sensitive_format = std::nullopt, const std::string& realData = "");
  OpCommand& InputWithoutContiguous(const at::Tensor& input, const std::string& descName = "",
                                    const std::string& realData = "");
  OpCommand& Input(const c10::IntArrayRef& dimListRef, at::ScalarType toType = at::kLong,
                   CompileType compileType = MEMORY_HOST_COMPILE_DEPENDENT, const std::string& realDtype = "",
                   const std::string& descName = "");
  OpCommand& Input(const c10::Scalar& input, const at::ScalarType type,
                   CompileType compileType = MEMORY_HOST_COMPILE_INDEPENDENT);
  OpCommand& Output(at::Tensor& output, const std::string& descName = "",
                    const std::optional<aclFormat>& sensitive_format = std::nullopt, const std::string& realType = "");

  template <typename T>
  OpCommand& Attr(const std::string& name, const T& value) {
    using V = std::decay_t<T>;
    if constexpr (std::is_same_v<V, bool>) {
      add_attr(name, OpAttrValue(value));
    } else if constexpr (std::is_same_v<V, at::ScalarType>) {
      add_attr(name, OpAttrValue(value));
    } else if constexpr (std::is_integral_v<V> || std::is_enum_v<V>) {
      add_attr(name, OpAttrValue(static_cast<int64_t>(value)));
    } else if constexpr (std::is_floating_point_v<V>) {
      add_attr(name, OpAttrValue(static_cast<double>(value)));
    } else if constexpr (std::is_convertible_v<V, std::string>) {
      add_attr(name, OpAttrValue(std::string(value)));
    } else if constexpr (std::is_same_v<V, c10::Scalar>) {
      add_attr(name, value.isIntegral(false) ? OpAttrValue(value.toLong()) : OpAttrValue(value.toDouble()));
    } else if constexpr (std::is_convertible_v<V, c10::IntArrayRef>) {
      const c10::IntArrayRef list(value);
      add_attr(name, OpAttrValue(std::vector<int64_t>(list.begin(), list.end())));
    } else {
      std::vector<double> list;
      for (const auto& v : value) list.push_back(static_cast<double>(v));
      add_attr(name, OpAttrValue(std::move(list)));
    }
    return *this;
  }

  // Runs the operator on the current stream of the outputs' device, or the custom handler when one is set.
  void Run();
  // What Run() calls instead of an operator type: an aclnn call (its two phases) on the current stream; a non-zero
  // return raises. torch_npu's EXEC_NPU_CMD path (mmcv's included) sets one.
  OpCommand& SetCustomHandler(PROC_FUNC func);
  // torch_npu waits for the operator here; so does softnpu (the current stream is synchronized after Run).
  OpCommand& Sync();
  OpCommand& Sync(c10::SmallVector<int64_t, N>& sync_index);

  // The aclnn path: func calls an aclnn operator (its two phases) on the current stream; a non-zero return raises.
  static void RunOpApi(const std::string& op_name, PROC_FUNC func, bool sync = false);
  static void RunOpApiV2(const std::string& op_name, const PROC_FUNC& func, bool sync = false);

 private:
  void add_attr(const std::string& name, const OpAttrValue& value);

  std::string name_;
  std::vector<Operand> inputs_;
  std::vector<at::Tensor> outputs_;
  std::vector<std::pair<std::string, OpAttrValue>> attrs_;
  bool sync_ = false;
  PROC_FUNC custom_handler_;
};

}  // namespace at_npu::native
