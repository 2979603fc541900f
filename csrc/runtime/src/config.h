// The runtime's configuration, parsed once from the variables declared in csrc/common/env_vars.def.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace softnpu::rt {

struct Config {
  int physical_device_count = 2;     // SOFTNPU_DEVICE_COUNT
  int soc = 0;                       // SOFTNPU_SOC_VERSION: the row of soc_profiles() every device presents as
  uint64_t memory_bytes = 0;         // SOFTNPU_MEMORY_MB, in bytes (default: the SoC's HBM, see load_config)
  int cores = 1;                     // SOFTNPU_CORES (compute threads per device, not the SoC's AI cores)
  int host_cores = 1;                // what the host has: the cap on kernel threads of all devices together
  bool protect_memory = false;       // SOFTNPU_PROTECT_MEMORY
  std::vector<int> visible;          // ASCEND_RT_VISIBLE_DEVICES: physical index of each visible device, in order
  int log_level = 3;                 // ASCEND_GLOBAL_LOG_LEVEL
  bool log_to_stdout = false;        // ASCEND_SLOG_PRINT_TO_STDOUT
  std::string log_dir;               // ASCEND_PROCESS_LOG_PATH
  bool launch_blocking = false;      // ASCEND_LAUNCH_BLOCKING
};

// Parses the environment. Throws softnpu::env::EnvError naming the variable when a value is malformed.
Config load_config();

}  // namespace softnpu::rt
