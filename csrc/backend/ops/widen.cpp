#include "backend/ops/widen.h"

#include <ATen/ops/from_blob.h>
#include <c10/util/strides.h>

#include <algorithm>
#include <cstdlib>
#include <memory>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "backend/ops/kernel.h"
#include "backend/ops/op_info.h"

namespace softnpu {

namespace {

class Scratch {
 public:
  void reset() { used_ = 0; }

  at::Tensor take(c10::IntArrayRef sizes, c10::IntArrayRef strides, int64_t numel, c10::ScalarType dtype) {
    const size_t bytes = static_cast<size_t>(std::max<int64_t>(numel, 1)) * c10::elementSize(dtype);
    if (used_ == blocks_.size()) blocks_.emplace_back();
    Block& b = blocks_[used_++];
    if (b.capacity < bytes) {
      const size_t capacity = (bytes + 63) / 64 * 64;
      b.data.reset(static_cast<char*>(std::aligned_alloc(64, capacity)));
      TORCH_CHECK(b.data, "out of host memory for a ", bytes, "-byte widened operand of a kernel");
      b.capacity = capacity;
    }
    return at::from_blob(b.data.get(), sizes, strides, at::TensorOptions().dtype(dtype));
  }

 private:
  struct Free {
    void operator()(char* p) const { std::free(p); }
  };
  struct Block {
    std::unique_ptr<char, Free> data;
    size_t capacity = 0;
  };
  std::vector<Block> blocks_;
  size_t used_ = 0;
};

Scratch& scratch() {
  thread_local Scratch s;
  return s;
}

// A copy of t in `dtype` with its layout: a broadcast (stride-0) dimension is converted once and expanded again, a
// dense tensor keeps its strides (a transposed weight stays transposed), anything else is made contiguous.
at::Tensor wide_copy(const at::Tensor& t, c10::ScalarType dtype) {
  if (!t.defined() || dtype == c10::ScalarType::Undefined) return t;
  if (t.dim() == 0 && t.unsafeGetTensorImpl()->is_wrapped_number()) return t;
  c10::SmallVector<int64_t, 6> sizes(t.sizes().begin(), t.sizes().end());
  bool broadcast = false;
  for (int64_t i = 0; i < t.dim(); ++i) {
    if (t.stride(i) == 0 && sizes[i] > 1) {
      sizes[i] = 1;
      broadcast = true;
    }
  }
  const at::Tensor src = broadcast ? t.as_strided(sizes, t.strides(), t.storage_offset()) : t;
  at::Tensor dst = src.is_non_overlapping_and_dense()
                       ? scratch().take(src.sizes(), src.strides(), src.numel(), dtype)
                       : scratch().take(src.sizes(), c10::contiguous_strides(src.sizes()), src.numel(), dtype);
  kernel_copy(dst, src);
  return broadcast ? dst.expand(t.sizes()) : dst;
}

constexpr uint64_t bit(c10::ScalarType t) { return uint64_t{1} << static_cast<int>(t); }
constexpr uint64_t kHalves = bit(c10::kHalf) | bit(c10::kBFloat16);
constexpr uint64_t kComplex32 = bit(c10::kComplexHalf);
constexpr uint64_t kIntegers =
    bit(c10::kByte) | bit(c10::kChar) | bit(c10::kShort) | bit(c10::kInt) | bit(c10::kLong);

// Each op with the dtypes its CUDA kernel takes and its CPU kernel lacks, from OpInfo's dtypesIfCUDA (the conformance
// suite runs every OpInfo in those dtypes, tests/conformance) and the backward ops of those with gradients. Names
// cover every overload and the in-place op (exp covers exp_). Left out: nansum and nanmean of complex tensors (no CPU kernel
// in any complex dtype to widen to), and the CUDA-only attention kernels (_flash_attention_forward, ...).
const std::unordered_map<std::string_view, uint64_t>& widened_ops() {
  static const std::unordered_map<std::string_view, uint64_t> ops = {
      // transformers' MoE layers count the tokens routed to each expert with histc on integer ids.
      {"aten::histc", kIntegers},
      {"aten::abs", bit(c10::kBool)},
      {"aten::trace", bit(c10::kBool) | kComplex32},
      // complex32 math: computed in complex64
      {"aten::acos", kComplex32},
      {"aten::acosh", kComplex32},
      {"aten::asin", kComplex32},
      {"aten::asinh", kComplex32},
      {"aten::atan", kComplex32},
      {"aten::atanh", kComplex32},
      {"aten::cos", kComplex32},
      {"aten::cosh", kComplex32},
      {"aten::sin", kComplex32},
      {"aten::sinh", kComplex32},
      {"aten::tan", kComplex32},
      {"aten::tanh", kComplex32},
      {"aten::exp", kComplex32},
      {"aten::log", kComplex32},
      {"aten::sqrt", kComplex32},
      {"aten::rsqrt", kComplex32},
      {"aten::sigmoid", kComplex32},
      {"aten::sigmoid_backward", kComplex32},
      {"aten::tanh_backward", kComplex32},
      {"aten::cumprod", kComplex32},
      {"aten::flip", kComplex32},
      {"aten::cumsum", kComplex32},
      {"aten::angle", kComplex32},
      {"aten::div", kComplex32},
      {"aten::pow", kComplex32},
      {"aten::logaddexp", kComplex32},
      {"aten::lerp", kComplex32},
      {"aten::sum", kComplex32},
      {"aten::prod", kComplex32},
      // float16 FFTs (cuFFT's) and their complex32 spectra
      {"aten::_fft_r2c", kHalves},
      {"aten::_fft_c2r", kComplex32},
      {"aten::_fft_c2c", kComplex32},
      // float16/bfloat16 kernels the CPU lacks, and their backwards
      {"aten::avg_pool3d", kHalves},
      {"aten::avg_pool3d_backward", kHalves},
      {"aten::multi_margin_loss", kHalves},
      {"aten::multi_margin_loss_backward", kHalves},
      {"aten::multilabel_margin_loss_forward", kHalves},
      {"aten::multilabel_margin_loss_backward", kHalves},
      {"aten::_upsample_bilinear2d_aa", kHalves},
      {"aten::_upsample_bilinear2d_aa_backward", kHalves},
      {"aten::rrelu_with_noise", bit(c10::kHalf)},
      // Not a missing CPU dtype: Ascend's kernel computes it in float32 and rounds once (ops/composites.cpp).
      {"aten::binary_cross_entropy_with_logits", kHalves},
  };
  return ops;
}

}  // namespace

void scratch_reset() { scratch().reset(); }

at::Tensor scratch_tensor(c10::IntArrayRef sizes, c10::IntArrayRef strides, int64_t numel, c10::ScalarType dtype) {
  return scratch().take(sizes, strides, numel, dtype);
}

WideOperands::WideOperands(torch::jit::Stack& stack, const KernelLaunch& k,
                           c10::function_ref<c10::ScalarType(c10::ScalarType)> target, const std::vector<int>* only) {
  scratch().reset();
  auto widen = [&](const at::Tensor& t) { return t.defined() ? wide_copy(t, target(t.scalar_type())) : t; };
  const auto& written_args = k.info->written_args;
  for (int i : k.info->dtype_args) {
    c10::IValue& v = stack[i];
    if (!v.isInt()) continue;
    const c10::ScalarType wide = target(static_cast<c10::ScalarType>(v.toInt()));
    if (wide != c10::ScalarType::Undefined) v = c10::IValue(wide);
  }
  for (const TensorSlot& slot : k.argument_slots) {
    if (only && std::find(only->begin(), only->end(), static_cast<int>(slot.position)) == only->end()) continue;
    c10::IValue& v = stack[slot.position];
    const bool written =
        std::find(written_args.begin(), written_args.end(), static_cast<int>(slot.position)) != written_args.end();
    if (v.isTensor()) {
      at::Tensor t = v.toTensor();
      at::Tensor w = widen(t);
      if (written && !w.is_same(t)) written_.emplace_back(t, w);
      v = std::move(w);
    } else if (v.isTensorList()) {
      c10::List<at::Tensor> list;
      for (const at::Tensor& t : v.toTensorList()) list.push_back(widen(t));
      v = std::move(list);
    } else {
      c10::List<std::optional<at::Tensor>> list;
      for (const c10::IValue& e : v.toListRef())
        list.push_back(e.isTensor() ? std::optional<at::Tensor>(widen(e.toTensor())) : std::nullopt);
      v = std::move(list);
    }
  }
}

void WideOperands::write_back() {
  for (auto& [device, copy] : written_) kernel_copy(device, copy);
}

uint64_t widened_dtypes(const std::string& name) {
  std::string_view op(name);
  auto it = widened_ops().find(op);
  if (it == widened_ops().end() && op.size() > 1 && op.back() == '_') it = widened_ops().find(op.substr(0, op.size() - 1));
  return it == widened_ops().end() ? 0 : it->second;
}

c10::ScalarType wider_dtype(uint64_t mask, c10::ScalarType dtype) {
  if (!in_mask(mask, dtype)) return c10::ScalarType::Undefined;
  if (dtype == c10::kHalf || dtype == c10::kBFloat16) return c10::kFloat;
  if (dtype == c10::kComplexHalf) return c10::kComplexFloat;
  if (dtype == c10::kBool) return c10::kByte;
  return c10::kDouble;  // integers (histc): exact below 2^53
}

bool runs_widened(const KernelLaunch& k) {
  for (const TensorRef& r : k.refs)
    if (r.kind == TensorRef::Kind::kDevice && in_mask(k.info->widened_dtypes, r.dtype)) return true;
  return false;
}

void narrow_returns(torch::jit::Stack& returns, const KernelLaunch& k) {
  const uint64_t mask = k.info->widened_dtypes;
  c10::ScalarType narrow = c10::ScalarType::Undefined;
  for (const TensorRef& r : k.refs) {
    if (r.kind == TensorRef::Kind::kDevice && in_mask(mask, r.dtype)) {
      narrow = r.dtype;
      break;
    }
  }
  const c10::ScalarType wide = wider_dtype(mask, narrow);
  auto back = [&](const at::Tensor& t) { return t.defined() && t.scalar_type() == wide ? t.to(narrow) : t; };
  for (c10::IValue& v : returns) {
    if (v.isTensor()) {
      v = back(v.toTensor());
    } else if (v.isTensorList()) {
      c10::List<at::Tensor> list;
      for (const at::Tensor& t : v.toTensorList()) list.push_back(back(t));
      v = std::move(list);
    }
  }
}

}  // namespace softnpu
