// at_npu::detail's generator functions: softnpu's default and new generators (backend/generator.h).
#include "torch_npu/csrc/aten/NPUGeneratorImpl.h"

#include "backend/generator.h"
#include "torch_npu/csrc/core/npu/NPUFunctions.h"

namespace at_npu::detail {

namespace {
c10::DeviceIndex resolve(c10::DeviceIndex device_index) {
  return device_index < 0 ? c10_npu::current_device() : device_index;
}
}  // namespace

const at::Generator& getDefaultNPUGenerator(c10::DeviceIndex device_index) {
  return softnpu::default_generator(resolve(device_index));
}

at::Generator createNPUGenerator(c10::DeviceIndex device_index) { return softnpu::new_generator(resolve(device_index)); }

}  // namespace at_npu::detail
