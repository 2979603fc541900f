// The SoC profiles of csrc/common/soc_profiles.def: the chips a device can present itself as.
#pragma once

#include <string>
#include <vector>

#include "softnpu/runtime.h"

namespace softnpu::rt {

// Every row of the table, in its order.
const std::vector<snpuSocProfile>& soc_profiles();
// The row named name (exactly as get_device_name() spells it), or -1.
int soc_index(const std::string& name);
// The chip a device presents as when SOFTNPU_SOC_VERSION is unset.
constexpr const char* kDefaultSoc = "Ascend910B3";
// "Ascend910B1, Ascend910B2, ...": what an error about a name lists.
std::string soc_names();
// Fills the SoC fields of device properties (name, number, npu-smi name, core counts) from a profile.
void set_soc_properties(snpuDeviceProp* prop, const snpuSocProfile& soc);

}  // namespace softnpu::rt
