// What npu-smi shows: the devices of the configuration and the usage that live processes publish, read through
// the management API (softnpu/management.h).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "softnpu/management.h"

namespace npu_smi {

struct Device {
  int id = 0;
  std::string name;         // the chip's npu-smi name: "910B3"
  std::string soc_name;     // the SoC's name: "Ascend910B3"
  std::string bus_id;       // see bus_id()
  int ai_cores = 0;         // the chip's AI cores (the SoC profile's)
  int clock_mhz = 0;        // the chip's AI core clock (the SoC profile's)
  uint64_t memory_total = 0;  // bytes
  uint64_t memory_used = 0;   // bytes held by live processes
  double aicore_percent = 0;  // see Sampler::read
};

struct Process {
  int pid = 0;
  std::string name;
  int device = 0;
  uint64_t memory_in_use = 0;  // bytes
};

struct Snapshot {
  std::vector<Device> devices;      // by id
  std::vector<Process> processes;   // by device, then pid
};

// Reads snapshots. AI core utilization is a rate, so it needs two readings: each read() gives, per device, the busy
// time its compute threads accumulated since the previous read() divided by (elapsed time x compute threads),
// summed over processes and capped at 100 (0 on the first read).
class Sampler {
 public:
  // Throws std::runtime_error with the management API's message (e.g. a malformed SOFTNPU_DEVICE_COUNT).
  Sampler();

  int device_count() const { return static_cast<int>(devices_.size()); }
  Snapshot read();

 private:
  std::vector<Device> devices_;  // properties; the figures are filled by read()
  std::map<std::pair<int, int>, snpuMgmtProcessUsage> previous_;  // by (pid, device)
};

// The PCI-style bus id npu-smi shows for physical device `index`: no PCI device exists, so it is an identifier, stable
// per index. Devices 0-7 take the buses of an Atlas 800T A2's eight NPUs in npu-smi's order (C1, C2, 81, 82, 01, 02,
// 41, 42); each further group of eight takes the next PCI domain: device 9 is 0001:C2:00.0.
std::string bus_id(int index);

// Simulated figures: a software NPU has no sensors, so power and temperature follow utilization.
double power_watts(double aicore_percent);
int temperature_c(double aicore_percent);

}  // namespace npu_smi
