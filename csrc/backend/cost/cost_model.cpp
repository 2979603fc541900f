#include "backend/cost/cost_model.h"

#include <c10/util/Exception.h>

#include <algorithm>
#include <cmath>
#include <string_view>
#include <unordered_set>

#include "backend/npu_error.h"
#include "backend/ops/ivalue_tensors.h"
#include "backend/ops/op_info.h"

namespace softnpu::cost {

const char* bound_name(Bound bound) {
  switch (bound) {
    case Bound::kCompute: return "compute";
    case Bound::kMemory: return "memory";
    case Bound::kLaunch: return "launch";
    case Bound::kCommunication: return "communication";
  }
  return "?";
}

const char* unit_name(Unit unit) {
  switch (unit) {
    case Unit::kCube: return "cube";
    case Unit::kVector: return "vector";
    case Unit::kCopy: return "copy";
    case Unit::kCollective: return "collective";
  }
  return "?";
}

Chip chip_from_profile(const snpuSocProfile& p) {
  Chip c;
  c.name = p.name;
  c.ai_cores = p.ai_cores;
  c.cube_fp16_flops = p.cube_fp16_tflops * 1e12;
  c.cube_fp32_flops = p.cube_fp32_tflops * 1e12;
  c.cube_int8_ops = p.cube_int8_tops * 1e12;
  c.vector_fp16_flops = p.vector_fp16_tflops * 1e12;
  c.hbm_bytes_per_s = p.hbm_gbps * 1e9;
  c.l2_bytes = static_cast<double>(p.l2_bytes);
  c.hccs_bytes_per_s = p.hccs_gbps * 1e9;
  c.roce_bytes_per_s = p.roce_gbps * 1e9;
  c.host_link_bytes_per_s = p.host_link_gbps * 1e9;
  return c;
}

Chip chip_named(const std::string& name) {
  snpuSocProfile p{};
  NPU_CHECK(snpuGetSocProfile(name.empty() ? nullptr : name.c_str(), &p));
  return chip_from_profile(p);
}

const Chip& selected_chip() {
  static const Chip chip = chip_named("");
  return chip;
}

namespace {

// ------------------------------------------------------------------------------------------------ arguments

double tensor_bytes(const at::Tensor& t) {
  // 0-dim tensors are scalars the kernel reads once (CPU scalars, step counters): not traffic.
  if (!t.defined() || t.dim() == 0) return 0;
  return static_cast<double>(t.numel()) * static_cast<double>(t.element_size());
}

double value_bytes(const c10::IValue& v) {
  double bytes = 0;
  visit_tensors(v, [&](const at::Tensor& t) { bytes += tensor_bytes(t); });
  return bytes;
}

double value_numel(const c10::IValue& v) {
  double n = 0;
  visit_tensors(v, [&](const at::Tensor& t) {
    if (t.defined()) n += static_cast<double>(t.numel());
  });
  return n;
}

// An argument by its schema name, or null where the op has none.
const c10::IValue* argument(const OpInfo& info, c10::ArrayRef<c10::IValue> args, std::string_view name) {
  const auto index = info.op.schema().argumentIndexWithName(name);
  if (!index.has_value() || static_cast<size_t>(*index) >= args.size()) return nullptr;
  return &args[*index];
}

at::Tensor tensor_argument(const OpInfo& info, c10::ArrayRef<c10::IValue> args, std::string_view name) {
  const c10::IValue* v = argument(info, args, name);
  return v != nullptr && v->isTensor() ? v->toTensor() : at::Tensor();
}

bool bool_argument(const OpInfo& info, c10::ArrayRef<c10::IValue> args, std::string_view name) {
  const c10::IValue* v = argument(info, args, name);
  return v != nullptr && v->isBool() && v->toBool();
}

// The traffic of a kernel: every tensor argument read once, every output (fresh or written argument) written once.
double traffic(const OpInfo& info, c10::ArrayRef<c10::IValue> args, c10::ArrayRef<c10::IValue> outputs) {
  double bytes = 0;
  for (const auto& a : args) bytes += value_bytes(a);
  for (const auto& o : outputs) bytes += value_bytes(o);
  for (int w : info.written_args)
    if (static_cast<size_t>(w) < args.size()) bytes += value_bytes(args[w]);
  return bytes;
}

// ------------------------------------------------------------------------------------------------ the units

// The cube's peak for operands of a dtype; 0 where the cube does not take it (the vector units compute instead).
double cube_peak(const Chip& chip, c10::ScalarType dtype) {
  switch (dtype) {
    case c10::kHalf:
    case c10::kBFloat16: return chip.cube_fp16_flops;
    case c10::kFloat: return chip.cube_fp32_flops;
    case c10::kChar:
    case c10::kByte: return chip.cube_int8_ops;
    default: return 0;
  }
}

// The vector units' peak for a dtype: float16 lanes as the table gives; 32-bit types at half (half the lanes of the
// same 256-byte vector), 64-bit types at a quarter.
double vector_peak(const Chip& chip, c10::ScalarType dtype) {
  const size_t size = c10::elementSize(dtype);
  return chip.vector_fp16_flops * (size <= 2 ? 1.0 : 2.0 / static_cast<double>(size));
}

double memory_us(const Chip& chip, double bytes) {
  return bytes / (chip.hbm_bytes_per_s * kFactors.hbm_efficiency) * 1e6;
}

// The roofline of one kernel: the longer of arithmetic and memory, at least the kernel floor.
Estimate roofline(Unit unit, double flops, double compute_us, double bytes, double mem_us) {
  Estimate e;
  e.unit = unit;
  e.flops = flops;
  e.bytes = bytes;
  e.us = std::max({compute_us, mem_us, kFactors.kernel_floor_us});
  e.bound = e.us == kFactors.kernel_floor_us && compute_us < e.us && mem_us < e.us ? Bound::kLaunch
            : compute_us >= mem_us                                                  ? Bound::kCompute
                                                                                    : Bound::kMemory;
  return e;
}

// A GEMM-shaped cube kernel: `batch` products of (m x k) by (k x n). Its output tiles spread over the AI cores in
// waves; a last partial wave (or fewer tiles than cores) leaves cores idle for the whole wave.
Estimate cube_kernel(const Chip& chip, c10::ScalarType dtype, double batch, double m, double n, double k,
                     double bytes) {
  const double flops = 2.0 * batch * m * n * k;
  const double tiles = batch * std::ceil(m / kFactors.cube_tile_m) * std::ceil(n / kFactors.cube_tile_n);
  const double waves = std::ceil(tiles / chip.ai_cores);
  const double occupancy = tiles > 0 ? tiles / (waves * chip.ai_cores) : 1.0;
  const double peak = cube_peak(chip, dtype);
  const double compute_us =
      peak > 0 ? flops / (peak * kFactors.cube_efficiency * occupancy) * 1e6
               : flops / (vector_peak(chip, dtype) * kFactors.vector_efficiency) * 1e6;
  return roofline(peak > 0 ? Unit::kCube : Unit::kVector, flops, compute_us, bytes, memory_us(chip, bytes));
}

// ------------------------------------------------------------------------------------------------ the ops

// The matrix products: the two operands' schema names.
struct Gemm {
  std::string_view op;
  std::string_view a;
  std::string_view b;
};
constexpr Gemm kGemms[] = {
    {"aten::mm", "self", "mat2"},           {"aten::addmm", "mat1", "mat2"},
    {"aten::_addmm_activation", "mat1", "mat2"}, {"aten::bmm", "self", "mat2"},
    {"aten::baddbmm", "batch1", "batch2"},  {"aten::addbmm", "batch1", "batch2"},
    {"aten::_int_mm", "self", "mat2"},
};

constexpr std::string_view kConvolutions[] = {"aten::convolution", "aten::convolution_overrideable",
                                              "aten::_convolution"};
constexpr std::string_view kConvolutionBackwards[] = {"aten::convolution_backward",
                                                      "aten::convolution_backward_overrideable"};
constexpr std::string_view kAttentionForwards[] = {
    "aten::_scaled_dot_product_flash_attention_for_cpu", "aten::_scaled_dot_product_flash_attention",
    "aten::_scaled_dot_product_efficient_attention", "aten::_scaled_dot_product_cudnn_attention",
    "npu::npu_fusion_attention", "npu::_npu_fusion_attention"};
constexpr std::string_view kAttentionBackwards[] = {
    "aten::_scaled_dot_product_flash_attention_for_cpu_backward", "aten::_scaled_dot_product_flash_attention_backward",
    "aten::_scaled_dot_product_efficient_attention_backward", "aten::_scaled_dot_product_cudnn_attention_backward",
    "npu::npu_fusion_attention_grad"};

template <size_t N>
bool one_of(std::string_view name, const std::string_view (&names)[N]) {
  return std::find(std::begin(names), std::end(names), name) != std::end(names);
}

std::optional<Estimate> gemm(const Chip& chip, const OpInfo& info, c10::ArrayRef<c10::IValue> args, double bytes) {
  for (const Gemm& g : kGemms) {
    if (info.op.schema().name() != g.op) continue;
    const at::Tensor a = tensor_argument(info, args, g.a);
    const at::Tensor b = tensor_argument(info, args, g.b);
    if (!a.defined() || !b.defined() || a.dim() < 2 || b.dim() < 2) return std::nullopt;
    const double m = static_cast<double>(a.size(-2));
    const double k = static_cast<double>(a.size(-1));
    const double n = static_cast<double>(b.size(-1));
    const double batch = m * k > 0 ? static_cast<double>(a.numel()) / (m * k) : 0;
    Estimate e = cube_kernel(chip, a.scalar_type(), batch, m, n, k, bytes);
    e.model_flops = e.flops;
    return e;
  }
  return std::nullopt;
}

// A convolution as the GEMM it lowers to (implicit GEMM): output pixels x output channels x (input channels per group
// x kernel window). For a transposed convolution the roles of input and output swap.
std::optional<Estimate> convolution(const Chip& chip, const OpInfo& info, c10::ArrayRef<c10::IValue> args,
                                    c10::ArrayRef<c10::IValue> outputs, double bytes) {
  const std::string& name = info.op.schema().name();
  const bool backward = one_of(name, kConvolutionBackwards);
  if (!backward && !one_of(name, kConvolutions)) return std::nullopt;
  const at::Tensor weight = tensor_argument(info, args, "weight");
  const at::Tensor input = tensor_argument(info, args, "input");
  if (!weight.defined() || weight.dim() < 3 || !input.defined()) return std::nullopt;
  // The forward's output: the output of the op, or the gradient flowing back into it.
  at::Tensor output = backward ? tensor_argument(info, args, "grad_output")
                               : (!outputs.empty() && outputs[0].isTensor() ? outputs[0].toTensor() : at::Tensor());
  if (!output.defined()) return std::nullopt;
  const bool transposed = bool_argument(info, args, "transposed");
  const double window = static_cast<double>(weight.numel() / (weight.size(0) * weight.size(1)));
  // Rows: the pixels of the side the weight's first dimension maps from (output, or input when transposed).
  const at::Tensor& pixels_of = transposed ? input : output;
  const double m = static_cast<double>(pixels_of.numel()) / static_cast<double>(pixels_of.size(1));
  const double n = static_cast<double>(weight.size(0));
  const double k = static_cast<double>(weight.size(1)) * window;
  double products = 1;
  if (backward) {
    // One GEMM of the forward's size per gradient asked for (input's, weight's); the bias's is a reduction.
    products = 0;
    const c10::IValue* mask = argument(info, args, "output_mask");
    if (mask != nullptr && mask->isBoolList()) {
      const auto list = mask->toBoolList();
      for (size_t i = 0; i < 2 && i < list.size(); ++i) products += list.get(i) ? 1 : 0;
    } else {
      products = 2;
    }
  }
  Estimate e = cube_kernel(chip, weight.scalar_type(), std::max(products, 1.0), m, n, k, bytes);
  if (products == 0) e = roofline(Unit::kVector, 0, 0, bytes, memory_us(chip, bytes));
  e.model_flops = e.flops;
  return e;
}

// Attention's two products per head, QK^T and PV (the flash kernels never write the score matrix: traffic is the
// operands'). Causal attention skips the masked half of the blocks. The backward recomputes QK^T and adds three
// products (dV, dP, dQ and dK): 2.5 times the forward's. The model FLOPs are torch.utils.flop_counter's count: every
// block of the scores (no causal discount), the backward with its recomputation (five products).
std::optional<Estimate> attention(const Chip& chip, const OpInfo& info, c10::ArrayRef<c10::IValue> args,
                                  double bytes) {
  const std::string& name = info.op.schema().name();
  const bool forward = one_of(name, kAttentionForwards);
  if (!forward && !one_of(name, kAttentionBackwards)) return std::nullopt;
  const at::Tensor q = tensor_argument(info, args, "query");
  const at::Tensor k = tensor_argument(info, args, "key");
  if (!q.defined() || !k.defined() || q.dim() < 3) return std::nullopt;
  // The keys' sequence length: from torch_npu's input_layout where the op has one, else ATen's (B, H, S, E).
  double keys = static_cast<double>(k.size(-2));
  bool causal = bool_argument(info, args, "is_causal");
  if (const c10::IValue* layout = argument(info, args, "input_layout"); layout != nullptr && layout->isString()) {
    const std::string_view l = layout->toStringRef();
    const auto s = l.find('S');
    if (s != std::string_view::npos && s < static_cast<size_t>(k.dim())) keys = static_cast<double>(k.size(s));
    if (l == "TND") {
      // Packed sequences: each attends over its own keys, taken as of equal length (torch_npu's FlopCounter too).
      keys = static_cast<double>(k.size(0));
      const c10::IValue* lengths = argument(info, args, "actual_seq_kvlen");
      if (lengths != nullptr && lengths->isIntList() && !lengths->toIntList().empty())
        keys /= static_cast<double>(lengths->toIntList().size());
    }
    causal = tensor_argument(info, args, "atten_mask").defined();
  }
  const double head_dim = static_cast<double>(q.size(-1));
  const double rows = static_cast<double>(q.numel()) / head_dim;  // batch x heads x queries
  const double work = (causal ? 0.5 : 1.0) * (forward ? 1.0 : 2.5);
  // Two products of rows x keys x head_dim each.
  Estimate e = cube_kernel(chip, q.scalar_type(), 2.0 * work, rows, keys, head_dim, bytes);
  e.model_flops = 2.0 * (forward ? 2.0 : 5.0) * rows * keys * head_dim;
  return e;
}

// The vector work per output element beyond a single operation: transcendental activations, softmax, normalizations.
double element_work(std::string_view name) {
  static const std::unordered_set<std::string_view> kTranscendental = {
      "exp", "exp2", "expm1", "log", "log1p", "log2", "sigmoid", "tanh", "gelu", "silu", "mish", "softplus", "elu",
      "erf", "erfinv", "pow", "rsqrt", "sqrt", "sin", "cos", "_softmax", "_log_softmax", "gelu_backward",
      "silu_backward", "sigmoid_backward", "tanh_backward", "_softmax_backward_data", "_log_softmax_backward_data",
      "npu_swiglu", "npu_swiglu_backward", "npu_geglu", "npu_geglu_grad"};
  static const std::unordered_set<std::string_view> kNormalization = {
      "native_layer_norm", "native_layer_norm_backward", "native_batch_norm", "native_batch_norm_backward",
      "_native_batch_norm_legit", "_native_batch_norm_legit_no_training", "native_group_norm",
      "native_group_norm_backward", "_fused_rms_norm", "_fused_rms_norm_backward", "npu_rms_norm",
      "npu_rms_norm_backward", "_fused_adamw_", "_fused_adam_"};
  const auto sep = name.find("::");
  const std::string_view base = sep == std::string_view::npos ? name : name.substr(sep + 2);
  if (kNormalization.contains(base)) return 8;
  if (kTranscendental.contains(base)) return 4;
  return 1;
}

// Ops the op path runs without a kernel: allocations and metadata.
bool launches_nothing(const OpInfo& info) {
  static const std::unordered_set<std::string_view> kNoKernel = {
      "aten::empty", "aten::empty_strided", "aten::empty_like", "aten::new_empty", "aten::new_empty_strided",
      "aten::resize_", "aten::set_", "aten::lift_fresh", "aten::detach", "aten::alias", "aten::_unsafe_view",
      "aten::_reshape_alias", "aten::_local_scalar_dense",
      "aten::item", "aten::is_nonzero", "aten::_has_compatible_shallow_copy_type", "npu::empty_with_format",
      "npu::get_npu_format", "npu::get_storage_size"};
  return info.is_view || kNoKernel.contains(info.op.schema().name());
}

}  // namespace

std::vector<std::string> cube_ops() {
  std::vector<std::string> out;
  for (const Gemm& g : kGemms) out.emplace_back(g.op);
  out.insert(out.end(), std::begin(kConvolutions), std::end(kConvolutions));
  out.insert(out.end(), std::begin(kConvolutionBackwards), std::end(kConvolutionBackwards));
  out.insert(out.end(), std::begin(kAttentionForwards), std::end(kAttentionForwards));
  out.insert(out.end(), std::begin(kAttentionBackwards), std::end(kAttentionBackwards));
  return out;
}

std::optional<Estimate> estimate_op(const Chip& chip, const OpInfo& info, c10::ArrayRef<c10::IValue> args,
                                    c10::ArrayRef<c10::IValue> outputs) {
  if (launches_nothing(info)) return std::nullopt;
  const double bytes = traffic(info, args, outputs);
  if (auto e = gemm(chip, info, args, bytes)) return e;
  if (auto e = convolution(chip, info, args, outputs, bytes)) return e;
  if (auto e = attention(chip, info, args, bytes)) return e;

  // A vector kernel: element work over its largest side, in the widest dtype it touches.
  double elements = 0;
  c10::ScalarType dtype = c10::kHalf;
  auto widest = [&](const c10::IValue& v) {
    elements = std::max(elements, value_numel(v));
    visit_tensors(v, [&](const at::Tensor& t) {
      if (t.defined() && t.dim() > 0 && c10::elementSize(t.scalar_type()) > c10::elementSize(dtype))
        dtype = t.scalar_type();
    });
  };
  for (const auto& a : args) widest(a);
  for (const auto& o : outputs) widest(o);
  const double flops = elements * element_work(info.op.schema().name());
  const double compute_us = flops / (vector_peak(chip, dtype) * kFactors.vector_efficiency) * 1e6;
  return roofline(Unit::kVector, flops, compute_us, bytes, memory_us(chip, bytes));
}

Estimate estimate_copy(const Chip& chip, double bytes, CopyKind kind, bool pageable) {
  if (kind == CopyKind::kDeviceToDevice) {
    // Read and written on the same HBM.
    const double traffic = 2 * bytes;
    return roofline(Unit::kCopy, 0, 0, traffic, memory_us(chip, traffic));
  }
  TORCH_CHECK(chip.host_link_bytes_per_s > 0, chip.name, " has no host link figure: a host copy cannot be estimated");
  double us = bytes / (chip.host_link_bytes_per_s * kFactors.host_link_efficiency) * 1e6;
  // Pageable memory is staged through a pinned buffer by a host memcpy, one after the other.
  if (pageable) us += bytes / (kFactors.pageable_staging_gbps * 1e9) * 1e6;
  Estimate e = roofline(Unit::kCopy, 0, 0, bytes, us);
  if (e.bound == Bound::kCompute) e.bound = Bound::kMemory;
  return e;
}

Estimate estimate_memset(const Chip& chip, double bytes) {
  return roofline(Unit::kCopy, 0, 0, bytes, memory_us(chip, bytes));
}

Estimate estimate_collective(const Chip& chip, Collective kind, double bytes, int ranks, Link link) {
  TORCH_CHECK(ranks >= 1, "a collective needs at least one rank, got ", ranks);
  Estimate e;
  e.unit = Unit::kCollective;
  e.bound = Bound::kCommunication;
  if (ranks == 1) return e;
  const double n = ranks;
  // The bytes each rank sends over its links (ring/mesh algorithms): an all-reduce is a reduce-scatter and an
  // all-gather, each moving (n-1)/n of the message.
  double moved = 0;
  switch (kind) {
    case Collective::kAllReduce: moved = 2 * (n - 1) / n * bytes; break;
    case Collective::kAllGather:
    case Collective::kReduceScatter:
    case Collective::kAllToAll: moved = (n - 1) / n * bytes; break;
    case Collective::kBroadcast:
    case Collective::kSendRecv: moved = bytes; break;
  }
  const double bandwidth = link == Link::kHccs ? chip.hccs_bytes_per_s : chip.roce_bytes_per_s;
  TORCH_CHECK(bandwidth > 0, chip.name, " has no ", link == Link::kHccs ? "HCCS" : "RoCE",
              " links: a collective over them cannot be estimated");
  e.bytes = moved;
  e.us = kFactors.collective_latency_us + moved / (bandwidth * kFactors.link_efficiency) * 1e6;
  return e;
}

}  // namespace softnpu::cost
