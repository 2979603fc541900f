#include "config.h"

#include <algorithm>
#include <cstdlib>
#include <thread>

#include <unistd.h>

#include "../../common/env.h"
#include "soc.h"

namespace softnpu::rt {

using env::Var;

namespace {

// The default capacity: the chip's HBM, but never more than half the host's physical memory, so that a device filled
// to capacity is backed by memory rather than swap or the OOM killer (a 64 GiB 910B on a 16 GiB laptop has 8 GiB).
uint64_t default_memory_bytes(const snpuSocProfile& soc) {
  long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGE_SIZE);
  if (pages <= 0 || page <= 0) return soc.hbm_bytes;
  uint64_t half_host = (uint64_t(pages) * uint64_t(page) / 2) >> 20 << 20;  // whole MiB
  return std::min(soc.hbm_bytes, std::max(half_host, uint64_t(1) << 20));
}

}  // namespace

Config load_config() {
  Config c;
  c.host_cores = std::max(1u, std::thread::hardware_concurrency());
  c.physical_device_count = static_cast<int>(env::get_int(Var::SOFTNPU_DEVICE_COUNT, 2, 1, 64));
  std::vector<std::string> socs;
  for (const snpuSocProfile& p : soc_profiles()) socs.push_back(p.name);
  c.soc = static_cast<int>(env::get_choice(Var::SOFTNPU_SOC_VERSION, size_t(soc_index(kDefaultSoc)), socs));
  uint64_t memory_default = default_memory_bytes(soc_profiles()[c.soc]);
  c.memory_bytes = static_cast<uint64_t>(env::get_int(Var::SOFTNPU_MEMORY_MB, int64_t(memory_default >> 20), 1,
                                                      int64_t(1) << 24))
                   << 20;
  c.cores = static_cast<int>(env::get_int(Var::SOFTNPU_CORES, c.host_cores, 1, 1024));
  c.protect_memory = env::get_bool(Var::SOFTNPU_PROTECT_MEMORY, false);
  std::vector<int64_t> visible;
  if (env::get_list(Var::ASCEND_RT_VISIBLE_DEVICES, 0, c.physical_device_count - 1, &visible)) {
    c.visible.assign(visible.begin(), visible.end());
  } else {
    for (int i = 0; i < c.physical_device_count; ++i) c.visible.push_back(i);
  }
  c.log_level = static_cast<int>(env::get_int(Var::ASCEND_GLOBAL_LOG_LEVEL, 3, 0, 4));
  c.log_to_stdout = env::get_bool(Var::ASCEND_SLOG_PRINT_TO_STDOUT, false);
  const char* home = std::getenv("HOME");
  c.log_dir = env::get_string(Var::ASCEND_PROCESS_LOG_PATH, std::string(home ? home : "/tmp") + "/ascend/log");
  c.launch_blocking = env::get_bool(Var::ASCEND_LAUNCH_BLOCKING, false);
  return c;
}

}  // namespace softnpu::rt
