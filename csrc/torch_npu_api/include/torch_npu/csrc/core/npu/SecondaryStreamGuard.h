// torch_npu's c10_npu::SecondaryStreamGuard: makes a second stream current for its lifetime (an NPUStreamGuard, as in
// torch_npu; the operators run on it are ordered with the first stream by the caller's events).
#pragma once

#include <c10/core/Stream.h>

#include "torch_npu/csrc/core/npu/NPUGuard.h"

namespace c10_npu {

struct SecondaryStreamGuard {
  explicit SecondaryStreamGuard() = delete;
  explicit SecondaryStreamGuard(c10::Stream stream) : guard_(stream) {}

 private:
  NPUStreamGuard guard_;
};

}  // namespace c10_npu
