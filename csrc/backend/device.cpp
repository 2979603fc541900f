#include "backend/device.h"

#include <c10/util/Exception.h>

#include <atomic>

#include "backend/error_code.h"
#include "backend/npu_error.h"

namespace softnpu {

namespace {
// The count cannot change within a process once the runtime is up; cached from then on so the hot paths that
// validate device indices do not call into the runtime. Before, counting does not start the runtime (runtime.h) and
// follows the environment, as CUDA_VISIBLE_DEVICES set before CUDA's initialization does.
std::atomic<int> g_count{-1};
}  // namespace

c10::DeviceIndex device_count() {
  int n = g_count.load(std::memory_order_relaxed);
  if (n < 0) {
    NPU_CHECK(snpuGetDeviceCount(&n));
    if (snpuIsInitialized()) g_count.store(n, std::memory_order_relaxed);
  }
  return static_cast<c10::DeviceIndex>(n);
}

void init_runtime() {
  NPU_CHECK(snpuInit());
  device_count();
}

c10::DeviceIndex device_count_noexcept() noexcept {
  try {
    return device_count();
  } catch (const c10::Error& e) {
    TORCH_WARN_ONCE("NPU unavailable: ", e.what_without_backtrace());
    return 0;
  }
}

bool in_bad_fork() noexcept { return snpuIsForkedChild() != 0; }

void check_not_in_bad_fork() {
  if (C10_UNLIKELY(in_bad_fork())) throw_npu_error(snpuErrorForked, "check_not_in_bad_fork");
}

void check_device_index(c10::DeviceIndex device) {
  const auto n = device_count();
  TORCH_CHECK(device >= 0 && device < n, "Invalid device index npu:", static_cast<int>(device), ": ", static_cast<int>(n),
              " NPU device", n == 1 ? "" : "s", " visible (see ASCEND_RT_VISIBLE_DEVICES and SOFTNPU_DEVICE_COUNT)",
              error_code(SubModule::PTA, ErrCode::PARAM));
}

c10::DeviceIndex current_device() {
  int d = 0;
  NPU_CHECK(snpuGetDevice(&d));
  return static_cast<c10::DeviceIndex>(d);
}

void set_device(c10::DeviceIndex device) {
  check_device_index(device);
  NPU_CHECK(snpuSetDevice(device));
}

c10::DeviceIndex exchange_device(c10::DeviceIndex device) {
  const auto prev = current_device();
  if (device != prev) set_device(device);
  return prev;
}

}  // namespace softnpu
