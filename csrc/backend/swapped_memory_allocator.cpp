#include "backend/swapped_memory_allocator.h"

#include <ATen/Context.h>
#include <ATen/EmptyTensor.h>
#include <ATen/native/TensorFactories.h>
#include <ATen/ops/empty.h>
#include <c10/core/DeviceGuard.h>
#include <c10/util/Exception.h>
#include <torch/library.h>

#include "backend/device.h"
#include "backend/error_code.h"
#include "backend/npu_error.h"
#include "softnpu/runtime.h"

TORCH_LIBRARY_FRAGMENT(npu, m) {
  m.def("empty_with_swapped_memory(int[] size, *, ScalarType? dtype=None, Device? device=None) -> Tensor");
}

namespace softnpu {

namespace {

// The runtime's free waits for the device's queued work first, which may still use the memory.
void free_swapped(void* ptr) {
  if (snpuFreeHost(ptr) != snpuSuccess)
    TORCH_WARN("freeing swapped memory at ", ptr, " failed: ", snpuGetLastErrorMessage());
}

class SwappedMemoryAllocator final : public c10::Allocator {
 public:
  c10::DataPtr allocate(size_t nbytes) override {
    const c10::DeviceIndex device = current_device();
    void* host = nullptr;
    void* mapped = nullptr;
    if (nbytes > 0) {
      NPU_CHECK(snpuHostAlloc(&host, nbytes, snpuHostAllocMapped));
      NPU_CHECK(snpuHostGetDevicePointer(&mapped, host, 0));
    }
    return {mapped, mapped, &free_swapped, c10::Device(c10::DeviceType::PrivateUse1, device)};
  }

  c10::DeleterFnPtr raw_deleter() const override { return &free_swapped; }

  void copy_data(void* dest, const void* src, std::size_t count) const override {
    NPU_CHECK(snpuMemcpy(dest, src, count, snpuMemcpyDeviceToDevice));
  }
};

// As torch_npu's: an npu tensor in swapped memory, on the current device unless `device` is given; NaN / the maximum
// under torch.utils.deterministic.fill_uninitialized_memory, as every factory. On the meta device (tracing,
// torch.compile's fake tensors) an empty meta tensor, so graphs can hold the call.
at::Tensor empty_with_swapped_memory(at::IntArrayRef size, std::optional<at::ScalarType> dtype,
                                     std::optional<at::Device> device) {
  const at::Device where = device.value_or(at::Device(c10::DeviceType::PrivateUse1, current_device()));
  if (where.is_meta()) return at::empty(size, at::TensorOptions().dtype(dtype).device(where));
  TORCH_CHECK(where.is_privateuseone(),
              "Expected NPU tensor, please check whether the input tensor device is correct.",
              error_code(SubModule::PTA, ErrCode::PARAM));
  const c10::DeviceGuard guard(where);
  at::Tensor t = at::detail::empty_generic(size, swapped_memory_allocator(),
                                           c10::DispatchKeySet(c10::DispatchKey::PrivateUse1),
                                           c10::dtype_or_default(dtype), c10::MemoryFormat::Contiguous);
  const auto& ctx = at::globalContext();
  if (C10_UNLIKELY(ctx.deterministicAlgorithms() && ctx.deterministicFillUninitializedMemory()))
    at::native::fill_empty_deterministic_(t);
  return t;
}

}  // namespace

c10::Allocator* swapped_memory_allocator() {
  static SwappedMemoryAllocator allocator;
  return &allocator;
}

TORCH_LIBRARY_IMPL(npu, CompositeExplicitAutograd, m) {
  m.impl("empty_with_swapped_memory", empty_with_swapped_memory);
}

}  // namespace softnpu
