// torch_npu's c10d_npu::ProcessGroupHCCL: the hccl collective backend. softnpu's backend class
// (csrc/backend/c10d/process_group_hccl.h) implements this interface, so an extension reaches it from a process group
// (pg._get_backend(torch.device("npu"))) with a dynamic_cast, as on torch_npu.
#pragma once

#include <torch/csrc/distributed/c10d/Backend.hpp>

#include <cstdint>
#include <string>
#include <vector>

#include "torch_npu/csrc/core/npu/NPUMacros.h"

namespace c10d_npu {

class TORCH_NPU_API ProcessGroupHCCL : public c10d::Backend {
 public:
  ProcessGroupHCCL(int rank, int size) : c10d::Backend(rank, size) {}

  // Point-to-point operations as one batch: op_type[i] is "isend" or "irecv" of tensors[i] with the rank
  // remote_rank_list[i]. One Work for the batch: complete when every operation is.
  virtual c10::intrusive_ptr<c10d::Work> batch_isend_irecv(
      std::vector<std::string>& op_type,
      std::vector<at::Tensor>& tensors,
      std::vector<int64_t> remote_rank_list) = 0;
};

}  // namespace c10d_npu
