// Faults on demand for the hccl backend (torch.npu._fault's `hccl_timeout` and `dead_peer`), and HCCL's failures as
// torch_npu reports them.
//
// A fault is armed for the n-th collective of this process from now on (every hccl group counted), or the n-th of one
// op (`all_reduce`, `broadcast`, ...: torch.distributed's names). When it fires:
//  - hccl_timeout: this rank's collective never starts, so its peers wait for it and fail when HCCL_EXEC_TIMEOUT
//    runs out, as they do on Ascend when a rank is stuck ("EI0002", 507048); its own Work fails the same way;
//  - dead_peer: this process dies (SIGKILL) in the collective, as a rank does when it crashes or is killed; its peers'
//    transport sees the connection close and they fail at once with HCCL's heartbeat-lost report.
#pragma once

#include <chrono>
#include <exception>
#include <string>

namespace softnpu::c10d_fault {

enum class Kind { kNone = 0, kTimeout = 1, kDeadPeer = 2 };

// Arms a fault; `op` empty matches every collective. Throws ValueError for an unknown op or at < 1.
void arm(Kind kind, uint64_t at, const std::string& op);
// Disarms every fault not yet fired.
void clear();
// Called at each collective (`title` as "hccl:all_reduce"): the fault that fires now, if any.
Kind take(const char* title);

// What a failed collective was, for its message.
struct Context {
  const char* title;  // "hccl:all_reduce"
  int rank;
  int size;
  std::chrono::milliseconds timeout;
};

// HCCL's execution timeout (EI0002, 507048): the collective did not complete within the group's timeout.
std::exception_ptr timeout_error(const Context& ctx, const std::string& detail = "");
// The error the transport (Gloo) reported, as HCCL reports it: a timeout as timeout_error, a lost peer as EI0002 with
// HCCL's "Heartbeat Lost Occurred" cluster exception; anything else unchanged.
std::exception_ptr from_transport(std::exception_ptr error, const Context& ctx);

}  // namespace softnpu::c10d_fault
