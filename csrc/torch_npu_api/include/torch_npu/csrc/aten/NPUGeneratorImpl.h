// torch_npu's NPUGeneratorImpl.h: the npu generators, softnpu's. at_npu::NPUGeneratorImpl is the interface softnpu's
// generator class implements (csrc/backend/generator.h), so at::check_generator<at_npu::NPUGeneratorImpl> on
// getDefaultNPUGenerator() or createNPUGenerator() and the calls below act on the generator torch.npu.manual_seed
// seeds. It is abstract: generators come from those two functions, not from at::make_generator.
#pragma once

#include <ATen/core/Generator.h>
#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>
#include <c10/core/GeneratorImpl.h>
#include <c10/core/TensorImpl.h>

#include <cstdint>
#include <memory>
#include <utility>

#include "torch_npu/csrc/core/npu/NPUMacros.h"

namespace at_npu {

// The seed and offset a random kernel starts from. philox_npu_state gives it outside an NPU graph capture only
// (captured_ false); captured kernels read theirs when the graph replays, inside softnpu's random kernels.
struct PhiloxNpuState {
  PhiloxNpuState() = default;
  PhiloxNpuState(uint64_t seed, uint64_t offset) {
    seed_.val = seed;
    offset_.val = offset;
  }

  union Payload {
    uint64_t val;
    at::Tensor* ptr;
  };
  Payload seed_{};
  Payload offset_{};
  uint64_t offset_intragraph_{0};
  bool captured_ = false;
  bool secondary_stream_capture_state_ = false;
};

class TORCH_NPU_API NPUGeneratorImpl : public c10::GeneratorImpl {
 public:
  // -1: the current device. Called by softnpu's generator class.
  NPUGeneratorImpl(c10::DeviceIndex device_index = -1)
      : c10::GeneratorImpl(c10::Device(c10::DeviceType::PrivateUse1, device_index),
                           c10::DispatchKeySet(c10::DispatchKey::PrivateUse1)) {}
  ~NPUGeneratorImpl() override = default;

  std::shared_ptr<NPUGeneratorImpl> clone() const { return std::shared_ptr<NPUGeneratorImpl>(clone_impl()); }
  // During an NPU graph capture only the seed in force may be set.
  void set_current_seed(uint64_t seed) override = 0;
  void set_offset(uint64_t offset) override = 0;
  uint64_t current_seed() const override = 0;
  uint64_t get_offset() const override = 0;
  // A new non-deterministic seed, set and returned.
  uint64_t seed() override = 0;
  // 16 bytes as a CPU uint8 tensor: the seed, then the offset.
  void set_state(const c10::TensorImpl& new_state) override = 0;
  c10::intrusive_ptr<c10::TensorImpl> get_state() const override = 0;
  // The offset in force: the generator's, or the capturing graph's.
  virtual void set_philox_offset_per_thread(uint64_t offset) = 0;
  virtual uint64_t philox_offset_per_thread() const = 0;
  // A kernel's draw: the seed and offset, the offset then advanced by increment rounded up to a multiple of 4. Not
  // during an NPU graph capture (c10::Error). Hold mutex_ while drawing, as torch_npu's callers do.
  virtual PhiloxNpuState philox_npu_state(uint64_t increment) = 0;
  virtual std::pair<uint64_t, uint64_t> philox_engine_inputs(uint64_t increment) = 0;
  static c10::DeviceType device_type() { return c10::DeviceType::PrivateUse1; }

 private:
  NPUGeneratorImpl* clone_impl() const override = 0;
};

namespace detail {

// The device's default generator (the one torch.npu.manual_seed seeds); -1 is the current device.
TORCH_NPU_API const at::Generator& getDefaultNPUGenerator(c10::DeviceIndex device_index = -1);
// A new generator of the device, seeded with c10's default seed.
TORCH_NPU_API at::Generator createNPUGenerator(c10::DeviceIndex device_index = -1);

}  // namespace detail

}  // namespace at_npu
