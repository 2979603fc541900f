// torch_npu's NPUGeneratorImpl.h: the default npu generator of a device, softnpu's (the one torch.npu.manual_seed
// seeds; a (seed, offset) Philox-style generator). Its class is softnpu's own, so at::check_generator<NPUGeneratorImpl>
// and philox_engine_inputs (torch_npu's class) are not offered.
#pragma once

#include <ATen/core/Generator.h>
#include <c10/core/Device.h>

namespace at_npu::detail {

// The device's default generator; -1 is the current device.
const at::Generator& getDefaultNPUGenerator(c10::DeviceIndex device_index = -1);
// A new generator of the device, seeded with c10's default seed.
at::Generator createNPUGenerator(c10::DeviceIndex device_index = -1);

}  // namespace at_npu::detail
