#include "backend/generator.h"

#include <ATen/Tensor.h>
#include <ATen/Utils.h>
#include <c10/core/ScalarType.h>
#include <c10/util/Exception.h>

#include <cstring>
#include <memory>
#include <vector>

#include "backend/device.h"

namespace softnpu {

NPUGeneratorImpl::NPUGeneratorImpl(c10::DeviceIndex device, uint64_t seed)
    : c10::GeneratorImpl(c10::Device(c10::DeviceType::PrivateUse1, device),
                         c10::DispatchKeySet(c10::DispatchKey::PrivateUse1)),
      seed_(seed) {}

void NPUGeneratorImpl::set_current_seed(uint64_t seed) {
  seed_ = seed;
  offset_ = 0;
}

uint64_t NPUGeneratorImpl::current_seed() const { return seed_; }

uint64_t NPUGeneratorImpl::seed() {
  const uint64_t s = c10::detail::getNonDeterministicRandom(/*is_cuda=*/true);
  set_current_seed(s);
  return s;
}

void NPUGeneratorImpl::set_offset(uint64_t offset) { offset_ = offset; }

uint64_t NPUGeneratorImpl::get_offset() const { return offset_; }

void NPUGeneratorImpl::set_state(const c10::TensorImpl& new_state) {
  TORCH_CHECK_TYPE(new_state.dtype() == caffe2::TypeMeta::Make<uint8_t>(),
                   "RNG state must be a torch.ByteTensor");
  TORCH_CHECK(new_state.numel() == 2 * sizeof(uint64_t), "RNG state of an npu generator must have ",
              2 * sizeof(uint64_t), " bytes, got ", new_state.numel());
  const auto* bytes = static_cast<const uint8_t*>(new_state.data());
  std::memcpy(&seed_, bytes, sizeof(uint64_t));
  std::memcpy(&offset_, bytes + sizeof(uint64_t), sizeof(uint64_t));
}

c10::intrusive_ptr<c10::TensorImpl> NPUGeneratorImpl::get_state() const {
  auto state = at::detail::empty_cpu({static_cast<int64_t>(2 * sizeof(uint64_t))}, c10::ScalarType::Byte,
                                     std::nullopt, std::nullopt, std::nullopt, std::nullopt);
  auto* bytes = static_cast<uint8_t*>(state.data_ptr());
  std::memcpy(bytes, &seed_, sizeof(uint64_t));
  std::memcpy(bytes + sizeof(uint64_t), &offset_, sizeof(uint64_t));
  return state.getIntrusivePtr();
}

namespace {

// splitmix64 of (seed, n): consecutive n give independent CPU generator seeds.
uint64_t mix(uint64_t seed, uint64_t n) {
  uint64_t z = seed + 0x9E3779B97F4A7C15ULL * n;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

}  // namespace

uint64_t NPUGeneratorImpl::next_kernel_seed() { return mix(seed_, ++offset_); }

uint64_t graph_kernel_seed(uint64_t base, uint64_t index) { return mix(base, index + 1); }

NPUGeneratorImpl* NPUGeneratorImpl::clone_impl() const {
  auto* gen = new NPUGeneratorImpl(device().index(), seed_);
  gen->offset_ = offset_;
  return gen;
}

const at::Generator& default_generator(c10::DeviceIndex device) {
  static std::vector<std::unique_ptr<at::Generator>> gens(device_count());
  static std::once_flag flags[64];
  if (device < 0) device = current_device();
  check_device_index(device);
  std::call_once(flags[device], [&] {
    gens[device] = std::make_unique<at::Generator>(at::make_generator<NPUGeneratorImpl>(device));
  });
  return *gens[device];
}

at::Generator new_generator(c10::DeviceIndex device) {
  if (device < 0) device = current_device();
  check_device_index(device);
  return at::make_generator<NPUGeneratorImpl>(device);
}

}  // namespace softnpu
