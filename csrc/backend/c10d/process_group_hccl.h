// The `hccl` collective backend: torch.distributed for npu tensors, carried by a Gloo backend (torch's own
// ProcessGroupGloo, created by the caller) rather than a communication library of its own.
//
// Gloo reads and writes host memory on its own threads, so each call stages its npu tensors in pinned host buffers:
//  - inputs are copied out on the tensors' current stream, and the host waits for that stream before handing the
//    buffers to Gloo (Gloo starts reading as soon as one of its threads picks the op up);
//  - when Gloo completes, outputs are copied back on the device's communication stream (a high-priority pool
//    stream, as HCCL's own stream), ordered after the work the current stream had at the call, without making the
//    host wait;
//  - Work::wait() and the Work's future order the waiter's current stream after those copies, as HCCL's and NCCL's
//    do; the host waits only for Gloo.
// Gloo's send/recv and reduce-scatter Works have no future and complete only in their wait(): a thread waits on each,
// so that they too complete by themselves and have a future (as HCCL's and NCCL's Works do).
// Work::wait() waits in slices and polls for Ctrl-C (a KeyboardInterrupt leaves the collective running).
// Gloo's errors are reported as HCCL's (collective_fault.h): a timeout or a lost peer is EI0002 with code 507048.
// abort() fails the group's pending collectives at once and closes it; shutdown() lets them finish first (torch_npu
// flushes its HCCL streams). Either way the group refuses new collectives, and a new group may be created.
#pragma once

#include <torch/csrc/distributed/c10d/Backend.hpp>

#include <atomic>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "torch_npu/csrc/distributed/ProcessGroupHCCL.hpp"

namespace softnpu {

class Staging;
class WorkHCCL;

// torch_npu's c10d_npu::ProcessGroupHCCL, so extensions reach it through torch_npu's header.
class ProcessGroupHCCL final : public c10d_npu::ProcessGroupHCCL {
 public:
  // `gloo` is a ProcessGroupGloo of the same group (same rank and size), created with `timeout`.
  ProcessGroupHCCL(c10::intrusive_ptr<c10d::Backend> gloo, std::chrono::milliseconds timeout);
  ~ProcessGroupHCCL() override;  // where WorkHCCL is complete

  const std::string getBackendName() const override { return "hccl"; }
  void setTimeout(std::chrono::milliseconds timeout) override;

  // Pending collectives fail at once ("ProcessGroupHCCL ... was aborted"); `reason` is added to their message
  // (torch_npu's abort_hccl_comm(reason)). Gloo's ops in flight end by themselves (their peer answers or their timeout
  // runs out), off this thread.
  void abort() override { abort(""); }
  void abort(const std::string& reason);
  // Waits for the pending collectives (each completes or fails within the group's timeout), then closes the group.
  void shutdown() override;

  c10::intrusive_ptr<c10d::Work> broadcast(std::vector<at::Tensor>& tensors,
                                           const c10d::BroadcastOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allreduce(std::vector<at::Tensor>& tensors,
                                           const c10d::AllreduceOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allreduce_coalesced(std::vector<at::Tensor>& tensors,
                                                     const c10d::AllreduceCoalescedOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce(std::vector<at::Tensor>& tensors, const c10d::ReduceOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allgather(std::vector<std::vector<at::Tensor>>& outputs,
                                           std::vector<at::Tensor>& inputs,
                                           const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> _allgather_base(at::Tensor& output, at::Tensor& input,
                                                 const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allgather_coalesced(std::vector<std::vector<at::Tensor>>& output_lists,
                                                     std::vector<at::Tensor>& inputs,
                                                     const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allgather_into_tensor_coalesced(std::vector<at::Tensor>& outputs,
                                                                 std::vector<at::Tensor>& inputs,
                                                                 const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> gather(std::vector<std::vector<at::Tensor>>& outputs,
                                        std::vector<at::Tensor>& inputs, const c10d::GatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> scatter(std::vector<at::Tensor>& outputs,
                                         std::vector<std::vector<at::Tensor>>& inputs,
                                         const c10d::ScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce_scatter(std::vector<at::Tensor>& outputs,
                                                std::vector<std::vector<at::Tensor>>& inputs,
                                                const c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> _reduce_scatter_base(at::Tensor& output, at::Tensor& input,
                                                      const c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce_scatter_tensor_coalesced(std::vector<at::Tensor>& outputs,
                                                                 std::vector<at::Tensor>& inputs,
                                                                 const c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> alltoall_base(at::Tensor& output, at::Tensor& input,
                                               std::vector<int64_t>& output_split_sizes,
                                               std::vector<int64_t>& input_split_sizes,
                                               const c10d::AllToAllOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> alltoall(std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
                                          const c10d::AllToAllOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> send(std::vector<at::Tensor>& tensors, int dst_rank, int tag) override;
  c10::intrusive_ptr<c10d::Work> recv(std::vector<at::Tensor>& tensors, int src_rank, int tag) override;
  c10::intrusive_ptr<c10d::Work> recvAnysource(std::vector<at::Tensor>& tensors, int tag) override;
  c10::intrusive_ptr<c10d::Work> barrier(const c10d::BarrierOptions& opts) override;
  // torch_npu's batched isend/irecv: each operation as send / recv above, one Work for all.
  c10::intrusive_ptr<c10d::Work> batch_isend_irecv(std::vector<std::string>& op_type, std::vector<at::Tensor>& tensors,
                                                   std::vector<int64_t> remote_rank_list) override;
  // Gloo's: a barrier over the store-connected Gloo context that names the ranks that did not arrive in time. No
  // npu work is involved, so nothing is staged.
  void monitoredBarrier(const c10d::BarrierOptions& opts, bool wait_all_ranks) override {
    gloo("hccl:monitored_barrier")->monitoredBarrier(opts, wait_all_ranks);
  }

 private:
  // Waits for the staged inputs, runs the Gloo op (called with the Gloo backend) on the host buffers and wraps its
  // Work; an armed hccl fault fires here.
  template <typename GlooOp>
  c10::intrusive_ptr<c10d::Work> run(Staging& staging, GlooOp&& gloo_op);
  c10::Stream comm_stream(c10::Device device);
  // The Gloo backend, or RuntimeError once the group is aborted or shut down.
  c10::intrusive_ptr<c10d::Backend> gloo(const char* title);
  // The group's collectives not yet completed (dropping those that have).
  std::vector<c10::intrusive_ptr<WorkHCCL>> pending();
  [[noreturn]] void die(const char* title);

  std::mutex mutex_;  // guards gloo_, closed_, pending_ and prune_at_
  c10::intrusive_ptr<c10d::Backend> gloo_;
  std::optional<std::string> closed_;  // "was aborted: ..." or "was shut down"
  std::vector<c10::weak_intrusive_ptr<WorkHCCL>> pending_;
  size_t prune_at_ = 64;
  std::atomic<int64_t> timeout_ms_;
  std::mutex streams_mutex_;
  std::unordered_map<c10::DeviceIndex, c10::Stream> comm_streams_;
};

}  // namespace softnpu
