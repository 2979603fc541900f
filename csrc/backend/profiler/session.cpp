#include "backend/profiler/session.h"

#include <output_base.h>

#include <cstring>
#include <optional>
#include <unordered_map>
#include <unordered_set>

#include "backend/profiler/collective_trace.h"
#include "backend/profiler/correlation.h"
#include "backend/profiler/launch_trace.h"
#include "softnpu/runtime.h"

namespace softnpu::profiler {

namespace {

using libkineto::ActivityType;

std::string last_error(const char* call) { return std::string(call) + ": " + snpuGetLastErrorMessage(); }

// Every completed record the runtime holds.
std::vector<snpuActivityRecord> drain_records(std::vector<std::string>* errors) {
  constexpr size_t kChunk = 4096;
  std::vector<snpuActivityRecord> out;
  size_t n = 0;
  do {
    const size_t old = out.size();
    out.resize(old + kChunk);
    if (snpuActivityDrain(out.data() + old, kChunk, &n) != snpuSuccess) {
      errors->push_back(last_error("snpuActivityDrain"));
      n = 0;
    }
    out.resize(old + n);
  } while (n == kChunk);
  return out;
}

// The record names of runtime.h: copies and memsets have fixed names, everything else is a kernel.
ActivityType record_type(const char* name) {
  if (std::strncmp(name, "Memcpy ", 7) == 0) return ActivityType::GPU_MEMCPY;
  if (std::strcmp(name, "Memset") == 0) return ActivityType::GPU_MEMSET;
  return ActivityType::CONCURRENT_KERNEL;
}

// A copy's or memset's estimate on the SoC, from what its record says (bytes, direction, pinning); none for
// host-to-host copies.
std::optional<cost::Estimate> copy_estimate(const snpuActivityRecord& r) {
  if (record_type(r.name) == ActivityType::GPU_MEMSET)
    return cost::estimate_memset(cost::selected_chip(), static_cast<double>(r.bytes));
  cost::CopyKind kind;
  switch (r.copy_kind) {
    case snpuMemcpyHostToDevice: kind = cost::CopyKind::kHostToDevice; break;
    case snpuMemcpyDeviceToHost: kind = cost::CopyKind::kDeviceToHost; break;
    case snpuMemcpyDeviceToDevice: kind = cost::CopyKind::kDeviceToDevice; break;
    default: return std::nullopt;
  }
  return cost::estimate_copy(cost::selected_chip(), static_cast<double>(r.bytes), kind, r.pageable != 0);
}

libkineto::DeviceInfo device_info(int device) {
  const std::string index = std::to_string(device);
  // After the host's processes in the viewer, as Kineto places GPUs.
  return {device, device + libkineto::kExceedMaxPid, "NPU " + index, "npu:" + index};
}

void link_flow(libkineto::GenericTraceActivity& act, uint64_t flow, bool start) {
  act.flow.id = static_cast<uint32_t>(flow);
  act.flow.type = libkineto::kLinkAsyncCpuGpu;
  act.flow.start = start;
}

}  // namespace

void Session::start() {
  // Records of work that ran across the end of an earlier session belong to no trace.
  drain_records(&errors_);
  take_launch_events();
  take_collective_events();
  if (snpuActivityEnable(1) != snpuSuccess) {
    errors_.push_back(last_error("snpuActivityEnable"));
    status_ = libkineto::TraceStatus::ERROR;
    return;
  }
  set_recording_launches(wants(ActivityType::PRIVATEUSE1_RUNTIME));
  set_recording_collectives(wants(ActivityType::CONCURRENT_KERNEL));
  status_ = libkineto::TraceStatus::RECORDING;
}

// Work still queued is not waited for: torch.profiler synchronizes the current device before it stops (as it does
// for CUDA), and waiting here would report a kernel error to the profiler instead of the program.
void Session::stop() {
  set_recording_launches(false);
  set_recording_collectives(false);
  if (snpuActivityEnable(0) != snpuSuccess) errors_.push_back(last_error("snpuActivityEnable"));
  status_ = libkineto::TraceStatus::PROCESSING;
}

void Session::processTrace(libkineto::ActivityLogger& logger) { processTrace(logger, nullptr, 0, 0); }

void Session::processTrace(libkineto::ActivityLogger& logger, libkineto::getLinkedActivityCallback linked_op,
                           int64_t start_ns, int64_t end_ns) {
  buffer_ = std::make_unique<libkineto::CpuTraceBuffer>();
  buffer_->span = libkineto::TraceSpan(start_ns, end_ns, "npu");
  buffer_->gpuOpCount = -1;
  const auto op_activity = [&](uint64_t op) -> const libkineto::ITraceActivity* {
    return linked_op && op != 0 ? linked_op(static_cast<int32_t>(op)) : nullptr;
  };

  const std::vector<LaunchEvent> launches = take_launch_events();
  std::unordered_map<uint64_t, const LaunchEvent*> launch_of;
  for (const LaunchEvent& e : launches) launch_of.emplace(e.sequence, &e);
  std::unordered_set<uint64_t> executed;  // launches whose kernel is in the trace
  std::vector<std::pair<uint64_t, cost::Estimate>> estimates;

  for (const snpuActivityRecord& r : drain_records(&errors_)) {
    const ActivityType type = record_type(r.name);
    if (!wants(type)) continue;
    uint64_t op = r.correlation_id;
    uint64_t launch = 0;
    if (r.correlation_id & kLaunchIdBit) {
      const auto it = launch_of.find(r.correlation_id & ~kLaunchIdBit);
      op = it == launch_of.end() ? 0 : it->second->op;
      if (it != launch_of.end()) launch = it->first;
    }
    const uint64_t stream = trace_stream_id(r.stream_id);
    auto& act = add(type, r.name);
    act.startTime = r.start_ns;
    act.endTime = r.end_ns;
    act.device = r.device;
    act.resource = static_cast<int32_t>(stream);
    act.id = static_cast<int32_t>(launch);
    act.linked = op_activity(op);
    act.addMetadata("device", r.device);
    act.addMetadata("stream", stream);
    if (launch != 0) {
      act.addMetadata("correlation", launch);
      link_flow(act, launch, /*start=*/false);
      executed.insert(launch);
    }
    // The estimate: a kernel's was made at its launch; a copy's or memset's comes from its record (one inside a
    // kernel's launch gets its own), under an id of its own, as Kineto's CUDA memcpy events carry their bytes.
    std::optional<cost::Estimate> estimate;
    uint64_t estimate_id = launch;
    if (type == ActivityType::GPU_MEMCPY || type == ActivityType::GPU_MEMSET) {
      act.addMetadata("bytes", r.bytes);
      if (type == ActivityType::GPU_MEMCPY && r.copy_kind != snpuMemcpyDeviceToDevice)
        act.addMetadataQuoted("host memory", r.pageable ? "pageable" : "pinned");
      estimate = copy_estimate(r);
      estimate_id = next_launch_sequence();
      act.id = static_cast<int32_t>(estimate_id);
    } else if (launch != 0) {
      estimate = launch_of.at(launch)->estimate;
    }
    // torch_npu's exporter copies this arg into kernel_details.csv under the same name.
    if (estimate) {
      act.addMetadata("Estimated Duration(us)", estimate->us);
      act.addMetadataQuoted("Estimated Bound", cost::bound_name(estimate->bound));
      estimates.emplace_back(estimate_id, *estimate);
    }
    if (r.failed) act.addMetadata("failed", "true");
    devices_.insert(r.device);
    streams_.emplace(r.device, stream);
  }

  // hccl collectives: kernels of their communication stream, as NCCL's kernels are in CUDA traces.
  for (const CollectiveEvent& c : take_collective_events()) {
    const uint64_t stream = trace_stream_id(c.stream);
    auto& act = add(ActivityType::CONCURRENT_KERNEL, c.name);
    act.startTime = c.start_ns;
    act.endTime = c.end_ns;
    act.device = c.device;
    act.resource = static_cast<int32_t>(stream);
    act.addMetadata("device", c.device);
    act.addMetadata("stream", stream);
    act.addMetadata("collective bytes", c.bytes);
    devices_.insert(c.device);
    streams_.emplace(c.device, stream);
  }

  if (wants(ActivityType::PRIVATEUSE1_RUNTIME)) {
    const int32_t pid = libkineto::processId();
    for (const LaunchEvent& e : launches) {
      auto& act = add(ActivityType::PRIVATEUSE1_RUNTIME, "snpuLaunchKernel");
      act.startTime = e.start_ns;
      act.endTime = e.end_ns;
      act.device = pid;
      act.resource = e.thread;
      act.threadId = e.thread;
      act.id = static_cast<int32_t>(e.sequence);
      act.linked = op_activity(e.op);
      act.addMetadataQuoted("kernel", e.kernel);
      act.addMetadata("correlation", e.sequence);
      if (executed.contains(e.sequence)) link_flow(act, e.sequence, /*start=*/true);
    }
  }

  keep_trace_estimates(std::move(estimates));

  // getDeviceInfo() names one device; the others are named here.
  for (auto it = devices_.begin(); it != devices_.end(); ++it)
    if (it != devices_.begin()) logger.handleDeviceInfo(device_info(*it), start_ns);
  for (const auto& act : buffer_->activities) logger.handleActivity(*act);
}

std::unique_ptr<libkineto::DeviceInfo> Session::getDeviceInfo() {
  if (devices_.empty()) return nullptr;
  return std::make_unique<libkineto::DeviceInfo>(device_info(*devices_.begin()));
}

std::vector<libkineto::ResourceInfo> Session::getResourceInfos() {
  std::vector<libkineto::ResourceInfo> out;
  for (const auto& [device, stream] : streams_) {
    const auto id = static_cast<int64_t>(stream);
    out.push_back({id, id, device, "stream " + std::to_string(stream)});
  }
  return out;
}

void Session::pushCorrelationId(uint64_t id) { push_op(id); }

void Session::popCorrelationId() { pop_op(); }

libkineto::GenericTraceActivity& Session::add(ActivityType type, const std::string& name) {
  buffer_->emplace_activity(buffer_->span, type, name);
  return libkineto::CpuTraceBuffer::toRef(buffer_->activities.back());
}

}  // namespace softnpu::profiler
