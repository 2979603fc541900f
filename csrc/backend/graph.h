// NPU graphs (torch.npu.NPUGraph, as torch.cuda.CUDAGraph): a capture of the current stream through the runtime's
// stream capture (streams that wait on its events join it), its allocations from a private pool of the caching
// allocator (fixed addresses across replays), the generator states its random kernels used (generator.h: each replay
// writes their seed and offset in stream order and advances them by the graph's offsets).
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/Allocator.h>
#include <c10/core/CachingDeviceAllocator.h>

#include <atomic>
#include <map>
#include <optional>
#include <vector>

#include "backend/generator.h"
#include "backend/stream.h"
#include "softnpu/runtime.h"

namespace softnpu {

class NPUGraph {
 public:
  NPUGraph() = default;
  ~NPUGraph();
  NPUGraph(const NPUGraph&) = delete;
  NPUGraph& operator=(const NPUGraph&) = delete;

  // Captures the current stream of the current device (not its default stream). pool {0, 0}: a private pool of its
  // own; else a pool shared with other graphs (graph_pool_handle(), other_graph.pool()).
  void capture_begin(c10::MempoolId_t pool = {0, 0}, snpuStreamCaptureMode mode = snpuStreamCaptureModeGlobal);
  void capture_end();
  // A conditional node (torch.cond in a capture): the work captured until end_capture_to_conditional_node runs at a
  // replay only if `pred` (an npu bool tensor of one element, which the graph keeps) is true when the replay
  // reaches it.
  void begin_capture_to_if_node(const at::Tensor& pred);
  void end_capture_to_conditional_node();
  // ASYNC: one launch on the current stream.
  void replay();
  // Drops the graph and its reference to the pool.
  void reset();
  // Makes the graph replay `state`'s offsets (torch_npu's register_generator_state; a state a captured kernel draws
  // from registers itself).
  void register_generator_state(const c10::intrusive_ptr<NPUGeneratorState>& state);
  c10::MempoolId_t pool() const;
  size_t node_count() const;
  // The recorded nodes' names in launch order (NPUGraph.debug_dump's).
  std::vector<std::string> node_names() const;
  uint64_t replay_count() const { return replays_; }

 private:
  snpuGraph_t graph_ = nullptr;
  c10::DeviceIndex device_ = -1;
  snpuStream_t capture_stream_ = nullptr;
  c10::MempoolId_t pool_{0, 0};
  bool has_pool_ = false;
  bool has_host_pool_ = false;  // the pinned host allocator's side of the pool
  bool capturing_ = false;
  uint64_t capture_id_ = 0;  // the runtime's, while capturing and after
  // Each generator state the capture drew from, and the offsets one replay consumes (known at capture end).
  std::map<c10::intrusive_ptr<NPUGeneratorState>, uint64_t> generator_states_;
  uint64_t replays_ = 0;
  std::vector<at::Tensor> conditions_;  // the predicates of the conditional nodes
};

namespace detail {
extern std::atomic<int> captures_underway;
}  // namespace detail

// Whether any NPU graph is capturing in this process (one load: the op path asks on every launch).
inline bool capture_underway() { return detail::captures_underway.load(std::memory_order_acquire) != 0; }

// Whether the current stream of the current device is capturing (torch.npu.is_current_stream_capturing).
bool current_stream_capturing();

// The id of the capture the current stream records into (also a stream that joined it), or none.
std::optional<uint64_t> current_capture_id();

// Raises (torch_npu's message) if the current stream captures: for calls a capture cannot record.
void assert_not_capturing(const char* attempt);

// Registers a generator state with the NPUGraph whose capture has this id (the first draw of a capture from it).
void register_capture_rng(uint64_t capture_id, const c10::intrusive_ptr<NPUGeneratorState>& state);

// For every path that synchronizes on the host's behalf (.item(), host fallbacks, blocking copies): if the current
// stream captures, raises RuntimeError naming `what`; the capture stays valid (as on Ascend, where the runtime
// rejects the synchronization without invalidating it). One atomic load otherwise.
void check_not_capturing(const char* what);

// The graph pool handle of torch.npu.graph_pool_handle(): an id no pool has yet.
c10::MempoolId_t graph_pool_handle();

}  // namespace softnpu
