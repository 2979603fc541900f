// What the compute+communication ops share: the process group an `hcom` names. torch_npu's hcom is the name its
// ProcessGroupHCCL gives for the group (get_hccl_comm_name(rank)); softnpu's is the group's name in c10d's
// registry, through which these ops find the group and run its collective (the hccl backend for npu tensors).
#pragma once

#include <torch/csrc/distributed/c10d/GroupRegistry.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>

#include <string>

namespace softnpu::fused {

inline c10::intrusive_ptr<c10d::ProcessGroup> group_of(c10::string_view hcom, const char* op) {
  try {
    return c10d::resolve_process_group(std::string(hcom));
  } catch (const std::exception&) {
    TORCH_CHECK(false, op, ": hcom '", hcom, "' names no process group; pass the name "
                "group._get_backend(torch.device('npu')).get_hccl_comm_name(rank) returns");
  }
}

// torch_npu's reduce_op: "sum" only.
inline void check_reduce_op(c10::string_view reduce_op, const char* op) {
  TORCH_CHECK(reduce_op == "sum", op, ": reduce_op only supports 'sum', got '", reduce_op, "'");
}

// comm_mode selects the chip's communication engine ("aiv", "ai_cpu"): nothing to choose here.
inline void check_comm_mode(const std::optional<c10::string_view>& comm_mode, const char* op) {
  TORCH_CHECK(!comm_mode || *comm_mode == "aiv" || *comm_mode == "ai_cpu", op,
              ": comm_mode must be None, 'aiv' or 'ai_cpu', got '", *comm_mode, "'");
}

inline void check_half(const at::Tensor& x, const char* name, const char* op) {
  TORCH_CHECK(x.scalar_type() == at::kHalf || x.scalar_type() == at::kBFloat16, op, ": ", name,
              " must be float16 or bfloat16, got ", x.scalar_type());
}

}  // namespace softnpu::fused
