// One profiling session of the npu device, as Kineto runs it: start() and stop() bracket the recording of the
// runtime's activity records (every kernel, copy and memset that executes) and of the op path's launch events;
// processTrace() turns them into trace activities:
//   - a kernel, copy or memset on track "stream <id>" of process <device> (the device index), linked to the host op
//     that launched it, so torch attributes its time to that op; <id> is trace_stream_id() of its runtime stream;
//   - a "snpuLaunchKernel" runtime event per kernel launch on the launching thread, with a flow to its kernel.
#pragma once

#include <IActivityProfiler.h>
#include <libkineto.h>

#include <cstdint>
#include <memory>
#include <set>
#include <string>
#include <utility>
#include <vector>

namespace softnpu::profiler {

// The stream id a trace shows for a runtime stream: the runtime numbers every device's default stream 0 and the
// streams it creates 1, 2, ... (process-wide); traces show id + 7, so the default stream is 7, as CUDA's default
// stream is in Kineto's traces, and no kernel is on stream 0, which trace readers (msprof-analyze compare) skip as
// "no kernel data". Every exporter of the trace uses this one mapping.
constexpr uint64_t kTraceStreamBase = 7;
constexpr uint64_t trace_stream_id(uint64_t runtime_stream) { return runtime_stream + kTraceStreamBase; }

class Session final : public libkineto::IActivityProfilerSession {
 public:
  explicit Session(std::set<libkineto::ActivityType> types) : types_(std::move(types)) {}

  void start() override;
  void stop() override;
  std::vector<std::string> errors() override { return errors_; }

  void processTrace(libkineto::ActivityLogger& logger) override;
  void processTrace(libkineto::ActivityLogger& logger, libkineto::getLinkedActivityCallback linked_op,
                    int64_t start_ns, int64_t end_ns) override;

  std::unique_ptr<libkineto::DeviceInfo> getDeviceInfo() override;
  std::vector<libkineto::ResourceInfo> getResourceInfos() override;
  std::unique_ptr<libkineto::CpuTraceBuffer> getTraceBuffer() override { return std::move(buffer_); }

  void pushCorrelationId(uint64_t id) override;
  void popCorrelationId() override;

 private:
  bool wants(libkineto::ActivityType type) const { return types_.contains(type); }
  libkineto::GenericTraceActivity& add(libkineto::ActivityType type, const std::string& name);

  std::set<libkineto::ActivityType> types_;
  std::vector<std::string> errors_;
  // Owns the activities handed to the logger; Kineto keeps it with the trace (getTraceBuffer).
  std::unique_ptr<libkineto::CpuTraceBuffer> buffer_;
  std::set<int> devices_;                             // devices with activities, in order
  std::set<std::pair<int, uint64_t>> streams_;        // (device, trace stream id) with activities
};

}  // namespace softnpu::profiler
