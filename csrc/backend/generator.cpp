#include "backend/generator.h"

#include <ATen/Tensor.h>
#include <ATen/Utils.h>
#include <c10/core/ScalarType.h>
#include <c10/util/Exception.h>

#include <cstring>
#include <limits>
#include <memory>
#include <vector>

#include "backend/allocator.h"
#include "backend/device.h"
#include "backend/graph.h"
#include "backend/npu_error.h"

namespace softnpu {

namespace {

// splitmix64 of (seed, offset): distinct offsets give independent CPU generator seeds.
uint64_t mix(uint64_t seed, uint64_t offset) {
  uint64_t z = seed + 0x9E3779B97F4A7C15ULL * (offset + 1);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

uint64_t round_increment(uint64_t increment) { return (increment + 3) / 4 * 4; }

}  // namespace

uint64_t RngDraw::kernel_seed() const {
  if (replay_slot) return mix(replay_slot[0], replay_slot[1] + offset);
  return mix(seed, offset);
}

// ------------------------------------------------------------------------------------------------ the state

c10::intrusive_ptr<NPUGeneratorState> NPUGeneratorState::clone() const {
  auto state = c10::make_intrusive<NPUGeneratorState>();
  state->seed = seed;
  state->offset = offset;
  return state;
}

GraphRngState* NPUGeneratorState::capture_state(uint64_t capture_id, bool create) {
  {
    std::lock_guard<std::mutex> lock(captures_mutex_);
    auto it = captures_.find(capture_id);
    if (it != captures_.end()) return it->second.get();
    if (!create) return nullptr;
  }
  auto state = std::make_unique<GraphRngState>();
  // From the capture's private pool (the current stream captures): it lives as long as the graph.
  state->replay_slot = NPUCachingAllocator::get()->allocate(2 * sizeof(uint64_t));
  register_capture_rng(capture_id, c10::intrusive_ptr<NPUGeneratorState>::reclaim_copy(this));
  std::lock_guard<std::mutex> lock(captures_mutex_);
  return captures_.emplace(capture_id, std::move(state)).first->second.get();
}

uint64_t NPUGeneratorState::capture_epilogue(uint64_t capture_id) {
  std::lock_guard<std::mutex> lock(captures_mutex_);
  auto it = captures_.find(capture_id);
  return it == captures_.end() ? 0 : it->second->offset_intragraph;
}

void NPUGeneratorState::replay_prologue(uint64_t capture_id, uint64_t wholegraph_increment, snpuStream_t stream) {
  if (wholegraph_increment == 0) return;
  uint64_t values[2];
  const void* slot;
  {
    std::lock_guard<std::mutex> lock(captures_mutex_);
    auto it = captures_.find(capture_id);
    TORCH_INTERNAL_ASSERT(it != captures_.end(), "replay_prologue called but no capture state found for capture_id");
    slot = it->second->replay_slot.get();
    values[0] = seed;
    values[1] = offset;
    offset += wholegraph_increment;
  }
  // In stream order: the host neither waits for nor races an earlier replay (the copy is staged).
  NPU_CHECK(snpuMemcpyAsync(const_cast<void*>(slot), values, sizeof(values), snpuMemcpyHostToDevice, stream));
}

void NPUGeneratorState::remove_capture_state(uint64_t capture_id) {
  std::unique_ptr<GraphRngState> removed;
  std::lock_guard<std::mutex> lock(captures_mutex_);
  auto it = captures_.find(capture_id);
  if (it == captures_.end()) return;
  removed = std::move(it->second);
  captures_.erase(it);
}

// ------------------------------------------------------------------------------------------------ the generator

NPUGeneratorImpl::NPUGeneratorImpl(c10::DeviceIndex device, uint64_t seed)
    : at_npu::NPUGeneratorImpl(device),
      state_(c10::make_intrusive<NPUGeneratorState>()) {
  state_->seed = seed;
}

NPUGeneratorImpl::NPUGeneratorImpl(c10::DeviceIndex device, c10::intrusive_ptr<NPUGeneratorState> state)
    : at_npu::NPUGeneratorImpl(device),
      state_(std::move(state)) {}

void NPUGeneratorImpl::set_current_seed(uint64_t seed) {
  if (C10_LIKELY(!current_capture_id())) {
    state_->seed = seed;
    state_->offset = 0;
    return;
  }
  TORCH_CHECK(state_->seed == seed,
              "NPUGeneratorImpl::set_current_seed can be called during stream capture only if new seed is the same as "
              "the original seed.");
}

uint64_t NPUGeneratorImpl::current_seed() const { return state_->seed; }

uint64_t NPUGeneratorImpl::seed() {
  assert_not_capturing("Cannot call NPUGeneratorImpl::seed while in capture mode");
  const uint64_t s = c10::detail::getNonDeterministicRandom(/*is_cuda=*/true);
  set_current_seed(s);
  return s;
}

void NPUGeneratorImpl::set_offset(uint64_t offset) {
  assert_not_capturing("Cannot call NPUGeneratorImpl::set_offset while in capture mode");
  set_philox_offset_per_thread(offset);
}

uint64_t NPUGeneratorImpl::get_offset() const {
  assert_not_capturing("Cannot call NPUGeneratorImpl::get_offset while in capture mode");
  return state_->offset;
}

void NPUGeneratorImpl::set_philox_offset_per_thread(uint64_t offset) {
  TORCH_CHECK(offset % 4 == 0, "offset must be a multiple of 4");
  if (C10_LIKELY(!capture_underway())) {
    state_->offset = offset;
    return;
  }
  const auto capture = current_capture_id();
  if (!capture) {
    state_->offset = offset;
  } else {
    state_->capture_state(*capture, /*create=*/true)->offset_intragraph = offset;
  }
}

uint64_t NPUGeneratorImpl::philox_offset_per_thread() const {
  if (C10_LIKELY(!capture_underway())) return state_->offset;
  const auto capture = current_capture_id();
  if (!capture) return state_->offset;
  return state_->capture_state(*capture, /*create=*/true)->offset_intragraph;
}

void NPUGeneratorImpl::set_state(const c10::TensorImpl& new_state) {
  TORCH_CHECK_TYPE(new_state.dtype() == caffe2::TypeMeta::Make<uint8_t>(), "RNG state must be a torch.ByteTensor");
  // 8 bytes: a seed alone (the offset then restarts at 0), as CUDA's and torch_npu's.
  TORCH_CHECK(new_state.numel() == 2 * sizeof(uint64_t) || new_state.numel() == sizeof(uint64_t),
              "RNG state is wrong size: an npu generator's state has ", 2 * sizeof(uint64_t), " bytes, got ",
              new_state.numel());
  const auto* bytes = static_cast<const uint8_t*>(new_state.data());
  uint64_t seed;
  uint64_t offset = 0;
  std::memcpy(&seed, bytes, sizeof(uint64_t));
  if (new_state.numel() == 2 * sizeof(uint64_t)) std::memcpy(&offset, bytes + sizeof(uint64_t), sizeof(uint64_t));
  set_current_seed(seed);
  set_philox_offset_per_thread(offset);
}

c10::intrusive_ptr<c10::TensorImpl> NPUGeneratorImpl::get_state() const {
  auto state = at::detail::empty_cpu({static_cast<int64_t>(2 * sizeof(uint64_t))}, c10::ScalarType::Byte,
                                     std::nullopt, std::nullopt, std::nullopt, std::nullopt);
  auto* bytes = static_cast<uint8_t*>(state.data_ptr());
  const uint64_t seed = state_->seed;
  const uint64_t offset = philox_offset_per_thread();
  std::memcpy(bytes, &seed, sizeof(uint64_t));
  std::memcpy(bytes + sizeof(uint64_t), &offset, sizeof(uint64_t));
  return state.getIntrusivePtr();
}

void NPUGeneratorImpl::graphsafe_set_state(const c10::intrusive_ptr<c10::GeneratorImpl>& gen) {
  const auto* npu_gen = dynamic_cast<const NPUGeneratorImpl*>(gen.get());
  TORCH_CHECK(npu_gen, "Expected a NPU Generator");
  state_ = npu_gen->state_;
}

c10::intrusive_ptr<c10::GeneratorImpl> NPUGeneratorImpl::graphsafe_get_state() const {
  return c10::make_intrusive<NPUGeneratorImpl>(device().index(), state_);
}

RngDraw NPUGeneratorImpl::draw(uint64_t increment) {
  increment = round_increment(increment);
  if (C10_UNLIKELY(capture_underway())) {
    if (const auto capture = current_capture_id()) {
      GraphRngState* graph = state_->capture_state(*capture, /*create=*/true);
      RngDraw d{0, graph->offset_intragraph, static_cast<const uint64_t*>(graph->replay_slot.get())};
      TORCH_CHECK(graph->offset_intragraph <= std::numeric_limits<uint64_t>::max() - increment,
                  "Increment causes overflow in the offset value.");
      graph->offset_intragraph += increment;
      return d;
    }
  }
  RngDraw d{state_->seed, state_->offset, nullptr};
  state_->offset += increment;
  return d;
}

std::pair<uint64_t, uint64_t> NPUGeneratorImpl::philox_engine_inputs(uint64_t increment) {
  assert_not_capturing(
      "Refactor this op to use NPUGeneratorImpl::draw. Cannot call NPUGeneratorImpl::philox_engine_inputs");
  const RngDraw d = draw(increment);
  return {d.seed, d.offset};
}

at_npu::PhiloxNpuState NPUGeneratorImpl::philox_npu_state(uint64_t increment) {
  const auto [seed, offset] = philox_engine_inputs(increment);
  return at_npu::PhiloxNpuState(seed, offset);
}

NPUGeneratorImpl* NPUGeneratorImpl::clone_impl() const {
  assert_not_capturing("Cannot call NPUGeneratorImpl::clone_impl while in capture mode");
  return new NPUGeneratorImpl(device().index(), state_->clone());
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
