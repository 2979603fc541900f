// The npu device's Kineto profiler, registered with torch as the PrivateUse1 profiler when the library loads: torch
// then gives it a Session whenever torch.profiler profiles ProfilerActivity.PrivateUse1.
#include <torch/csrc/profiler/standalone/privateuse1_profiler.h>

#include <c10/util/Exception.h>

#include "backend/profiler/session.h"
#include "softnpu/runtime.h"

namespace softnpu::profiler {

namespace {

using libkineto::ActivityType;

class ActivityProfiler final : public libkineto::IActivityProfiler {
 public:
  const std::string& name() const override {
    static const std::string name = "softnpu";
    return name;
  }

  const std::set<ActivityType>& availableActivities() const override {
    static const std::set<ActivityType> types{ActivityType::CONCURRENT_KERNEL, ActivityType::GPU_MEMCPY,
                                              ActivityType::GPU_MEMSET, ActivityType::PRIVATEUSE1_RUNTIME};
    return types;
  }

  std::unique_ptr<libkineto::IActivityProfilerSession> configure(const std::set<ActivityType>& requested,
                                                                  const libkineto::Config& config) override {
    std::set<ActivityType> types;
    for (ActivityType t : availableActivities())
      if (requested.contains(t)) types.insert(t);
    // No session unless device activity is asked for: profiling the CPU alone costs the device nothing.
    if (!types.contains(ActivityType::CONCURRENT_KERNEL) && !types.contains(ActivityType::GPU_MEMCPY) &&
        !types.contains(ActivityType::GPU_MEMSET))
      return nullptr;
    if (snpuInit() != snpuSuccess) {
      TORCH_WARN("npu profiling is off: ", snpuGetLastErrorMessage());
      return nullptr;
    }
    return std::make_unique<Session>(std::move(types));
  }

  std::unique_ptr<libkineto::IActivityProfilerSession> configure(int64_t start_ms, int64_t duration_ms,
                                                                  const std::set<ActivityType>& requested,
                                                                  const libkineto::Config& config) override {
    return configure(requested, config);
  }
};

REGISTER_PRIVATEUSE1_PROFILER(ActivityProfiler);

}  // namespace

}  // namespace softnpu::profiler
