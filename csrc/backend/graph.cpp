#include "backend/graph.h"

#include <ATen/core/CachingHostAllocator.h>
#include <c10/util/Exception.h>

#include <atomic>
#include <map>
#include <mutex>

#include "backend/allocator.h"
#include "backend/device.h"
#include "backend/env.h"
#include "backend/generator.h"
#include "backend/npu_error.h"

namespace softnpu {

namespace detail {
std::atomic<int> captures_underway{0};
}  // namespace detail

namespace {

// The NPUGraph each capture in progress records into, by the runtime's capture id.
std::mutex g_capturing_mutex;
std::map<uint64_t, NPUGraph*> g_capturing;  // guarded by g_capturing_mutex

}  // namespace

NPUGraph::~NPUGraph() {
  try {
    reset();
  } catch (...) {
    // A destructor must not throw; reset only fails if the runtime is gone, and then so is the graph.
  }
}

void NPUGraph::capture_begin(c10::MempoolId_t pool, snpuStreamCaptureMode mode) {
  TORCH_CHECK(!graph_ && !capturing_,
              "This NPUGraph instance already owns a captured graph. To capture a new graph, create a new instance.");
  device_ = current_device();
  const NPUStream stream = getCurrentNPUStream(device_);
  TORCH_CHECK(stream != getDefaultNPUStream(device_),
              "NPU graphs must be captured on a non-default stream. (However, after capture, it's ok to replay them "
              "on the default stream.)");
  // torch_npu's refusal (its expandable pinned memory has no graph pools), with its message.
  TORCH_CHECK(!allocator_config().pin_memory_expandable_segments,
              "ACLGraph capture is not supported when pin_memory_expandable_segments=True. Please unset "
              "pin_memory_expandable_segments in PYTORCH_NPU_ALLOC_CONF to use ACLGraph with pin_memory, or avoid "
              "pin_memory calls inside capture regions.");
  auto* allocator = NPUCachingAllocator::get();
  if (pool == c10::MempoolId_t{0, 0}) {
    pool_ = allocator->create_pool();
  } else {
    pool_ = pool;
    allocator->retain_pool(pool_);
  }
  has_pool_ = true;
  const snpuError_t err = snpuStreamBeginCapture(stream.handle(), mode);
  if (err != snpuSuccess) {
    allocator->release_pool(pool_);
    has_pool_ = false;
    throw_npu_error(err, "snpuStreamBeginCapture");
  }
  NPU_CHECK(snpuStreamGetCaptureInfo(stream.handle(), nullptr, &capture_id_));
  {
    std::lock_guard<std::mutex> lock(g_capturing_mutex);
    g_capturing[capture_id_] = this;
  }
  allocator->begin_allocate_to_pool(device_, pool_, stream.handle());
  // Pinned host memory allocated during the capture (by any stream recording into it) comes from the pool's host
  // side, as CUDA's: a block a captured copy reads is never handed to later allocations.
  const uint64_t id = capture_id_;
  at::getHostAllocator(at::kPrivateUse1)->begin_allocate_to_pool(pool_, [id](c10::Stream s) {
    uint64_t stream_capture = 0;
    return snpuStreamGetCaptureInfo(NPUStream(s).handle(), nullptr, &stream_capture) == snpuSuccess &&
           stream_capture == id;
  });
  has_host_pool_ = true;
  capture_stream_ = stream.handle();
  capturing_ = true;
  detail::captures_underway.fetch_add(1, std::memory_order_release);
}

void NPUGraph::capture_end() {
  TORCH_CHECK(capturing_, "NPUGraph::capture_end: no capture in progress (call capture_begin first)");
  TORCH_CHECK(getCurrentNPUStream(device_).handle() == capture_stream_,
              "Capture must end on the same stream it began on.");
  const snpuError_t err = snpuStreamEndCapture(capture_stream_, &graph_);
  NPUCachingAllocator::get()->end_allocate_to_pool(device_, pool_, capture_stream_);
  at::getHostAllocator(at::kPrivateUse1)->end_allocate_to_pool(pool_);
  {
    std::lock_guard<std::mutex> lock(g_capturing_mutex);
    g_capturing.erase(capture_id_);
  }
  for (auto& [state, increment] : generator_states_) increment = state->capture_epilogue(capture_id_);
  capturing_ = false;
  detail::captures_underway.fetch_sub(1, std::memory_order_release);
  if (err != snpuSuccess) throw_npu_error(err, "NPUGraph.capture_end");
}

void NPUGraph::begin_capture_to_if_node(const at::Tensor& pred) {
  TORCH_CHECK(capturing_, "begin_capture_to_if_node: the NPUGraph is not capturing");
  // torch_npu's checks and messages.
  TORCH_CHECK(pred.device().type() == c10::DeviceType::PrivateUse1,
              "Conditions must be on an npu device to use conditional nodes in npu graphs.");
  TORCH_CHECK(pred.numel() == 1, "Conditions must be scalar tensors to use conditional nodes in npu graphs.");
  TORCH_CHECK(pred.scalar_type() == at::kBool,
              "Conditions must be bool tensors to use conditional nodes in npu graphs.");
  TORCH_CHECK(pred.device().index() == device_, "Conditions must be on the same npu device as the graph capture.");
  NPU_CHECK(snpuStreamBeginCaptureToIfNode(capture_stream_, pred.const_data_ptr()));
  conditions_.push_back(pred);
}

void NPUGraph::end_capture_to_conditional_node() {
  TORCH_CHECK(capturing_, "end_capture_to_conditional_node: the NPUGraph is not capturing");
  NPU_CHECK(snpuStreamEndCaptureToConditionalNode(capture_stream_));
}

void NPUGraph::replay() {
  TORCH_CHECK(graph_, "Called NPUGraph::replay without a preceding successful capture.");
  const NPUStream stream = getCurrentNPUStream(device_);
  for (auto& [state, increment] : generator_states_) state->replay_prologue(capture_id_, increment, stream.handle());
  NPU_CHECK(snpuGraphLaunch(graph_, stream.handle()));
  ++replays_;
}

void NPUGraph::reset() {
  TORCH_CHECK(!capturing_, "NPUGraph::reset: the graph is capturing; end the capture first");
  if (graph_) NPU_CHECK(snpuGraphDestroy(graph_));
  graph_ = nullptr;
  // The states' replay slots are blocks of the pool: freed before it is released.
  for (auto& [state, increment] : generator_states_) state->remove_capture_state(capture_id_);
  generator_states_.clear();
  conditions_.clear();
  if (has_pool_) NPUCachingAllocator::get()->release_pool(pool_);
  has_pool_ = false;
  if (has_host_pool_) at::getHostAllocator(at::kPrivateUse1)->release_pool(pool_);
  has_host_pool_ = false;
}

void NPUGraph::register_generator_state(const c10::intrusive_ptr<NPUGeneratorState>& state) {
  generator_states_.emplace(state, 0);
}

c10::MempoolId_t NPUGraph::pool() const {
  TORCH_CHECK(has_pool_, "Called NPUGraph::pool() without a preceding successful capture.");
  return pool_;
}

size_t NPUGraph::node_count() const {
  TORCH_CHECK(graph_, "NPUGraph: no captured graph");
  size_t n = 0;
  NPU_CHECK(snpuGraphGetNodeCount(graph_, &n));
  return n;
}

std::vector<std::string> NPUGraph::node_names() const {
  std::vector<std::string> names(node_count());
  for (size_t i = 0; i < names.size(); ++i) {
    const char* name = nullptr;
    NPU_CHECK(snpuGraphGetNodeName(graph_, i, &name));
    names[i] = name;
  }
  return names;
}

bool current_stream_capturing() {
  snpuStreamCaptureStatus status;
  NPU_CHECK(snpuStreamIsCapturing(getCurrentNPUStream().handle(), &status));
  return status != snpuStreamCaptureStatusNone;
}

std::optional<uint64_t> current_capture_id() {
  if (C10_LIKELY(!capture_underway())) return std::nullopt;
  uint64_t id = 0;
  NPU_CHECK(snpuStreamGetCaptureInfo(getCurrentNPUStream().handle(), nullptr, &id));
  if (id == 0) return std::nullopt;
  return id;
}

void assert_not_capturing(const char* attempt) {
  if (C10_LIKELY(!capture_underway())) return;
  snpuStreamCaptureStatus status;
  NPU_CHECK(snpuStreamIsCapturing(getCurrentNPUStream().handle(), &status));
  TORCH_CHECK(status == snpuStreamCaptureStatusNone, attempt,
              " during NPU graph capture. If you need this call to be captured, please file an issue. Current "
              "npuStreamCaptureStatus: ",
              status == snpuStreamCaptureStatusActive ? "Active" : "Invalidated");
}

void register_capture_rng(uint64_t capture_id, const c10::intrusive_ptr<NPUGeneratorState>& state) {
  std::lock_guard<std::mutex> lock(g_capturing_mutex);
  auto it = g_capturing.find(capture_id);
  TORCH_CHECK(it != g_capturing.end(), "RNG op during graph capture but could not find NPUGraph object.");
  it->second->register_generator_state(state);
}

void check_not_capturing(const char* what) {
  if (C10_LIKELY(!capture_underway())) return;
  snpuStreamCaptureStatus status;
  NPU_CHECK(snpuStreamIsCapturing(getCurrentNPUStream().handle(), &status));
  TORCH_CHECK(status == snpuStreamCaptureStatusNone, what,
              ": operation not permitted when stream is capturing (it makes the host wait for the device)");
}

c10::MempoolId_t graph_pool_handle() { return NPUCachingAllocator::get()->new_pool_id(); }

}  // namespace softnpu
