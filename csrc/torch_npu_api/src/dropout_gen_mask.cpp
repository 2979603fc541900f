// at_npu::native::npu_dropout_gen_mask (op-plugin's ops.h): the keep bits drawn with ATen's uniform sampling on the
// npu tensor's device from a generator set to (seed, offset), packed eight to a byte.
#include "third_party/op-plugin/op_plugin/include/ops.h"

#include <ATen/ATen.h>
#include <c10/core/DeviceGuard.h>
#include <c10/util/accumulate.h>

#include <mutex>

#include "torch_npu/csrc/aten/NPUGeneratorImpl.h"
#include "torch_npu/csrc/core/npu/DeviceUtils.h"

namespace at_npu::native {

at::Tensor npu_dropout_gen_mask(const at::Tensor &self, at::IntArrayRef size, double p, int64_t seed,
                                int64_t offset, c10::optional<bool> parallel, c10::optional<bool> sync) {
  torch_npu::utils::torch_check_npu(self);
  TORCH_CHECK(p >= 0 && p <= 1, "npu_dropout_gen_mask: p must be in [0, 1], got ", p);
  TORCH_CHECK(seed >= 0 && offset >= 0, "npu_dropout_gen_mask: seed and offset must not be negative");
  constexpr int64_t kAlign = 128;  // CANN's mask covers whole 128-element blocks
  const int64_t numel = c10::multiply_integers(size);
  const int64_t bits = (numel + kAlign - 1) / kAlign * kAlign;
  const c10::DeviceGuard guard(self.device());
  at::Generator gen = detail::createNPUGenerator(self.device().index());
  {
    std::lock_guard<std::mutex> lock(gen.mutex());
    gen.set_current_seed(static_cast<uint64_t>(seed));
    gen.set_offset(static_cast<uint64_t>(offset));
  }
  const auto options = self.options().dtype(at::kFloat);
  at::Tensor keep = at::rand({bits}, gen, options).ge(p);
  // The bytes past those holding the elements are 0 (CANN's padding).
  const int64_t covered = (numel + 7) / 8 * 8;
  if (covered < bits) keep.narrow(0, covered, bits - covered).fill_(false);
  const at::Tensor weights =
      at::tensor({1, 2, 4, 8, 16, 32, 64, 128}, self.options().dtype(at::kByte).device(at::kCPU)).to(self.device());
  return keep.to(at::kByte).view({bits / 8, 8}).mul(weights).sum(1, false, at::kByte);
}

}  // namespace at_npu::native
