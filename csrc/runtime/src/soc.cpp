#include "soc.h"

#include <cstdio>

namespace softnpu::rt {

const std::vector<snpuSocProfile>& soc_profiles() {
  static const std::vector<snpuSocProfile> table = {
#define SOFTNPU_SOC(name, soc_version, npu_smi_name, ai_cores, vector_cores, hbm_gib, clock_mhz, fp16, fp32, int8,   \
                    vector_fp16, hbm_gbps, l2_mib, hccs_gbps, roce_gbps, bf16, host_link_gbps, source)              \
  {name, soc_version, npu_smi_name, ai_cores, vector_cores, uint64_t(hbm_gib) << 30, clock_mhz, fp16, fp32, int8,    \
   vector_fp16, hbm_gbps, uint64_t(l2_mib) << 20, hccs_gbps, roce_gbps, bf16, source, host_link_gbps},
#include "../../common/soc_profiles.def"
#undef SOFTNPU_SOC
  };
  return table;
}

int soc_index(const std::string& name) {
  const auto& table = soc_profiles();
  for (size_t i = 0; i < table.size(); ++i)
    if (name == table[i].name) return static_cast<int>(i);
  return -1;
}

std::string soc_names() {
  std::string names;
  for (const snpuSocProfile& p : soc_profiles()) names += (names.empty() ? "" : ", ") + std::string(p.name);
  return names;
}

void set_soc_properties(snpuDeviceProp* prop, const snpuSocProfile& soc) {
  std::snprintf(prop->name, sizeof(prop->name), "%s", soc.name);
  std::snprintf(prop->chip_name, sizeof(prop->chip_name), "%s", soc.npu_smi_name);
  prop->soc_version = soc.soc_version;
  prop->ai_cores = soc.ai_cores;
  prop->vector_cores = soc.vector_cores;
}

}  // namespace softnpu::rt
