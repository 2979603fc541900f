#include "backend/graph.h"

#include <c10/util/Exception.h>

#include <atomic>
#include <mutex>

#include "backend/allocator.h"
#include "backend/device.h"
#include "backend/generator.h"
#include "backend/npu_error.h"

namespace softnpu {

namespace detail {
std::atomic<int> captures_underway{0};
}  // namespace detail

namespace {

NPUGeneratorImpl* generator_of(c10::DeviceIndex device) {
  return default_generator(device).get<NPUGeneratorImpl>();
}

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
  auto* allocator = NPUCachingAllocator::get();
  seed_slot_ = allocator->allocate(sizeof(uint64_t));
  if (pool == c10::MempoolId_t{0, 0}) {
    pool_ = allocator->create_pool();
  } else {
    pool_ = pool;
    allocator->retain_pool(pool_);
  }
  has_pool_ = true;
  auto* gen = generator_of(device_);
  {
    std::lock_guard<std::mutex> lock(gen->mutex_);
    TORCH_CHECK(gen->capture_slot == nullptr, "another NPU graph is capturing on device ", device_,
                ": captures on one device cannot overlap");
    const snpuError_t err = snpuStreamBeginCapture(stream.handle(), mode);
    if (err != snpuSuccess) {
      allocator->release_pool(pool_);
      has_pool_ = false;
      throw_npu_error(err, "snpuStreamBeginCapture");
    }
    gen->capture_slot = static_cast<const uint64_t*>(seed_slot_.get());
    gen->capture_draws = 0;
  }
  allocator->begin_allocate_to_pool(device_, pool_, stream.handle());
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
  auto* gen = generator_of(device_);
  {
    std::lock_guard<std::mutex> lock(gen->mutex_);
    seed_draws_ = gen->capture_draws;
    gen->capture_slot = nullptr;
  }
  capturing_ = false;
  detail::captures_underway.fetch_sub(1, std::memory_order_release);
  if (err != snpuSuccess) throw_npu_error(err, "NPUGraph.capture_end");
}

void NPUGraph::replay() {
  TORCH_CHECK(graph_, "Called NPUGraph::replay without a preceding successful capture.");
  const NPUStream stream = getCurrentNPUStream(device_);
  if (seed_draws_ > 0) {
    // This replay's base seed, written in stream order: the host neither waits nor races an earlier replay.
    uint64_t base;
    auto* gen = generator_of(device_);
    {
      std::lock_guard<std::mutex> lock(gen->mutex_);
      base = gen->next_kernel_seed();
    }
    NPU_CHECK(snpuMemcpyAsync(seed_slot_.get(), &base, sizeof(base), snpuMemcpyHostToDevice, stream.handle()));
  }
  NPU_CHECK(snpuGraphLaunch(graph_, stream.handle()));
  ++replays_;
}

void NPUGraph::reset() {
  TORCH_CHECK(!capturing_, "NPUGraph::reset: the graph is capturing; end the capture first");
  if (graph_) NPU_CHECK(snpuGraphDestroy(graph_));
  graph_ = nullptr;
  if (has_pool_) NPUCachingAllocator::get()->release_pool(pool_);
  has_pool_ = false;
  seed_slot_.clear();
  seed_draws_ = 0;
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

bool current_stream_capturing() {
  snpuStreamCaptureStatus status;
  NPU_CHECK(snpuStreamIsCapturing(getCurrentNPUStream().handle(), &status));
  return status != snpuStreamCaptureStatusNone;
}

void check_not_capturing(const char* what) {
  if (C10_LIKELY(!capture_underway())) return;
  const snpuStream_t stream = getCurrentNPUStream().handle();
  snpuStreamCaptureStatus status;
  NPU_CHECK(snpuStreamIsCapturing(stream, &status));
  if (status == snpuStreamCaptureStatusNone) return;
  // The runtime refuses the query of a capturing stream, which invalidates the capture as the sync would have.
  (void)snpuStreamQuery(stream);
  TORCH_CHECK(false, what,
              ": operation not permitted when stream is capturing (it makes the host wait for the device); the NPU "
              "graph capture is invalidated");
}

c10::MempoolId_t graph_pool_handle() { return NPUCachingAllocator::get()->new_pool_id(); }

}  // namespace softnpu
