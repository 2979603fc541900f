// torch_npu's FFT plan cache (torch.npu.backends.fft_plan_cache, CUDA's cufft_plan_cache): what the host prepares
// once per transform geometry. softnpu's FFT kernels are ATen's CPU ones (pocketfft or MKL, which set up their own
// twiddle tables); what a launch of _fft_c2c/_fft_r2c/_fft_c2r prepares on the host is its shape inference, kept per
// geometry (sizes, strides, dtype, dims, normalization, direction) in one cache the three ops share. size counts
// those plans, max_size bounds them (0 disables the cache: every FFT runs its Meta kernel), clear() empties it.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "backend/ops/meta_cache.h"

namespace softnpu {

// Whether the operator (its schema name, "aten::_fft_c2c") is one of the FFT ops whose plans this cache holds.
bool is_fft_op(const std::string& schema_name);

// The one cache of FFT plans (the shape-inference cache of the FFT ops).
std::shared_ptr<MetaCache> fft_plan_cache();

int64_t fft_plan_cache_size();
int64_t fft_plan_cache_max_size();
// Raises ValueError for a negative size, as torch_npu and CUDA.
void set_fft_plan_cache_max_size(int64_t max_size);
void clear_fft_plan_cache();

}  // namespace softnpu
