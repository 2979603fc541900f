// float32 -> float16 -> float32 in one pass. ATen's t.to(kHalf).to(kFloat) makes two tensors and two passes; this runs
// once per fp16 node output, so it is a measurable part of a force_fp16 model's time.
#include "model/precision.h"

#include <ATen/Parallel.h>
#include <c10/util/Half.h>

#include <set>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace softnpu::offline {

namespace {

void round_scalar(const float* src, float* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dst[i] = static_cast<float>(c10::Half(src[i]));
}

#if defined(__x86_64__)
// F16C (every x86-64 CPU since 2012) converts 8 values per instruction; the target attribute keeps the rest of the
// build at the baseline ISA, and the caller checks the CPU before taking this path.
__attribute__((target("avx,f16c"))) void round_f16c(const float* src, float* dst, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m128i h = _mm256_cvtps_ph(_mm256_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(h));
  }
  round_scalar(src + i, dst + i, n - i);
}

const bool kHasF16c = __builtin_cpu_supports("f16c") && __builtin_cpu_supports("avx");
#endif

void round_range(const float* src, float* dst, int64_t n) {
  // A grain of 64 Ki values: below it, waking the team costs more than the pass.
  at::parallel_for(0, n, 1 << 16, [&](int64_t b, int64_t e) {
#if defined(__x86_64__)
    if (kHasF16c) return round_f16c(src + b, dst + b, e - b);
#endif
    round_scalar(src + b, dst + b, e - b);
  });
}

}  // namespace

void round_to_half_(at::Tensor& t) {
  TORCH_CHECK(t.scalar_type() == at::kFloat, "round_to_half_ takes float32, got ", t.scalar_type());
  if (!t.is_non_overlapping_and_dense()) {
    t = round_to_half(t);
    return;
  }
  // Dense in any memory format: the storage span holds exactly the values.
  auto* p = t.data_ptr<float>();
  round_range(p, p, t.numel());
}

at::Tensor round_to_half(const at::Tensor& t) {
  TORCH_CHECK(t.scalar_type() == at::kFloat, "round_to_half takes float32, got ", t.scalar_type());
  auto src = t.is_non_overlapping_and_dense() ? t : t.contiguous();
  auto dst = at::empty_like(src);
  round_range(src.data_ptr<float>(), dst.data_ptr<float>(), src.numel());
  return dst;
}

bool keeps_half_values(const std::string& op_type) {
  // Not Pad: its constant value is a parameter, never rounded.
  static const std::set<std::string> ops = {
      "Identity", "Reshape", "Flatten", "Squeeze", "Unsqueeze", "Transpose", "Concat", "Split", "Slice", "Gather",
      "GatherElements", "GatherND", "Expand", "Tile", "Trilu", "DepthToSpace", "SpaceToDepth", "MaxPool",
      "GlobalMaxPool", "ReduceMax", "ReduceMin", "Max", "Min", "Relu", "Where"};
  return ops.count(op_type) > 0;
}

}  // namespace softnpu::offline
