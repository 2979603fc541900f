// The npu random generator. ATen's CPU kernels draw from a CPU generator, so the npu generator does not hold a
// stream of random numbers itself: like CUDA's Philox generator it holds (seed, offset), and every random kernel
// launched takes the current offset and advances it, on the host. The kernel then runs with a CPU generator seeded
// from (seed, offset). So seeding, get_rng_state and set_rng_state are ordered with the kernels exactly as the host
// issues them, and the same seed gives the same values.
//
// NPU graphs use CUDA's graph-safe RNG model (which torch_npu copies): the (seed, offset) live in a state that
// generators may share (graphsafe_get_state / graphsafe_set_state); while a graph captures, a kernel's offset counts
// from 0 within the graph, and at run time the kernel adds the (seed, offset) each replay writes into device memory
// in stream order, the generator's values at that replay, which then advances the generator by the whole graph's
// offsets. So a captured random op draws what eager would at the same seed and offset.
#pragma once

#include <ATen/core/Generator.h>
#include <c10/core/Allocator.h>
#include <c10/core/GeneratorImpl.h>
#include <c10/util/intrusive_ptr.h>

#include <map>
#include <memory>
#include <mutex>
#include <utility>

#include "softnpu/runtime.h"
#include "torch_npu/csrc/aten/NPUGeneratorImpl.h"

namespace softnpu {

// The offset a random kernel consumes (a multiple of 4, as torch_npu's and CUDA's Philox offsets must be).
constexpr uint64_t kKernelOffsetIncrement = 4;

// What a random kernel seeds its CPU generator from.
struct RngDraw {
  uint64_t seed = 0;    // eager: the generator's seed
  uint64_t offset = 0;  // eager: the generator's offset; captured: the offset within the graph
  // Captured: device memory holding the replay's {seed, offset}, read when the kernel runs.
  const uint64_t* replay_slot = nullptr;

  // Compute side: the CPU generator's seed.
  uint64_t kernel_seed() const;
};

// One capture's part of a generator state (torch_npu's NPUGeneratorCaptureState).
struct GraphRngState {
  uint64_t offset_intragraph = 0;
  c10::DataPtr replay_slot;  // {seed, offset}, rewritten in stream order by each replay
};

// The (seed, offset) of a generator, shareable between generators (CUDA's CUDAGeneratorState).
class NPUGeneratorState final : public c10::intrusive_ptr_target {
 public:
  uint64_t seed = c10::default_rng_seed_val;
  uint64_t offset = 0;

  c10::intrusive_ptr<NPUGeneratorState> clone() const;

  // The state of capture `capture_id`; created on first use (registered with the capturing NPUGraph), or null.
  GraphRngState* capture_state(uint64_t capture_id, bool create);
  // Capture end: the whole graph's offset increment.
  uint64_t capture_epilogue(uint64_t capture_id);
  // Before a replay on `stream`: writes the replay's (seed, offset) for the graph's kernels, in stream order, and
  // advances the offset by the graph's increment.
  void replay_prologue(uint64_t capture_id, uint64_t wholegraph_increment, snpuStream_t stream);
  void remove_capture_state(uint64_t capture_id);

 private:
  std::mutex captures_mutex_;
  std::map<uint64_t, std::unique_ptr<GraphRngState>> captures_;  // guarded by captures_mutex_
};

// torch_npu's at_npu::NPUGeneratorImpl, so extensions reach it through torch_npu's interface.
class NPUGeneratorImpl final : public at_npu::NPUGeneratorImpl {
 public:
  explicit NPUGeneratorImpl(c10::DeviceIndex device, uint64_t seed = c10::default_rng_seed_val);
  NPUGeneratorImpl(c10::DeviceIndex device, c10::intrusive_ptr<NPUGeneratorState> state);

  // During a capture only the seed in force may be set (torch_npu's message).
  void set_current_seed(uint64_t seed) override;
  uint64_t current_seed() const override;
  uint64_t seed() override;
  void set_offset(uint64_t offset) override;
  uint64_t get_offset() const override;
  // State: 16 bytes, the seed then the offset (little-endian uint64 each), as a CPU uint8 tensor; during a capture
  // the offset is the one within the graph.
  void set_state(const c10::TensorImpl& new_state) override;
  c10::intrusive_ptr<c10::TensorImpl> get_state() const override;
  void graphsafe_set_state(const c10::intrusive_ptr<c10::GeneratorImpl>& state) override;
  c10::intrusive_ptr<c10::GeneratorImpl> graphsafe_get_state() const override;

  // The offset in force: the generator's, or the capturing graph's.
  void set_philox_offset_per_thread(uint64_t offset) override;
  uint64_t philox_offset_per_thread() const override;

  // A random kernel's draw (advances the offset by `increment`, rounded up to a multiple of 4), graph-safe: during a
  // capture of the current stream it reads the replay's (seed, offset) at run time. Under mutex_.
  RngDraw draw(uint64_t increment = kKernelOffsetIncrement);
  // (seed, offset) known on the host, for kernels that take them as arguments; not while capturing. Under mutex_.
  std::pair<uint64_t, uint64_t> philox_engine_inputs(uint64_t increment = kKernelOffsetIncrement) override;
  // The same draw as torch_npu's PhiloxNpuState (not captured: raises during a capture, as philox_engine_inputs).
  at_npu::PhiloxNpuState philox_npu_state(uint64_t increment) override;

  const c10::intrusive_ptr<NPUGeneratorState>& state() const { return state_; }

 private:
  NPUGeneratorImpl* clone_impl() const override;
  c10::intrusive_ptr<NPUGeneratorState> state_;
};

// The default generator of a device (created on first use, seeded with c10's default seed).
const at::Generator& default_generator(c10::DeviceIndex device);
at::Generator new_generator(c10::DeviceIndex device);

}  // namespace softnpu
