// torch_npu's NpuUtils: its constants (N, the inline size of the small vectors its interfaces take), CompileType, and
// the layout helpers. Every softnpu tensor format stores ND data, so a tensor that is contiguous matches its format.
#pragma once

#include <ATen/core/Tensor.h>

#include <string>

// torch_npu's header has this at global scope, and extensions (MindSpeed's aclnn_common.h) write `string` unqualified.
using std::string;

namespace at_npu::native {

// The inline capacity of the c10::SmallVector<int64_t, N> that OpCommand::Sync and extensions use.
const int N = 32;
// The most dimensions an Ascend tensor description holds.
const int SHAPE_SIZE = 8;
const int NPU_HALF_MAX = 65504;
const int NPU_HALF_MIN = -65504;

// How CANN's compiler treats a host input (nothing is compiled here: accepted for OpCommand::Input).
enum CompileType { MEMORY_HOST_COMPILE_DEPENDENT = 1, MEMORY_HOST_COMPILE_INDEPENDENT = 2 };

class NpuUtils {
 public:
  static bool check_match(const at::Tensor* tensor) { return tensor->is_contiguous(); }
  static at::Tensor format_contiguous(const at::Tensor& src) { return src.contiguous(); }
  static void format_fresh_view(at::Tensor& x, const at::Tensor& y) { x.copy_(y); }
};

}  // namespace at_npu::native
