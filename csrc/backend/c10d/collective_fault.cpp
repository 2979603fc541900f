#include "backend/c10d/collective_fault.h"

#include <c10/util/Exception.h>

#include <algorithm>
#include <array>
#include <mutex>
#include <string_view>
#include <vector>

#include "backend/error_code.h"

namespace softnpu::c10d_fault {

namespace {

// The ops of process_group_hccl.cpp, by the names after "hccl:" in their titles (torch.distributed's names).
constexpr std::array<std::string_view, 19> kOps = {
    "all_reduce", "all_reduce_coalesced", "broadcast", "reduce", "all_gather", "all_gather_into_tensor",
    "all_gather_coalesced", "all_gather_into_tensor_coalesced", "gather", "scatter", "reduce_scatter",
    "reduce_scatter_tensor", "reduce_scatter_tensor_coalesced", "all_to_all_single", "all_to_all", "send", "recv",
    "recv_anysource", "barrier"};

struct Armed {
  Kind kind;
  uint64_t remaining;  // matching collectives until it fires (1: the next)
  std::string op;
};

std::mutex g_mutex;
std::vector<Armed> g_armed;

std::string_view op_of(const char* title) {
  std::string_view t(title);
  const auto colon = t.find(':');
  return colon == std::string_view::npos ? t : t.substr(colon + 1);
}

std::exception_ptr runtime_error(const std::string& message) {
  try {
    TORCH_CHECK(false, message);
  } catch (...) {
    return std::current_exception();
  }
  return {};
}

// The peer a failure is about, when it can only be one.
std::string remote_rank(const Context& ctx) {
  return ctx.size == 2 ? std::to_string(1 - ctx.rank) : "unknown";
}

// EI0002 as CANN reports it after an HCCL task timed out (error code 507048, "The execution of the internal task
// times out"; torch_npu's troubleshooting case HCCL_timeout.md), then `cluster` (HCCL's cluster exception report, if
// any), softnpu's detail and torch_npu's DIST error code.
std::exception_ptr ei0002(const Context& ctx, const std::string& cluster, const std::string& detail) {
  std::string message = "[Rank " + std::to_string(ctx.rank) + "] " + ctx.title +
                        " failed, error code is 507048\n"
                        "[Error]: The execution of the internal task times out.\n"
                        "        Rectify the fault based on the error information in the ascend log.\n"
                        "EI0002: The wait execution of the Notify register times out. Reason: The Notify register has "
                        "not received the Notify record from remote rank [" +
                        remote_rank(ctx) + "].base information: [tag[" + ctx.title + "], timeout[" +
                        std::to_string(ctx.timeout.count() / 1000) + " s]]\n" + cluster +
                        "        Possible Cause: 1. An exception occurs during the execution on some NPUs in the "
                        "cluster. As a result, collective communication operation failed.2. The execution speed on "
                        "some NPU in the cluster is too slow to complete a communication operation within the timeout "
                        "interval. (default 1800s, You can set the interval by using HCCL_EXEC_TIMEOUT.)3. The number "
                        "of training samples of each NPU is inconsistent.4. Packet loss or other connectivity "
                        "problems occur on the communication link.";
  if (!detail.empty()) message += "\n" + detail;
  return runtime_error(message + error_code(SubModule::DIST, ErrCode::HCCL, ctx.rank));
}

bool contains_any(const std::string& text, std::initializer_list<const char*> needles) {
  return std::any_of(needles.begin(), needles.end(),
                     [&](const char* n) { return text.find(n) != std::string::npos; });
}

}  // namespace

void arm(Kind kind, uint64_t at, const std::string& op) {
  if (at < 1) C10_THROW_ERROR(ValueError, "an hccl fault's `at` counts from 1 (the next collective)");
  if (!op.empty() && std::find(kOps.begin(), kOps.end(), op) == kOps.end()) {
    std::string known;
    for (auto name : kOps) known += (known.empty() ? "" : ", ") + std::string(name);
    C10_THROW_ERROR(ValueError, "unknown hccl op '" + op + "'; expected one of " + known);
  }
  std::lock_guard<std::mutex> lock(g_mutex);
  g_armed.push_back({kind, at, op});
}

void clear() {
  std::lock_guard<std::mutex> lock(g_mutex);
  g_armed.clear();
}

Kind take(const char* title) {
  std::lock_guard<std::mutex> lock(g_mutex);
  if (g_armed.empty()) return Kind::kNone;
  const std::string_view op = op_of(title);
  Kind fired = Kind::kNone;
  for (auto it = g_armed.begin(); it != g_armed.end();) {
    if (!it->op.empty() && it->op != op) {
      ++it;
    } else if (--it->remaining == 0 && fired == Kind::kNone) {
      fired = it->kind;
      it = g_armed.erase(it);
    } else {
      ++it;
    }
  }
  return fired;
}

std::exception_ptr timeout_error(const Context& ctx, const std::string& detail) {
  return ei0002(ctx, "", detail);
}

std::exception_ptr from_transport(std::exception_ptr error, const Context& ctx) {
  std::string what;
  try {
    std::rethrow_exception(error);
  } catch (const c10::Error& e) {
    what = e.what_without_backtrace();
  } catch (const std::exception& e) {
    what = e.what();
  } catch (...) {
    return error;
  }
  const std::string detail = "softnpu: the transport (Gloo) reported: " + what.substr(0, what.find('\n'));
  if (contains_any(what, {"Timed out", "timed out"})) return timeout_error(ctx, detail);
  if (contains_any(what, {"Connection reset by peer", "Connection closed by peer", "Broken pipe", "Read error",
                          "Write error", "EOF"})) {
    // HCCL's heartbeat finds the process gone and says so in the collective's error (Ascend detects it within
    // 30 s and fails the collective at HCCL_EXEC_TIMEOUT; here the closed connection tells at once).
    const std::string cluster = "there are(is) 1 abnormal device(s):\n    Cluster Exception Location[rank]:[" +
                                remote_rank(ctx) +
                                "], ExceptionType:[Heartbeat Lost Occurred], Possible Reason:1. Process has exited, "
                                "2. Network Disconnected\n";
    return ei0002(ctx, cluster, detail);
  }
  return error;
}

}  // namespace softnpu::c10d_fault
