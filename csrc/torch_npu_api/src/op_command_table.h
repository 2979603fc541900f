// The CANN operator types OpCommand runs, each as ATen ops on npu tensors (so through the dispatcher and the op path).
#pragma once

#include <string>
#include <vector>

#include "torch_npu/csrc/framework/OpCommand.h"

namespace torch_npu_api {

// One OpCommand as the table reads it: its inputs (tensors, host lists and scalars, absent ones) and attributes.
class OpCommandArgs {
 public:
  OpCommandArgs(const std::string& type, const std::vector<at_npu::native::OpCommand::Operand>& inputs,
                const std::vector<std::pair<std::string, at_npu::native::OpAttrValue>>& attrs)
      : type_(type), inputs_(inputs), attrs_(attrs) {}

  size_t input_count() const { return inputs_.size(); }
  bool has_input(size_t i) const;
  const at::Tensor& tensor(size_t i) const;
  std::vector<int64_t> ints(size_t i) const;
  c10::Scalar scalar(size_t i) const;
  bool attr_bool(const std::string& name, bool fallback) const;
  int64_t attr_int(const std::string& name, int64_t fallback) const;
  double attr_float(const std::string& name, double fallback) const;
  std::vector<int64_t> attr_ints(const std::string& name, std::vector<int64_t> fallback) const;

 private:
  const at_npu::native::OpAttrValue* attr(const std::string& name) const;
  const std::string& type_;
  const std::vector<at_npu::native::OpCommand::Operand>& inputs_;
  const std::vector<std::pair<std::string, at_npu::native::OpAttrValue>>& attrs_;
};

// An operator's results, in output order (OpCommand copies each into the output the caller gave).
using OpCommandFn = std::vector<at::Tensor> (*)(const OpCommandArgs& args);

// nullptr for a type the table lacks.
OpCommandFn find_op_command(const std::string& type);
// The types, sorted (for the error that names a missing one).
std::vector<std::string> op_command_types();

}  // namespace torch_npu_api
