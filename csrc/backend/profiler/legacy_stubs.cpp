// The npu device's profiler stubs (torch/csrc/profiler/stubs/base.h), registered when the library loads: the legacy
// profiler, torch.autograd.profiler.profile(use_device="npu"), brackets every op with two of them, an event
// recorded on the current stream when the op starts and one when it returns, and charges the op the device time
// between the two, as CUDA's stubs do with CUDA events.
#include <torch/csrc/profiler/stubs/base.h>

#include <c10/util/ApproximateClock.h>

#include "backend/device.h"
#include "backend/npu_error.h"
#include "backend/stream.h"
#include "softnpu/runtime.h"

namespace softnpu::profiler {

namespace {

using torch::profiler::impl::ProfilerVoidEventStub;

class NPUProfilerStubs final : public torch::profiler::impl::ProfilerStubs {
 public:
  void record(c10::DeviceIndex* device, ProfilerVoidEventStub* event, int64_t* cpu_ns) const override {
    if (device) *device = current_device();
    snpuEvent_t e = nullptr;
    NPU_CHECK(snpuEventCreate(&e, snpuEventDefault));
    *event = std::shared_ptr<void>(e, [](void* p) { snpuEventDestroy(static_cast<snpuEvent_t>(p)); });
    const NPUStream stream = getCurrentNPUStream();
    if (cpu_ns) *cpu_ns = c10::getTime();
    NPU_CHECK(snpuEventRecord(e, stream.handle()));
  }

  // Microseconds between two recorded events, once the stream has passed both (the events' device timestamps).
  float elapsed(const ProfilerVoidEventStub* event, const ProfilerVoidEventStub* event2) const override {
    auto start = static_cast<snpuEvent_t>(event->get());
    auto end = static_cast<snpuEvent_t>(event2->get());
    NPU_CHECK(snpuEventSynchronize(start));
    NPU_CHECK(snpuEventSynchronize(end));
    float ms = 0;
    NPU_CHECK(snpuEventElapsedTime(&ms, start, end));
    return ms * 1000.0f;
  }

  // Markers and ranges are for tools that read them from the device's own tracer (NVTX on CUDA); npu has none.
  void mark(const char*) const override {}
  void rangePush(const char*) const override {}
  void rangePop() const override {}

  bool enabled() const override { return true; }

  void onEachDevice(std::function<void(int)> op) const override {
    const c10::DeviceIndex previous = current_device();
    for (c10::DeviceIndex d = 0; d < device_count(); d++) {
      set_device(d);
      op(d);
    }
    set_device(previous);
  }

  void synchronize() const override { NPU_CHECK(snpuDeviceSynchronize()); }
};

struct RegisterStubs {
  RegisterStubs() {
    static NPUProfilerStubs stubs;
    torch::profiler::impl::registerPrivateUse1Methods(&stubs);
  }
};

const RegisterStubs register_stubs;

}  // namespace

}  // namespace softnpu::profiler
