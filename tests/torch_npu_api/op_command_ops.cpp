// A test extension: OpCommand driven from Python, so tests/test_torch_npu_cpp_api.py can check each CANN operator type
// of csrc/torch_npu_api/src/op_command_table.cpp against the CPU.
#include <torch/library.h>

#include "torch_npu/csrc/framework/OpCommand.h"

namespace {

// type(tensors..., [host_list]) -> out, with the named bool attributes true and one float attribute.
void op_command(c10::string_view type, at::TensorList tensors, at::OptionalIntArrayRef host_list, at::Tensor out,
                c10::ArrayRef<c10::string_view> true_attrs, c10::string_view float_attr, double float_value) {
  at_npu::native::OpCommand cmd;
  cmd.Name(std::string(type));
  for (const auto& t : tensors) cmd.Input(t);
  if (host_list) cmd.Input(*host_list);
  cmd.Output(out);
  for (const auto& name : true_attrs) cmd.Attr(std::string(name), true);
  if (!float_attr.empty()) cmd.Attr(std::string(float_attr), static_cast<float>(float_value));
  cmd.Run();
}

}  // namespace

TORCH_LIBRARY(torch_npu_api_test, m) {
  m.def("op_command(str type, Tensor[] tensors, int[]? host_list, Tensor(a!) out, str[] true_attrs, str float_attr, "
        "float float_value) -> ()");
  m.impl("op_command", &op_command);
}
