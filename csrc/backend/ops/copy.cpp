// Tensor.copy_ and .to() across npu and the host: ATen's copy_ hands every copy that involves an npu tensor to
// _copy_from. Dense tensors of the same layout move with one runtime memcpy; everything else (dtype conversion,
// strided views, broadcasting, conj/neg bits) is a copy_ kernel on the device, so conversions never make the host
// wait, as CUDA's copy does. Host-to-device from pinned memory with non_blocking=True is asynchronous; from pageable
// memory it completes before returning. Device-to-host completes before returning unless the destination is pinned
// and non_blocking=True.
#include <ATen/ExpandUtils.h>
#include <ATen/MemoryOverlap.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/empty_strided.h>
#include <c10/core/DeviceGuard.h>
#include <torch/library.h>

#include "backend/allocator.h"
#include "backend/gpu_trace.h"
#include "backend/host_allocator.h"
#include "backend/npu_error.h"
#include "backend/ops/executor.h"
#include "backend/recovery.h"
#include "backend/stream.h"
#include "backend/sync_debug.h"

namespace softnpu {

namespace {

bool is_pinned(const at::Tensor& t) {
  snpuPointerAttributes attr{};
  return t.storage().data() && snpuPointerGetAttributes(&attr, t.storage().data()) == snpuSuccess &&
         attr.type == snpuMemoryTypeHost;
}

bool plain(const at::Tensor& t) { return !t.is_conj() && !t.is_neg(); }

// One memcpy moves the data: same dtype and strides, no bits to apply, and every byte between the first and the
// last element belongs to the tensor.
bool memcpy_compatible(const at::Tensor& a, const at::Tensor& b) {
  return a.scalar_type() == b.scalar_type() && a.sizes() == b.sizes() && a.strides() == b.strides() && plain(a) &&
         plain(b) && a.is_non_overlapping_and_dense();
}

// A dense npu tensor with the given layout, for staging.
at::Tensor empty_like_layout(const at::Tensor& like, c10::ScalarType dtype, c10::Device device) {
  if (like.is_non_overlapping_and_dense())
    return at::empty_strided(like.sizes(), like.strides(), like.options().dtype(dtype).device(device));
  return at::empty(like.sizes(), like.options().dtype(dtype).device(device));
}

// dst.copy_(src) as a kernel on dst's device (both npu, same device).
void device_copy_kernel(const at::Tensor& dst, const at::Tensor& src) {
  static const auto op = c10::Dispatcher::singleton().findSchemaOrThrow("aten::copy_", "");
  torch::jit::Stack stack{dst, src, false};
  execute_op(op, &stack);
}

void memcpy_on(const NPUStream& stream, void* dst, const void* src, size_t bytes, snpuMemcpyKind kind) {
  if (bytes > 0) NPU_CHECK(snpuMemcpyAsync(dst, src, bytes, kind, stream.handle()));
}

void copy_device_to_device(const at::Tensor& dst, const at::Tensor& src) {
  if (dst.device() == src.device()) {
    const c10::DeviceGuard guard(dst.device());
    if (memcpy_compatible(dst, src)) {
      if (dst.data_ptr() == src.data_ptr()) return;
      at::assert_no_partial_overlap(dst, src);
      memcpy_on(getCurrentNPUStream(), dst.data_ptr(), src.data_ptr(), dst.nbytes(), snpuMemcpyDeviceToDevice);
    } else {
      device_copy_kernel(dst, src);
    }
    return;
  }
  // Across devices: give src the destination's dtype and layout on its own device, move the bytes on the
  // destination's stream ordered after the source stream's work, and keep the source stream from reusing src's
  // memory before the move is done.
  at::Tensor staged = src;
  if (!memcpy_compatible(dst, src) || !dst.is_non_overlapping_and_dense()) {
    const c10::DeviceGuard guard(src.device());
    staged = empty_like_layout(dst, dst.scalar_type(), src.device());
    device_copy_kernel(staged, src);
  }
  at::Tensor landing = memcpy_compatible(dst, staged) ? dst : empty_like_layout(staged, dst.scalar_type(), dst.device());
  const NPUStream src_stream = getCurrentNPUStream(src.device().index());
  const NPUStream dst_stream = getCurrentNPUStream(dst.device().index());
  snpuEvent_t ready = nullptr, done = nullptr;
  NPU_CHECK(snpuEventCreate(&ready, snpuEventDisableTiming));
  NPU_CHECK(snpuEventCreate(&done, snpuEventDisableTiming));
  NPU_CHECK(snpuEventRecord(ready, src_stream.handle()));
  NPU_CHECK(snpuStreamWaitEvent(dst_stream.handle(), ready));
  memcpy_on(dst_stream, landing.data_ptr(), staged.data_ptr(), landing.nbytes(), snpuMemcpyDeviceToDevice);
  NPU_CHECK(snpuEventRecord(done, dst_stream.handle()));
  NPU_CHECK(snpuStreamWaitEvent(src_stream.handle(), done));
  // The sanitizer sees this copy as one op on the destination's stream, ordered with the source's both ways.
  gpu_trace::event_record(ready, src_stream);
  gpu_trace::event_wait(ready, dst_stream);
  gpu_trace::event_record(done, dst_stream);
  gpu_trace::event_wait(done, src_stream);
  snpuEventDestroy(ready);
  snpuEventDestroy(done);
  if (!landing.is_same(dst)) {
    const c10::DeviceGuard guard(dst.device());
    device_copy_kernel(dst, landing);
  }
}

void copy_host_to_device(const at::Tensor& dst, const at::Tensor& src, bool non_blocking) {
  const c10::DeviceGuard guard(dst.device());
  const NPUStream stream = getCurrentNPUStream();
  // The bytes cross as they are (dense source), converted on the device if needed.
  const at::Tensor host = src.is_non_overlapping_and_dense() ? src : src.contiguous();
  const at::Tensor landing = memcpy_compatible(dst, host) ? dst : empty_like_layout(host, host.scalar_type(), dst.device());
  const bool pinned = is_pinned(host);
  if (!(pinned && non_blocking)) check_sync_debug("aten::copy_ (host to device, blocking or from pageable memory)");
  // The wait for the work queued before the copy is the one Ctrl-C may interrupt: once the copy is queued, the host
  // waits for it to the end.
  if (pinned && !non_blocking) stream.synchronize();
  memcpy_on(stream, landing.data_ptr(), host.data_ptr(), host.nbytes(), snpuMemcpyHostToDevice);
  if (pinned) {
    if (non_blocking) {
      record_pinned_use(host.storage().data_ptr(), stream);
    } else {
      stream.synchronize_uninterruptibly();
    }
  }
  if (!landing.is_same(dst)) device_copy_kernel(dst, landing);
}

void copy_device_to_host(const at::Tensor& dst, const at::Tensor& src, bool non_blocking) {
  const c10::DeviceGuard guard(src.device());
  const NPUStream stream = getCurrentNPUStream();
  // Converted on the device to the destination's dtype and layout, so the bytes land directly in dst.
  at::Tensor staged = src;
  if (!memcpy_compatible(dst, src) && dst.is_non_overlapping_and_dense()) {
    staged = empty_like_layout(dst, dst.scalar_type(), src.device());
    device_copy_kernel(staged, src);
  } else if (!src.is_non_overlapping_and_dense() || !plain(src)) {
    staged = empty_like_layout(src, src.scalar_type(), src.device());
    device_copy_kernel(staged, src);
  }
  const bool direct = memcpy_compatible(dst, staged);
  const at::Tensor host = direct ? dst : at::empty_strided(staged.sizes(), staged.strides(), staged.options().device(c10::kCPU));
  const bool pinned = is_pinned(host);
  // Interruptible up to the copy (see copy_host_to_device); a copy into pageable memory waits inside the runtime.
  if (!(pinned && non_blocking && direct)) {
    check_sync_debug("aten::copy_ (device to host)");
    stream.synchronize();
  }
  memcpy_on(stream, host.data_ptr(), staged.data_ptr(), host.nbytes(), snpuMemcpyDeviceToHost);
  if (pinned) {
    if (non_blocking && direct) {
      record_pinned_use(host.storage().data_ptr(), stream);
      return;
    }
    stream.synchronize_uninterruptibly();
  }
  if (!direct) dst.copy_(host);
}

at::Tensor copy_from(const at::Tensor& self, const at::Tensor& dst, bool non_blocking) {
  if (C10_UNLIKELY(recovery::any_unsafe())) {
    // torch_npu's check_and_update_npu_tensor_for_copy: a copy reads its source and rebuilds its destination.
    recovery::check_safe(self);
    if (dst.is_privateuseone() && dst.has_storage()) recovery::mark_safe(dst.storage().data());
  }
  at::Tensor src = self;
  if (self.sizes() != dst.sizes()) {
    // The CPU's broadcast check and messages, before anything is skipped (an empty dst is no licence for any src).
    const auto shape = at::infer_size_dimvector(dst.sizes(), self.sizes());
    TORCH_CHECK(c10::IntArrayRef(shape) == dst.sizes(), "output with shape ", dst.sizes(),
                " doesn't match the broadcast shape ", c10::IntArrayRef(shape));
    src = self.expand_as(dst);
  }
  if (dst.numel() == 0) return dst;
  const bool src_npu = src.device().is_privateuseone();
  const bool dst_npu = dst.device().is_privateuseone();
  if (src_npu && dst_npu) {
    copy_device_to_device(dst, src);
  } else if (dst_npu) {
    TORCH_CHECK(src.device().is_cpu(), "Copying from ", src.device(), " to npu is not supported");
    copy_host_to_device(dst, src, non_blocking);
  } else {
    TORCH_CHECK(dst.device().is_cpu(), "Copying from npu to ", dst.device(), " is not supported");
    copy_device_to_host(dst, src, non_blocking);
  }
  return dst;
}

at::Tensor copy_from_and_resize(const at::Tensor& self, const at::Tensor& dst) {
  dst.resize_(self.sizes());
  return copy_from(self, dst, false);
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("_copy_from", copy_from);
  m.impl("_copy_from_and_resize", copy_from_and_resize);
}

// _copy_from applies conj/neg bits itself (in the copy_ kernel). Without these fallthroughs the Conjugate and
// Negative fallbacks would materialize the source with clone(), which copies through _copy_from again, forever.
TORCH_LIBRARY_IMPL(aten, Conjugate, m) {
  m.impl("_copy_from", torch::CppFunction::makeFallthrough());
  m.impl("_copy_from_and_resize", torch::CppFunction::makeFallthrough());
}

TORCH_LIBRARY_IMPL(aten, Negative, m) {
  m.impl("_copy_from", torch::CppFunction::makeFallthrough());
  m.impl("_copy_from_and_resize", torch::CppFunction::makeFallthrough());
}

}  // namespace softnpu
