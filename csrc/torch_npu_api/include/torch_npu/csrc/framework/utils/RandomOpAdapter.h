// torch_npu's RandomOpAdapter.h, which random operators' adapters include: the generator, event, secondary stream
// guard and caching allocator headers.
#pragma once

#include "torch_npu/csrc/aten/NPUGeneratorImpl.h"
#include "torch_npu/csrc/core/npu/NPUCachingAllocator.h"
#include "torch_npu/csrc/core/npu/NPUEvent.h"
#include "torch_npu/csrc/core/npu/SecondaryStreamGuard.h"
