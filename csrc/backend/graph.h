// NPU graphs (torch.npu.NPUGraph, as torch.cuda.CUDAGraph): a capture of the current stream through the runtime's
// stream capture, its allocations from a private pool of the caching allocator (fixed addresses across replays), its
// random kernels reading a per-graph seed slot that each replay rewrites in stream order.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/Allocator.h>
#include <c10/core/CachingDeviceAllocator.h>

#include <atomic>

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
  // ASYNC: one launch on the current stream.
  void replay();
  // Drops the graph and its reference to the pool.
  void reset();
  c10::MempoolId_t pool() const;
  size_t node_count() const;
  uint64_t replay_count() const { return replays_; }

 private:
  snpuGraph_t graph_ = nullptr;
  c10::DeviceIndex device_ = -1;
  snpuStream_t capture_stream_ = nullptr;
  c10::MempoolId_t pool_{0, 0};
  bool has_pool_ = false;
  bool capturing_ = false;
  c10::DataPtr seed_slot_;  // device memory: the replay's base seed, read by the captured random kernels
  uint64_t seed_draws_ = 0;
  uint64_t replays_ = 0;
};

namespace detail {
extern std::atomic<int> captures_underway;
}  // namespace detail

// Whether any NPU graph is capturing in this process (one load: the op path asks on every launch).
inline bool capture_underway() { return detail::captures_underway.load(std::memory_order_acquire) != 0; }

// Whether the current stream of the current device is capturing (torch.npu.is_current_stream_capturing).
bool current_stream_capturing();

// For every path that synchronizes on the host's behalf (.item(), host fallbacks, blocking copies): if the current
// stream captures, invalidates the capture and raises RuntimeError naming `what`. One atomic load otherwise.
void check_not_capturing(const char* what);

// The graph pool handle of torch.npu.graph_pool_handle(): an id no pool has yet.
c10::MempoolId_t graph_pool_handle();

}  // namespace softnpu
