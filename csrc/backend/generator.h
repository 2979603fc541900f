// The npu random generator. ATen's CPU kernels draw from a CPU generator, so the npu generator does not hold a
// stream of random numbers itself: like CUDA's Philox generator it holds (seed, offset), and every random kernel
// launched takes the next offset at launch time, on the host. The kernel then runs with a CPU generator seeded from
// (seed, offset). So seeding, get_rng_state and set_rng_state are ordered with the kernels exactly as the host
// issues them, and the same seed gives the same values.
#pragma once

#include <ATen/core/Generator.h>
#include <c10/core/GeneratorImpl.h>

#include <mutex>

namespace softnpu {

class NPUGeneratorImpl final : public c10::GeneratorImpl {
 public:
  explicit NPUGeneratorImpl(c10::DeviceIndex device, uint64_t seed = c10::default_rng_seed_val);

  void set_current_seed(uint64_t seed) override;
  uint64_t current_seed() const override;
  uint64_t seed() override;
  void set_offset(uint64_t offset) override;
  uint64_t get_offset() const override;
  // State: 16 bytes, the seed then the offset (little-endian uint64 each), as a CPU uint8 tensor.
  void set_state(const c10::TensorImpl& new_state) override;
  c10::intrusive_ptr<c10::TensorImpl> get_state() const override;

  static c10::DeviceType device_type() { return c10::DeviceType::PrivateUse1; }

  // The seed for the next random kernel (advances the offset).
  uint64_t next_kernel_seed();

  // NPU graph capture (graph.cpp), under mutex_. While a graph captures with this generator, its kernels get no seed
  // at launch but a draw index; at run time each takes graph_kernel_seed(*capture_slot, index), where the slot is
  // device memory the graph rewrites in stream order before each replay: every replay draws fresh numbers.
  const uint64_t* capture_slot = nullptr;
  uint64_t capture_draws = 0;

 private:
  NPUGeneratorImpl* clone_impl() const override;
  uint64_t seed_;
  uint64_t offset_ = 0;
};

// The seed of a captured random kernel: draw `index` of a replay whose base seed is `base`.
uint64_t graph_kernel_seed(uint64_t base, uint64_t index);

// The default generator of a device (created on first use, seeded with c10's default seed).
const at::Generator& default_generator(c10::DeviceIndex device);
at::Generator new_generator(c10::DeviceIndex device);

}  // namespace softnpu
