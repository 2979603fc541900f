// The commands of `npu-smi info`. Arguments are already validated (main.cpp); a failing management call throws
// std::runtime_error.
#pragma once

#include <ostream>

#include "sampler.h"

namespace npu_smi {

// The types of `npu-smi info -t TYPE`.
enum class Detail { kBoard, kCommon, kHealth, kMemory, kPower, kTemp, kUsages };

// `npu-smi info`: the device table, then the process table.
void print_info(std::ostream& out, Sampler& sampler);
// `npu-smi info --json`.
void print_json(std::ostream& out, Sampler& sampler);
// `npu-smi info -l`: the device count, then one block per device.
void print_list(std::ostream& out, Sampler& sampler);
// `npu-smi info -m`: the chip mapping table.
void print_mapping(std::ostream& out, Sampler& sampler);
// `npu-smi info -t TYPE -i device [-c 0]`; chip_given: -c was given, which some types answer per chip.
void print_detail(std::ostream& out, Sampler& sampler, Detail detail, int device, bool chip_given);
// `npu-smi info watch`: one line per device (or only `device` if >= 0) every interval_s seconds, until SIGINT or
// SIGTERM.
void watch(std::ostream& out, Sampler& sampler, int device, double interval_s);

}  // namespace npu_smi
