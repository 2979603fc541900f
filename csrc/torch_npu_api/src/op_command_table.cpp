// CANN's operator types (their input order and attribute names, as the operators' prototypes in CANN's operator
// list give them), each composed of ATen ops on the npu inputs.
#include "op_command_table.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <map>

namespace torch_npu_api {

namespace {

using Results = std::vector<at::Tensor>;

Results add(const OpCommandArgs& a) { return {at::add(a.tensor(0), a.tensor(1))}; }
Results sub(const OpCommandArgs& a) { return {at::sub(a.tensor(0), a.tensor(1))}; }
Results mul(const OpCommandArgs& a) { return {at::mul(a.tensor(0), a.tensor(1))}; }
Results real_div(const OpCommandArgs& a) { return {at::div(a.tensor(0), a.tensor(1))}; }
Results maximum(const OpCommandArgs& a) { return {at::maximum(a.tensor(0), a.tensor(1))}; }
Results minimum(const OpCommandArgs& a) { return {at::minimum(a.tensor(0), a.tensor(1))}; }
Results pow(const OpCommandArgs& a) { return {at::pow(a.tensor(0), a.tensor(1))}; }
// y = x1 + alpha * x2
Results axpy(const OpCommandArgs& a) { return {at::add(a.tensor(0), a.tensor(1), a.attr_float("alpha", 1.0))}; }
Results adds(const OpCommandArgs& a) { return {at::add(a.tensor(0), a.attr_float("value", 0.0))}; }
Results muls(const OpCommandArgs& a) { return {at::mul(a.tensor(0), a.attr_float("value", 1.0))}; }
Results neg(const OpCommandArgs& a) { return {at::neg(a.tensor(0))}; }
Results abs(const OpCommandArgs& a) { return {at::abs(a.tensor(0))}; }
Results exp(const OpCommandArgs& a) { return {at::exp(a.tensor(0))}; }
Results log(const OpCommandArgs& a) { return {at::log(a.tensor(0))}; }
Results sqrt(const OpCommandArgs& a) { return {at::sqrt(a.tensor(0))}; }
Results rsqrt(const OpCommandArgs& a) { return {at::rsqrt(a.tensor(0))}; }
Results reciprocal(const OpCommandArgs& a) { return {at::reciprocal(a.tensor(0))}; }
Results square(const OpCommandArgs& a) { return {at::square(a.tensor(0))}; }
Results relu(const OpCommandArgs& a) { return {at::relu(a.tensor(0))}; }
Results sigmoid(const OpCommandArgs& a) { return {at::sigmoid(a.tensor(0))}; }
Results tanh(const OpCommandArgs& a) { return {at::tanh(a.tensor(0))}; }
Results gelu(const OpCommandArgs& a) { return {at::gelu(a.tensor(0))}; }
Results silu(const OpCommandArgs& a) { return {at::silu(a.tensor(0))}; }
Results identity(const OpCommandArgs& a) { return {a.tensor(0)}; }
Results zeros_like(const OpCommandArgs& a) { return {at::zeros_like(a.tensor(0))}; }
Results ones_like(const OpCommandArgs& a) { return {at::ones_like(a.tensor(0))}; }
// The output's dtype is the target (dst_type names the same type in ACL's numbering).
Results cast(const OpCommandArgs& a) { return {a.tensor(0)}; }

at::Tensor transposed_if(const at::Tensor& t, bool transpose) { return transpose ? t.transpose(-2, -1) : t; }

// x1, x2, optional bias; transpose_x1 / transpose_x2.
Results mat_mul(const OpCommandArgs& a) {
  at::Tensor y = at::matmul(transposed_if(a.tensor(0), a.attr_bool("transpose_x1", false)),
                            transposed_if(a.tensor(1), a.attr_bool("transpose_x2", false)));
  if (a.has_input(2)) y = y + a.tensor(2);
  return {y};
}

// x1, x2; adj_x1 / adj_x2.
Results batch_mat_mul(const OpCommandArgs& a) {
  return {at::matmul(transposed_if(a.tensor(0), a.attr_bool("adj_x1", false)),
                     transposed_if(a.tensor(1), a.attr_bool("adj_x2", false)))};
}

// x, axes (a host list; empty: every axis); keep_dims.
Results reduce_sum(const OpCommandArgs& a) {
  return {at::sum(a.tensor(0), a.ints(1), a.attr_bool("keep_dims", false))};
}
Results reduce_mean(const OpCommandArgs& a) {
  return {at::mean(a.tensor(0), a.ints(1), a.attr_bool("keep_dims", false))};
}
Results reduce_max(const OpCommandArgs& a) {
  return {at::amax(a.tensor(0), a.ints(1), a.attr_bool("keep_dims", false))};
}

// x; axes (one axis, default the last).
Results softmax_v2(const OpCommandArgs& a) {
  return {at::softmax(a.tensor(0), a.attr_ints("axes", {-1}).at(0))};
}

// x, perm (a host list).
Results transpose(const OpCommandArgs& a) { return {a.tensor(0).permute(a.ints(1))}; }

const std::map<std::string, OpCommandFn>& table() {
  static const std::map<std::string, OpCommandFn> ops = {
      {"Abs", abs},           {"Add", add},
      {"AddV2", add},         {"Adds", adds},
      {"Axpy", axpy},         {"BatchMatMul", batch_mat_mul},
      {"BatchMatMulV2", batch_mat_mul}, {"Cast", cast},
      {"Div", real_div},      {"Exp", exp},
      {"Gelu", gelu},         {"Identity", identity},
      {"Log", log},           {"MatMul", mat_mul},
      {"MatMulV2", mat_mul},  {"Maximum", maximum},
      {"Minimum", minimum},   {"Mul", mul},
      {"Muls", muls},         {"Neg", neg},
      {"OnesLike", ones_like}, {"Pow", pow},
      {"RealDiv", real_div},  {"Reciprocal", reciprocal},
      {"ReduceMax", reduce_max}, {"ReduceMean", reduce_mean},
      {"ReduceSum", reduce_sum}, {"Relu", relu},
      {"Rsqrt", rsqrt},       {"Sigmoid", sigmoid},
      {"Sqrt", sqrt},         {"Square", square},
      {"SoftmaxV2", softmax_v2}, {"Sub", sub},
      {"Swish", silu},        {"Tanh", tanh},
      {"Transpose", transpose}, {"ZerosLike", zeros_like},
  };
  return ops;
}

}  // namespace

bool OpCommandArgs::has_input(size_t i) const {
  return i < inputs_.size() && !std::holds_alternative<std::monostate>(inputs_[i]);
}

const at::Tensor& OpCommandArgs::tensor(size_t i) const {
  TORCH_CHECK(i < inputs_.size(), "OpCommand ", type_, ": expected at least ", i + 1, " inputs, got ",
              inputs_.size());
  const auto* t = std::get_if<at::Tensor>(&inputs_[i]);
  TORCH_CHECK(t != nullptr, "OpCommand ", type_, ": input ", i, " must be a tensor");
  return *t;
}

std::vector<int64_t> OpCommandArgs::ints(size_t i) const {
  TORCH_CHECK(i < inputs_.size(), "OpCommand ", type_, ": expected at least ", i + 1, " inputs, got ",
              inputs_.size());
  if (const auto* h = std::get_if<at_npu::native::OpCommand::HostInput>(&inputs_[i])) return h->ints;
  const auto* t = std::get_if<at::Tensor>(&inputs_[i]);
  TORCH_CHECK(t != nullptr, "OpCommand ", type_, ": input ", i, " must be an int list");
  const at::Tensor host = t->to(at::kCPU, at::kLong).contiguous();
  return std::vector<int64_t>(host.data_ptr<int64_t>(), host.data_ptr<int64_t>() + host.numel());
}

c10::Scalar OpCommandArgs::scalar(size_t i) const {
  TORCH_CHECK(i < inputs_.size(), "OpCommand ", type_, ": expected at least ", i + 1, " inputs");
  const auto* h = std::get_if<at_npu::native::OpCommand::HostInput>(&inputs_[i]);
  TORCH_CHECK(h != nullptr && h->scalar, "OpCommand ", type_, ": input ", i, " must be a scalar");
  return *h->scalar;
}

const at_npu::native::OpAttrValue* OpCommandArgs::attr(const std::string& name) const {
  for (const auto& [n, v] : attrs_) {
    if (n == name) return &v;
  }
  return nullptr;
}

bool OpCommandArgs::attr_bool(const std::string& name, bool fallback) const {
  const auto* v = attr(name);
  if (!v) return fallback;
  if (const auto* b = std::get_if<bool>(v)) return *b;
  if (const auto* i = std::get_if<int64_t>(v)) return *i != 0;
  TORCH_CHECK(false, "OpCommand ", type_, ": attribute ", name, " must be a bool");
}

int64_t OpCommandArgs::attr_int(const std::string& name, int64_t fallback) const {
  const auto* v = attr(name);
  if (!v) return fallback;
  if (const auto* i = std::get_if<int64_t>(v)) return *i;
  TORCH_CHECK(false, "OpCommand ", type_, ": attribute ", name, " must be an int");
}

double OpCommandArgs::attr_float(const std::string& name, double fallback) const {
  const auto* v = attr(name);
  if (!v) return fallback;
  if (const auto* d = std::get_if<double>(v)) return *d;
  if (const auto* i = std::get_if<int64_t>(v)) return static_cast<double>(*i);
  TORCH_CHECK(false, "OpCommand ", type_, ": attribute ", name, " must be a number");
}

std::vector<int64_t> OpCommandArgs::attr_ints(const std::string& name, std::vector<int64_t> fallback) const {
  const auto* v = attr(name);
  if (!v) return fallback;
  if (const auto* l = std::get_if<std::vector<int64_t>>(v)) return *l;
  if (const auto* i = std::get_if<int64_t>(v)) return {*i};
  TORCH_CHECK(false, "OpCommand ", type_, ": attribute ", name, " must be an int list");
}

OpCommandFn find_op_command(const std::string& type) {
  const auto it = table().find(type);
  return it == table().end() ? nullptr : it->second;
}

std::vector<std::string> op_command_types() {
  std::vector<std::string> names;
  for (const auto& [name, fn] : table()) names.push_back(name);
  return names;
}

}  // namespace torch_npu_api
