#include "backend/ops/cube.h"

#include <ATen/cpu/Utils.h>
#include <c10/util/strides.h>
#if defined(__x86_64__)
#include <cpuid.h>
#endif

#include <algorithm>
#include <limits>
#include <optional>
#include <string_view>
#include <unordered_map>

#include "backend/env.h"
#include "common/kernel_threads.h"
#include "backend/ops/kernel.h"
#include "backend/ops/op_info.h"
#include "backend/ops/widen.h"

// MKL's half-precision GEMM (LP64, row- or column-major, float16 operands, float32 accumulation and result). Weak:
// libtorch_cpu exports it only when built with MKL; elsewhere the address is null and the convert route runs.
extern "C" void cblas_gemm_f16f16f32(int layout, int transa, int transb, int m, int n, int k, float alpha,
                                     const void* a, int lda, const void* b, int ldb, float beta, float* c, int ldc)
    __attribute__((weak));

namespace softnpu {

namespace {

constexpr unsigned kHalfOnly = 1, kBFloat16Only = 2, kBoth = kHalfOnly | kBFloat16Only;
// float16 takes the float32 route even where the host has float16 units (unless SOFTNPU_HALF_COMPUTE=native).
constexpr unsigned kHalfOnEveryHost = 4;
// Both half dtypes take the float32 route on every host and under every SOFTNPU_HALF_COMPUTE, with operands of mixed
// floating dtypes: not for speed but for the op's contract (float32_contract_ops below).
constexpr unsigned kFloat32Contract = 8;

// The ops that take the float32 route, with the dtypes it serves. First the matrix and convolution family as it
// reaches the device (linear, matmul, einsum and the attention math are composites over these); then the few other
// ops whose half-precision CPU kernel is far slower than float32 on a host without native units (measured there: the
// rest are within about 2x, most faster than float32). Names cover every overload: functional, in-place and out=.
const std::unordered_map<std::string_view, unsigned>& float32_ops() {
  static const std::unordered_map<std::string_view, unsigned> ops = {
      {"aten::mm", kBoth},
      {"aten::addmm", kBoth},
      {"aten::addmm_", kBoth},
      {"aten::_addmm_activation", kBoth},
      {"aten::bmm", kBoth},
      {"aten::baddbmm", kBoth},
      {"aten::baddbmm_", kBoth},
      {"aten::addbmm", kBoth},
      {"aten::addbmm_", kBoth},
      {"aten::mv", kBoth},
      {"aten::addmv", kBoth},
      {"aten::addmv_", kBoth},
      {"aten::dot", kBoth},
      {"aten::vdot", kBoth},
      {"aten::convolution", kBoth},
      // oneDNN's float16 convolution backward has no fast kernel even on an AVX512-FP16 host: 6.5 s for a
      // 64x32x32x32 batch with 64 3x3 filters on CPU, where float32 takes milliseconds (an AMP float16 CNN training
      // step: 48x float32's, 0.92x on the float32 route).
      {"aten::convolution_backward", kBoth | kHalfOnEveryHost},
      {"aten::_scaled_dot_product_flash_attention_for_cpu", kBoth},
      {"aten::_scaled_dot_product_flash_attention_for_cpu_backward", kBoth},
      // Elementwise ops and reductions whose half-precision kernel is far slower than float32 (measured on npu,
      // 2 threads, no AVX512-FP16/BF16; the float32 route's figures in brackets): tanh 4.5x (2.6x) in both dtypes;
      // pow 5.8x (2.4x) and norm 4.7x (3.3x) in float16 only, bfloat16 being faster than float32 there. The rest
      // measured (elementwise, softmax, norms, embedding, pooling, losses, their backwards) are within about 2x,
      // most faster than float32, where converting would only add traffic.
      {"aten::tanh", kBoth},
      {"aten::tanh_", kBoth},
      {"aten::pow", kHalfOnly},
      {"aten::pow_", kHalfOnly},
      {"aten::norm", kHalfOnly},
      {"aten::linalg_vector_norm", kHalfOnly},
      // The normalizations whose saved statistics are float32 for float16/bfloat16 inputs on npu, as in CUDA's
      // kernels and ATen's Meta kernels (which size npu's outputs), where the CPU kernels keep them in the input
      // dtype and their backward refuses float32 ones. Forward and backward compute in float32, so the statistics
      // are float32 values (not half values widened) and the backward takes them; the results are rounded once.
      // tests/test_meta_contract.py finds every op whose Meta and CPU kernels disagree and checks it is decided here
      // or in ops/meta_fixes.cpp.
      {"aten::native_layer_norm", kFloat32Contract},
      {"aten::native_layer_norm_backward", kFloat32Contract},
      {"aten::native_batch_norm", kFloat32Contract},
      {"aten::native_batch_norm_backward", kFloat32Contract},
      {"aten::_native_batch_norm_legit", kFloat32Contract},
      {"aten::_native_batch_norm_legit_functional", kFloat32Contract},
      {"aten::_native_batch_norm_legit_no_training", kFloat32Contract},
      {"aten::_batch_norm_with_update", kFloat32Contract},
      {"aten::_batch_norm_with_update_functional", kFloat32Contract},
      {"aten::_batch_norm_no_update", kFloat32Contract},
      {"aten::batch_norm_backward", kFloat32Contract},
  };
  return ops;
}

struct Policy {
  CubeCompute half = CubeCompute::kNative;
  CubeCompute bfloat16 = CubeCompute::kNative;
  std::string why_half, why_bfloat16;
  bool mkl_half_gemm = false;  // float16 GEMMs on the float32 route through cblas_gemm_f16f16f32 (run_half_gemm)
  bool half_on_every_host = true;  // kHalfOnEveryHost ops convert float16 (not when SOFTNPU_HALF_COMPUTE=native)
};

// MKL's half-precision GEMM pays only where MKL dispatches its tuned kernels, on Intel CPUs: there it runs at sgemm's
// speed (Xeon, 2 threads), while on an AMD EPYC (Zen 5) it took 1.4x sgemm at 256x1024x1024 and 2x at 128x64x128,
// where converting the operands first costs 3 %.
bool intel_host() {
#if defined(__x86_64__)
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  if (!__get_cpuid(0, &eax, &ebx, &ecx, &edx)) return false;
  return ebx == 0x756e6547 && edx == 0x49656e69 && ecx == 0x6c65746e;  // "GenuineIntel"
#else
  return false;
#endif
}

bool capability(const std::unordered_map<std::string, c10::IValue>& caps, const char* name) {
  auto it = caps.find(name);
  return it != caps.end() && it->second.isBool() && it->second.toBool();
}

// The first of `flags` the host has, or "" when it has none.
std::string first_present(const std::unordered_map<std::string, c10::IValue>& caps,
                          std::initializer_list<const char*> flags) {
  for (const char* f : flags)
    if (capability(caps, f)) return f;
  return "";
}

const Policy& policy() {
  static const Policy p = [] {
    Policy p;
    p.mkl_half_gemm = cblas_gemm_f16f16f32 && intel_host();
    const HalfCompute forced = half_compute();
    p.half_on_every_host = forced != HalfCompute::kNative;
    if (forced != HalfCompute::kAuto) {
      const CubeCompute c = forced == HalfCompute::kNative ? CubeCompute::kNative : CubeCompute::kFloat32;
      p.half = p.bfloat16 = c;
      p.why_half = p.why_bfloat16 = std::string("SOFTNPU_HALF_COMPUTE=") +
                                    (forced == HalfCompute::kNative ? "native" : "float32");
      return p;
    }
    const auto caps = at::cpu::get_cpu_capabilities();
    auto decide = [&](CubeCompute* c, std::string* why, std::initializer_list<const char*> flags,
                      const char* names) {
      const std::string unit = first_present(caps, flags);
      *c = unit.empty() ? CubeCompute::kFloat32 : CubeCompute::kNative;
      *why = unit.empty() ? std::string("the host has no ") + names : "the host has " + unit;
    };
    decide(&p.half, &p.why_half, {"amx_fp16", "avx512_fp16"}, "avx512_fp16 or amx_fp16");
    decide(&p.bfloat16, &p.why_bfloat16, {"amx_bf16", "avx512_bf16"}, "avx512_bf16 or amx_bf16");
    return p;
  }();
  return p;
}

bool converts(c10::ScalarType dtype, unsigned dtypes) {
  if (dtypes & kFloat32Contract) return dtype == c10::kHalf || dtype == c10::kBFloat16;
  if (dtype == c10::kHalf && (dtypes & kHalfOnEveryHost) && policy().half_on_every_host) return true;
  const unsigned bit = dtype == c10::kHalf ? kHalfOnly : dtype == c10::kBFloat16 ? kBFloat16Only : 0;
  return (dtypes & bit) && cube_compute(dtype) == CubeCompute::kFloat32;
}

}  // namespace

CubeCompute cube_compute(c10::ScalarType dtype) {
  if (dtype == c10::kHalf) return policy().half;
  if (dtype == c10::kBFloat16) return policy().bfloat16;
  return CubeCompute::kNative;
}

std::string cube_description() {
  const Policy& p = policy();
  auto line = [](const char* dtype, CubeCompute c, const std::string& why) {
    return std::string(dtype) + ": " +
           (c == CubeCompute::kNative ? "ATen's kernel in " + std::string(dtype) : std::string("float32 compute")) +
           " (" + why + ")";
  };
  std::string half = line("float16", p.half, p.why_half);
  if (p.half == CubeCompute::kFloat32 && p.mkl_half_gemm)
    half += "; mm, addmm, bmm and baddbmm through MKL's cblas_gemm_f16f16f32";
  if (p.half == CubeCompute::kNative && p.half_on_every_host)
    half += "; convolution_backward in float32 compute";
  return half + "\n" + line("bfloat16", p.bfloat16, p.why_bfloat16);
}

unsigned float32_dtypes(const std::string& name) {
  auto it = float32_ops().find(name);
  return it == float32_ops().end() ? 0 : it->second;
}

bool float32_contract(unsigned float32_dtypes) { return float32_dtypes & kFloat32Contract; }

bool is_float32_contract_parameter(const std::string& argument) {
  return argument == "weight" || argument == "bias" || argument == "running_mean" || argument == "running_var";
}

const std::vector<int>* float32_contract_operands(const KernelLaunch& k) {
  // An out= overload's statistics are the caller's tensors, in the input dtype: every operand widens. Without a
  // weight, the CPU kernels decide the mixed-precision path each by other arguments (layer_norm's backward by the
  // weight alone): every operand widens too.
  if (!k.info->out_args.empty() || k.info->contract_weight < 0) return nullptr;
  for (const TensorSlot& slot : k.argument_slots) {
    if (static_cast<int>(slot.position) == k.info->contract_weight)
      return k.refs[slot.first].kind == TensorRef::Kind::kDevice ? &k.info->contract_args : nullptr;
  }
  return nullptr;
}

CubeGemm cube_gemm(const c10::FunctionSchema& schema) {
  if (!schema.overload_name().empty()) return CubeGemm::kNone;
  const std::string& name = schema.name();
  if (name == "aten::mm") return CubeGemm::kMm;
  if (name == "aten::addmm") return CubeGemm::kAddmm;
  if (name == "aten::bmm") return CubeGemm::kBmm;
  if (name == "aten::baddbmm") return CubeGemm::kBaddbmm;
  return CubeGemm::kNone;
}

bool runs_in_float32(const KernelLaunch& k) {
  // A synchronizing launch hands its returns to the host, which must not see scratch memory.
  if (k.sync) return false;
  const unsigned dtypes = k.info->float32_dtypes;
  // Inputs of one floating dtype only: with mixed ones (conv1d of a float16 input and a float32 weight) the CPU
  // kernel's own dtype checks decide, which converting every operand to float32 would skip. A contract op mixes them
  // by design (the backward of a half layer_norm takes float32 statistics).
  if (!(dtypes & kFloat32Contract)) {
    c10::ScalarType floating = c10::ScalarType::Undefined;
    for (const TensorSlot& slot : k.argument_slots) {
      for (uint32_t i = slot.first; i < slot.first + slot.count; ++i) {
        const TensorRef& r = k.refs[i];
        if (r.kind != TensorRef::Kind::kDevice || !c10::isFloatingType(r.dtype)) continue;
        if (floating != c10::ScalarType::Undefined && r.dtype != floating) return false;
        floating = r.dtype;
      }
    }
  }
  for (const TensorRef& r : k.refs)
    if (r.kind == TensorRef::Kind::kDevice && converts(r.dtype, dtypes)) return true;
  return false;
}

namespace {

// A matrix (the last two dimensions of t) as BLAS addresses it in row-major order: transposed or not, and its leading
// dimension; nullopt when neither its rows nor its columns are contiguous, or a stride exceeds BLAS's int.
struct BlasMatrix {
  int trans;  // CblasNoTrans 111 or CblasTrans 112
  int ld;
};

std::optional<BlasMatrix> blas_matrix(const at::Tensor& t) {
  const int64_t rows = t.size(-2), cols = t.size(-1);
  const int64_t row_stride = t.stride(-2), col_stride = t.stride(-1);
  constexpr int64_t kMax = std::numeric_limits<int>::max();
  if ((col_stride == 1 || cols == 1) && (rows == 1 || row_stride >= cols) && row_stride <= kMax)
    return BlasMatrix{111, static_cast<int>(rows == 1 ? cols : row_stride)};
  if ((row_stride == 1 || rows == 1) && (cols == 1 || col_stride >= rows) && col_stride <= kMax)
    return BlasMatrix{112, static_cast<int>(cols == 1 ? rows : col_stride)};
  return std::nullopt;
}

}  // namespace

bool run_half_gemm(const torch::jit::Stack& stack, const KernelLaunch& k, const std::vector<c10::IValue>& outputs) {
  const CubeGemm gemm = k.info->cube_gemm;
  if (gemm == CubeGemm::kNone || !policy().mkl_half_gemm || outputs.size() != 1) return false;
  const bool bias = gemm == CubeGemm::kAddmm || gemm == CubeGemm::kBaddbmm;
  const at::Tensor& a = stack[bias ? 1 : 0].toTensor();
  const at::Tensor& b = stack[bias ? 2 : 1].toTensor();
  const at::Tensor& out = outputs[0].toTensor();
  if (a.scalar_type() != c10::kHalf || b.scalar_type() != c10::kHalf || out.scalar_type() != c10::kHalf) return false;
  const int64_t m = a.size(-2), kk = a.size(-1), n = b.size(-1);
  constexpr int64_t kMax = std::numeric_limits<int>::max();
  if (m == 0 || n == 0 || kk == 0 || m > kMax || n > kMax || kk > kMax) return false;
  const auto ma = blas_matrix(a), mb = blas_matrix(b);
  if (!ma || !mb) return false;
  const float beta = bias ? stack[3].toScalar().to<float>() : 0.f;
  const float alpha = bias ? stack[4].toScalar().to<float>() : 1.f;
  scratch_reset();
  at::Tensor c = scratch_tensor(out.sizes(), c10::contiguous_strides(out.sizes()), out.numel(), c10::kFloat);
  // beta == 0 ignores self, NaN included, as ATen's addmm does.
  if (beta != 0.f) kernel_copy(c, stack[0].toTensor().expand(out.sizes()));
  const int64_t batches = a.dim() == 3 ? a.size(0) : 1;
  const auto* a_data = static_cast<const c10::Half*>(a.const_data_ptr());
  const auto* b_data = static_cast<const c10::Half*>(b.const_data_ptr());
  float* c_data = c.mutable_data_ptr<float>();
  for (int64_t i = 0; i < batches; ++i) {
    const int64_t a_offset = a.dim() == 3 ? i * a.stride(0) : 0, b_offset = b.dim() == 3 ? i * b.stride(0) : 0;
    cblas_gemm_f16f16f32(101, ma->trans, mb->trans, static_cast<int>(m), static_cast<int>(n), static_cast<int>(kk),
                         alpha, a_data + a_offset, ma->ld, b_data + b_offset, mb->ld, beta, c_data + i * m * n,
                         static_cast<int>(n));
  }
  kernel_copy(out, c);
  return true;
}

c10::ScalarType float32_operand(unsigned float32_dtypes, c10::ScalarType dtype) {
  return converts(dtype, float32_dtypes) ? c10::kFloat : c10::ScalarType::Undefined;
}

}  // namespace softnpu
