#include "sampler.h"

#include <algorithm>
#include <cstdio>
#include <stdexcept>

namespace npu_smi {
namespace {

void check(snpuError_t e) {
  if (e != snpuSuccess) throw std::runtime_error(snpuGetLastErrorMessage());
}

std::vector<snpuMgmtProcessUsage> list_usage() {
  std::vector<snpuMgmtProcessUsage> usage(16);
  size_t count = 0;
  // Processes may start between the two calls: retry until the buffer holds them all.
  while (true) {
    check(snpuMgmtListProcessUsage(usage.data(), usage.size(), &count));
    if (count <= usage.size()) break;
    usage.resize(count * 2);
  }
  usage.resize(count);
  return usage;
}

}  // namespace

std::string bus_id(int index) {
  static constexpr int kBuses[8] = {0xC1, 0xC2, 0x81, 0x82, 0x01, 0x02, 0x41, 0x42};
  char buf[16];
  std::snprintf(buf, sizeof(buf), "%04X:%02X:00.0", (index / 8) & 0xFFFF, kBuses[index % 8]);
  return buf;
}

Sampler::Sampler() {
  int count = 0;
  check(snpuMgmtGetDeviceCount(&count));
  snpuSocProfile soc;
  check(snpuGetSocProfile(nullptr, &soc));  // the chip SOFTNPU_SOC_VERSION selects, as every device presents
  for (int id = 0; id < count; ++id) {
    snpuDeviceProp prop;
    check(snpuMgmtGetDeviceProperties(&prop, id));
    Device d;
    d.id = id;
    d.name = prop.chip_name;  // npu-smi names the chip ("910B3"), torch_npu the SoC ("Ascend910B3")
    d.soc_name = prop.name;
    d.bus_id = bus_id(prop.physical_index);
    d.ai_cores = prop.ai_cores;
    d.clock_mhz = soc.clock_mhz;
    d.memory_total = prop.total_memory;
    devices_.push_back(d);
  }
}

Snapshot Sampler::read() {
  Snapshot s;
  s.devices = devices_;
  std::map<std::pair<int, int>, snpuMgmtProcessUsage> current;
  for (const snpuMgmtProcessUsage& u : list_usage()) {
    current[{u.pid, u.device}] = u;
    // Only the devices of this configuration: a process run with a larger SOFTNPU_DEVICE_COUNT may use others.
    if (u.device >= device_count()) continue;
    Device& d = s.devices[u.device];
    d.memory_used += u.memory_in_use;
    s.processes.push_back({u.pid, u.process_name, u.device, u.memory_in_use});

    auto before = previous_.find({u.pid, u.device});
    if (before == previous_.end() || u.compute_threads <= 0) continue;
    const snpuMgmtProcessUsage& p = before->second;
    int64_t elapsed = u.sample_ns - p.sample_ns;
    if (elapsed <= 0 || u.busy_ns < p.busy_ns) continue;
    d.aicore_percent += 100.0 * double(u.busy_ns - p.busy_ns) / (double(elapsed) * u.compute_threads);
  }
  for (Device& d : s.devices) d.aicore_percent = std::min(d.aicore_percent, 100.0);
  std::sort(s.processes.begin(), s.processes.end(), [](const Process& a, const Process& b) {
    return std::pair(a.device, a.pid) < std::pair(b.device, b.pid);
  });
  previous_ = std::move(current);
  return s;
}

// An idle board draws 65 W at 36 C; a fully busy one 215 W at 66 C.
double power_watts(double aicore_percent) { return 65.0 + 1.5 * aicore_percent; }
int temperature_c(double aicore_percent) { return 36 + static_cast<int>(0.3 * aicore_percent + 0.5); }

}  // namespace npu_smi
