// SoC profiles: the table of chips (csrc/common/soc_profiles.def), SOFTNPU_SOC_VERSION choosing one, and what the
// devices, the management API and the default capacity take from it.
#include <unistd.h>

#include <set>
#include <string>

#include "softnpu/management.h"
#include "test_util.h"

namespace softnpu::test {
namespace {

std::vector<snpuSocProfile> table() {
  int count = 0;
  EXPECT_EQ(snpuGetSocProfileCount(&count), snpuSuccess);
  std::vector<snpuSocProfile> rows(count);
  for (int i = 0; i < count; ++i) EXPECT_EQ(snpuGetSocProfileByIndex(i, &rows[i]), snpuSuccess);
  return rows;
}

TEST(Soc, TableHasTorchNpusNumbersAndConsistentFigures) {
  std::set<std::string> names;
  std::set<int> numbers;
  for (const snpuSocProfile& p : table()) {
    SCOPED_TRACE(p.name);
    EXPECT_TRUE(names.insert(p.name).second) << "names are unique";
    EXPECT_TRUE(numbers.insert(p.soc_version).second) << "numbers are unique";
    // torch_npu's SocVersion ranges: 200-205 310P, 220-225 910B, 250-255 A3 (vllm-ascend relies on the last two).
    bool p310 = p.soc_version >= 200 && p.soc_version <= 205, b910 = p.soc_version >= 220 && p.soc_version <= 225,
         a3 = p.soc_version >= 250 && p.soc_version <= 255;
    EXPECT_TRUE(p310 || b910 || a3);
    EXPECT_EQ(std::string(p.name).rfind(p310 ? "Ascend310P" : b910 ? "Ascend910B" : "Ascend910_93", 0), 0u);
    EXPECT_EQ(p.supports_bf16, p.soc_version >= 220) << "torch_npu's IsBF16Supported";
    EXPECT_GT(p.ai_cores, 0);
    EXPECT_GT(p.vector_cores, 0);
    EXPECT_GT(p.hbm_bytes, uint64_t(16) << 30);
    EXPECT_GT(p.hbm_gbps, 0);
    EXPECT_GT(p.l2_bytes, 0u);
    EXPECT_GT(std::string(p.source).size(), 10u) << "every row says where its figures come from";
    // The cube peaks follow from the cores and the clock: 16x16x16 fp16 MACs per core and cycle, int8 twice that.
    double fp16 = p.ai_cores * 8192.0 * p.clock_mhz * 1e6 / 1e12;
    EXPECT_NEAR(p.cube_fp16_tflops, fp16, 0.1);
    EXPECT_NEAR(p.cube_int8_tops, 2 * fp16, 0.2);
    EXPECT_NEAR(p.vector_fp16_tflops, p.vector_cores * 128.0 * p.clock_mhz * 1e6 / 1e12, 0.01);
  }
  for (const char* name : {"Ascend910B1", "Ascend910B2", "Ascend910B2C", "Ascend910B3", "Ascend910B4",
                           "Ascend910B4-1", "Ascend910_9391", "Ascend910_9392", "Ascend910_9381", "Ascend910_9382",
                           "Ascend910_9372", "Ascend910_9362", "Ascend310P3"})
    EXPECT_TRUE(names.count(name)) << name;
}

TEST(Soc, ProfilesByName) {
  snpuSocProfile p;
  ASSERT_SNPU(snpuGetSocProfile("Ascend910B4", &p));
  EXPECT_EQ(p.soc_version, 224);
  EXPECT_STREQ(p.npu_smi_name, "910B4");
  EXPECT_EQ(p.hbm_bytes, uint64_t(32) << 30);
  ASSERT_SNPU(snpuGetSocProfile("Ascend310P3", &p));
  EXPECT_EQ(p.soc_version, 202);
  EXPECT_EQ(p.supports_bf16, 0);
  EXPECT_EQ(p.cube_fp32_tflops, 0) << "the 310P cube has no float32 path";
  EXPECT_EQ(snpuGetSocProfile("Ascend910", &p), snpuErrorInvalidValue);
  EXPECT_NE(last_message().find("Ascend910B3"), std::string::npos) << "lists the choices: " << last_message();
  EXPECT_EQ(snpuGetSocProfileByIndex(-1, &p), snpuErrorInvalidValue);
  EXPECT_EQ(snpuGetSocProfile(nullptr, nullptr), snpuErrorInvalidValue);
}

TEST(Soc, DefaultIsAscend910B3) {
  snpuSocProfile p;
  ASSERT_SNPU(snpuGetSocProfile(nullptr, &p));
  EXPECT_STREQ(p.name, "Ascend910B3");
  EXPECT_EQ(p.soc_version, 223);
  snpuDeviceProp prop;
  ASSERT_SNPU(snpuGetDeviceProperties(&prop, 0));
  EXPECT_STREQ(prop.name, "Ascend910B3");
  EXPECT_STREQ(prop.chip_name, "910B3");
  EXPECT_EQ(prop.soc_version, 223);
  EXPECT_EQ(prop.ai_cores, 20);
  EXPECT_EQ(prop.vector_cores, 40);
}

TEST(Soc, VariableSelectsTheChipOfEveryDevice) {
  ScopedEnv env({{"SOFTNPU_SOC_VERSION", "Ascend910_9391"}, {"SOFTNPU_DEVICE_COUNT", "2"}});
  ASSERT_SNPU(env.init_result());
  for (int d = 0; d < 2; ++d) {
    snpuDeviceProp prop;
    ASSERT_SNPU(snpuGetDeviceProperties(&prop, d));
    EXPECT_STREQ(prop.name, "Ascend910_9391");
    EXPECT_EQ(prop.soc_version, 250);
    EXPECT_EQ(prop.ai_cores, 24);
  }
  snpuSocProfile p;
  ASSERT_SNPU(snpuGetSocProfile(nullptr, &p));
  EXPECT_STREQ(p.name, "Ascend910_9391");
  snpuDeviceProp prop;
  ASSERT_EQ(snpuMgmtGetDeviceProperties(&prop, 1), snpuSuccess) << "npu-smi reads the same row";
  EXPECT_STREQ(prop.chip_name, "Ascend910");
}

TEST(Soc, UnknownChipIsAnInvalidConfigListingTheChoices) {
  ScopedEnv env({{"SOFTNPU_SOC_VERSION", "Ascend910C"}});
  EXPECT_EQ(env.init_result(), snpuErrorInvalidConfig);
  std::string message = last_message();
  EXPECT_NE(message.find("SOFTNPU_SOC_VERSION='Ascend910C'"), std::string::npos) << message;
  EXPECT_NE(message.find("Ascend910B1, Ascend910B2"), std::string::npos) << message;
  EXPECT_NE(message.find("Ascend310P3"), std::string::npos) << message;
  snpuSocProfile p;
  EXPECT_EQ(snpuGetSocProfile(nullptr, &p), snpuErrorInvalidConfig);
  EXPECT_NE(last_message().find("SOFTNPU_SOC_VERSION"), std::string::npos);
}

TEST(Soc, DefaultCapacityIsTheChipsHbmCappedAtHalfTheHost) {
  uint64_t half_host = uint64_t(sysconf(_SC_PHYS_PAGES)) * uint64_t(sysconf(_SC_PAGE_SIZE)) / 2 >> 20 << 20;
  for (const char* name : {"Ascend910B4", "Ascend310P3", "Ascend910B3"}) {
    ScopedEnv env({{"SOFTNPU_SOC_VERSION", name}, {"SOFTNPU_MEMORY_MB", nullptr}});
    ASSERT_SNPU(env.init_result());
    snpuSocProfile p;
    ASSERT_SNPU(snpuGetSocProfile(nullptr, &p));
    size_t free_bytes, total;
    ASSERT_SNPU(snpuMemGetInfo(0, &free_bytes, &total));
    EXPECT_EQ(total, std::min(p.hbm_bytes, half_host)) << name;
  }
  ScopedEnv env({{"SOFTNPU_SOC_VERSION", "Ascend310P3"}, {"SOFTNPU_MEMORY_MB", "512"}});
  size_t free_bytes, total;
  ASSERT_SNPU(snpuMemGetInfo(0, &free_bytes, &total));
  EXPECT_EQ(total, size_t(512) << 20) << "SOFTNPU_MEMORY_MB overrides the chip's";
}

}  // namespace
}  // namespace softnpu::test
