// Ops that ATen's device-generic code calls only for accelerators, and that therefore have no CPU kernel for the
// generic path to run: the fused RNN cells (ATen's LSTM and GRU call them for every non-CPU device; the RNN modules
// in half precision run them in float32, as cuDNN's RNNs do) and the
// per-channel statistics of SyncBatchNorm (torch.nn.SyncBatchNorm calls them for every non-CPU device). Each is
// composed here of npu ops, so it runs asynchronously on the current stream like any op; the formulas and the
// workspace layouts are those of CUDA's kernels, which their autograd formulas (derivatives.yaml) expect.
//
// tests/test_accelerator_ops.py audits the dispatcher for other ops without a CPU kernel and lists why each needs none.
#include <ATen/ATen.h>
#include <ATen/native/Resize.h>
#include <ATen/ops/gru_native.h>
#include <ATen/ops/lstm_native.h>
#include <ATen/ops/rnn_relu_native.h>
#include <ATen/ops/rnn_tanh_native.h>
#include <torch/library.h>

namespace softnpu {

namespace {

bool given(const std::optional<at::Tensor>& t) { return t.has_value() && t->defined(); }

// CUDA's cells compute in float32 for float16/bfloat16 operands (ATen's opmath type) and round each result once; a
// composite of npu ops in the operands' dtype would round after every step (nn.LSTM's bfloat16 gradients were twice
// as far from float64 as the CPU's). The workspace, which only the backward reads, stays in float32 (CUDA's keeps
// the gates rounded to the operands' dtype): twice its memory, and the gradients as close to float64 as the CPU's.
at::Tensor opmath(const at::Tensor& t) {
  return t.defined() && at::isReducedFloatingType(t.scalar_type()) ? t.to(at::kFloat) : t;
}

std::optional<at::Tensor> opmath(const std::optional<at::Tensor>& t) {
  return given(t) ? std::optional<at::Tensor>(opmath(*t)) : t;
}

at::Tensor rounded(const at::Tensor& t, at::ScalarType dtype) { return t.defined() ? t.to(dtype) : t; }

// ------------------------------------------------------------------------------------------------ RNN cells

// input_gates and hidden_gates: [batch, 4 * hidden] in ATen's gate order (input, forget, cell, output). The workspace
// holds the activated gates in that order, for the backward.
std::tuple<at::Tensor, at::Tensor, at::Tensor> lstm_cell(const at::Tensor& input_gates, const at::Tensor& hidden_gates,
                                                         const at::Tensor& cx, const std::optional<at::Tensor>& input_bias,
                                                         const std::optional<at::Tensor>& hidden_bias) {
  TORCH_CHECK(given(input_bias) == given(hidden_bias), "_thnn_fused_lstm_cell: give both biases or neither");
  const auto dtype = input_gates.scalar_type();
  at::Tensor gates = opmath(input_gates) + opmath(hidden_gates);
  if (given(input_bias)) gates = gates + *opmath(input_bias) + *opmath(hidden_bias);
  auto chunks = gates.chunk(4, 1);
  const at::Tensor i = chunks[0].sigmoid(), f = chunks[1].sigmoid(), g = chunks[2].tanh(), o = chunks[3].sigmoid();
  const at::Tensor cy = at::addcmul(f * opmath(cx), i, g);
  const at::Tensor hy = o * cy.tanh();
  return {rounded(hy, dtype), rounded(cy, dtype), at::cat({i, f, g, o}, 1)};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> lstm_cell_backward(const std::optional<at::Tensor>& grad_hy,
                                                                  const std::optional<at::Tensor>& grad_cy,
                                                                  const at::Tensor& cx, const at::Tensor& cy,
                                                                  const at::Tensor& workspace, bool has_bias) {
  if (!given(grad_hy) && !given(grad_cy)) return {};
  const auto dtype = cx.scalar_type();
  auto gates = opmath(workspace).chunk(4, 1);
  const at::Tensor &i = gates[0], &f = gates[1], &g = gates[2], &o = gates[3];
  const at::Tensor tanh_cy = opmath(cy).tanh();
  // The gradient reaching the cell state: from cy directly, and from hy through o * tanh(cy).
  at::Tensor gc = given(grad_cy) ? opmath(*grad_cy) : at::zeros_like(tanh_cy);
  at::Tensor go = at::zeros_like(o);
  if (given(grad_hy)) {
    const at::Tensor ghy = opmath(*grad_hy);
    go = ghy * tanh_cy;
    gc = gc + ghy * o * (1 - tanh_cy * tanh_cy);
  }
  const at::Tensor grad_gates =
      at::cat({gc * g * i * (1 - i), gc * opmath(cx) * f * (1 - f), gc * i * (1 - g * g), go * o * (1 - o)}, 1);
  const at::Tensor grad_cx = gc * f;
  const at::Tensor grad_bias = has_bias ? grad_gates.sum(0) : at::Tensor();
  return {rounded(grad_gates, dtype), rounded(grad_cx, dtype), rounded(grad_bias, dtype)};
}

// Gates: [batch, 3 * hidden] in ATen's order (reset, update, new). The workspace holds, in this order, the reset and
// update gates, the new gate, hx and the hidden part of the new gate (bias included), which the backward needs.
std::tuple<at::Tensor, at::Tensor> gru_cell(const at::Tensor& input_gates, const at::Tensor& hidden_gates,
                                            const at::Tensor& hx, const std::optional<at::Tensor>& input_bias,
                                            const std::optional<at::Tensor>& hidden_bias) {
  TORCH_CHECK(given(input_bias) == given(hidden_bias), "_thnn_fused_gru_cell: give both biases or neither");
  const auto dtype = input_gates.scalar_type();
  const at::Tensor ig = given(input_bias) ? opmath(input_gates) + *opmath(input_bias) : opmath(input_gates);
  const at::Tensor hg = given(hidden_bias) ? opmath(hidden_gates) + *opmath(hidden_bias) : opmath(hidden_gates);
  auto in = ig.chunk(3, 1);
  auto hn = hg.chunk(3, 1);
  const at::Tensor r = (in[0] + hn[0]).sigmoid();
  const at::Tensor z = (in[1] + hn[1]).sigmoid();
  const at::Tensor n = at::addcmul(in[2], r, hn[2]).tanh();
  const at::Tensor h = opmath(hx);
  const at::Tensor hy = at::addcmul(n, z, h - n);
  return {rounded(hy, dtype), at::cat({r, z, n, h, hn[2]}, 1)};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor> gru_cell_backward(const at::Tensor& grad_hy,
                                                                                       const at::Tensor& workspace,
                                                                                       bool has_bias) {
  const auto dtype = grad_hy.scalar_type();
  auto w = opmath(workspace).chunk(5, 1);
  const at::Tensor &r = w[0], &z = w[1], &n = w[2], &hx = w[3], &hn = w[4];
  const at::Tensor ghy = opmath(grad_hy);
  const at::Tensor gz = ghy * (hx - n) * z * (1 - z);
  const at::Tensor gn = ghy * (1 - z) * (1 - n * n);
  const at::Tensor gr = gn * hn * r * (1 - r);
  const at::Tensor grad_input_gates = at::cat({gr, gz, gn}, 1);
  const at::Tensor grad_hidden_gates = at::cat({gr, gz, gn * r}, 1);
  const at::Tensor grad_hx = ghy * z;
  const at::Tensor grad_input_bias = has_bias ? grad_input_gates.sum(0) : at::Tensor();
  const at::Tensor grad_hidden_bias = has_bias ? grad_hidden_gates.sum(0) : at::Tensor();
  return {rounded(grad_input_gates, dtype), rounded(grad_hidden_gates, dtype), rounded(grad_hx, dtype),
          rounded(grad_input_bias, dtype), rounded(grad_hidden_bias, dtype)};
}

// ------------------------------------------------------------------------------------------------ RNNs in half precision

// nn.LSTM, nn.GRU and nn.RNN in float16/bfloat16 run in float32 and round their outputs once, as cuDNN's RNNs (CUDA's
// default) do: autograd then sums each parameter's per-step gradients in float32 and rounds the total once, where
// ATen's composite in the operands' dtype summed them in half (bfloat16 weight_hh gradients up to 4x the CPU's
// oneDNN kernel's error against float64). Registered for autograd on npu, so the casts are recorded like any op;
// other dtypes take ATen's composite, as before.
bool half(const at::Tensor& t) { return at::isReducedFloatingType(t.scalar_type()); }

std::vector<at::Tensor> opmath(at::TensorList ts) {
  std::vector<at::Tensor> out;
  out.reserve(ts.size());
  for (const at::Tensor& t : ts) out.push_back(opmath(t));
  return out;
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> lstm(const at::Tensor& input, at::TensorList hx, at::TensorList params,
                                                    bool has_biases, int64_t num_layers, double dropout, bool train,
                                                    bool bidirectional, bool batch_first) {
  if (!half(input)) {
    return at::native::lstm(input, hx, params, has_biases, num_layers, dropout, train, bidirectional, batch_first);
  }
  auto [out, hy, cy] = at::lstm(opmath(input), opmath(hx), opmath(params), has_biases, num_layers, dropout, train,
                                bidirectional, batch_first);
  const auto dtype = input.scalar_type();
  return {out.to(dtype), hy.to(dtype), cy.to(dtype)};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> packed_lstm(const at::Tensor& data, const at::Tensor& batch_sizes,
                                                           at::TensorList hx, at::TensorList params, bool has_biases,
                                                           int64_t num_layers, double dropout, bool train,
                                                           bool bidirectional) {
  if (!half(data)) {
    return at::native::lstm(data, batch_sizes, hx, params, has_biases, num_layers, dropout, train, bidirectional);
  }
  auto [out, hy, cy] = at::lstm(opmath(data), batch_sizes, opmath(hx), opmath(params), has_biases, num_layers, dropout,
                                train, bidirectional);
  const auto dtype = data.scalar_type();
  return {out.to(dtype), hy.to(dtype), cy.to(dtype)};
}

// gru, rnn_tanh and rnn_relu share a signature: one for each, over ATen's composite and the op itself.
using RnnFn = std::tuple<at::Tensor, at::Tensor> (*)(const at::Tensor&, const at::Tensor&, at::TensorList, bool,
                                                     int64_t, double, bool, bool, bool);
using PackedRnnFn = std::tuple<at::Tensor, at::Tensor> (*)(const at::Tensor&, const at::Tensor&, const at::Tensor&,
                                                           at::TensorList, bool, int64_t, double, bool, bool);

template <RnnFn composite, RnnFn op>
std::tuple<at::Tensor, at::Tensor> rnn(const at::Tensor& input, const at::Tensor& hx, at::TensorList params,
                                       bool has_biases, int64_t num_layers, double dropout, bool train,
                                       bool bidirectional, bool batch_first) {
  if (!half(input)) return composite(input, hx, params, has_biases, num_layers, dropout, train, bidirectional, batch_first);
  auto [out, hy] = op(opmath(input), opmath(hx), opmath(params), has_biases, num_layers, dropout, train, bidirectional,
                      batch_first);
  return {out.to(input.scalar_type()), hy.to(input.scalar_type())};
}

template <PackedRnnFn composite, PackedRnnFn op>
std::tuple<at::Tensor, at::Tensor> packed_rnn(const at::Tensor& data, const at::Tensor& batch_sizes,
                                              const at::Tensor& hx, at::TensorList params, bool has_biases,
                                              int64_t num_layers, double dropout, bool train, bool bidirectional) {
  if (!half(data)) return composite(data, batch_sizes, hx, params, has_biases, num_layers, dropout, train, bidirectional);
  auto [out, hy] = op(opmath(data), batch_sizes, opmath(hx), opmath(params), has_biases, num_layers, dropout, train,
                      bidirectional);
  return {out.to(data.scalar_type()), hy.to(data.scalar_type())};
}

// ------------------------------------------------------------------------------------------------ SyncBatchNorm

// Statistics are per channel (dimension 1) over every other dimension, in float32 for half-precision inputs (CUDA's
// accumulate type).
std::vector<int64_t> reduce_dims(const at::Tensor& input) {
  std::vector<int64_t> dims;
  for (int64_t d = 0; d < input.dim(); ++d)
    if (d != 1) dims.push_back(d);
  return dims;
}

// A per-channel vector shaped to broadcast against the input: [1, C, 1, ...].
at::Tensor per_channel(const at::Tensor& v, const at::Tensor& input) {
  std::vector<int64_t> shape(input.dim(), 1);
  shape[1] = input.size(1);
  return v.reshape(shape);
}

at::ScalarType stats_dtype(const at::Tensor& input) {
  return at::isReducedFloatingType(input.scalar_type()) ? at::kFloat : input.scalar_type();
}

std::tuple<at::Tensor, at::Tensor> sync_bn_stats(const at::Tensor& input, double eps) {
  const at::Tensor x = input.to(stats_dtype(input));
  auto [var, mean] = at::var_mean(x, reduce_dims(input), /*correction=*/0, /*keepdim=*/false);
  return {mean, (var + eps).rsqrt()};
}

at::Tensor sync_bn_elemt(const at::Tensor& input, const std::optional<at::Tensor>& weight,
                            const std::optional<at::Tensor>& bias, const at::Tensor& mean, const at::Tensor& invstd,
                            double /*eps: already in invstd*/) {
  at::Tensor out = (input - per_channel(mean, input)) * per_channel(invstd, input);
  if (given(weight)) out = out * per_channel(*weight, input);
  if (given(bias)) out = out + per_channel(*bias, input);
  return out.to(input.scalar_type());
}

at::Tensor& sync_bn_elemt_out(const at::Tensor& input, const std::optional<at::Tensor>& weight,
                              const std::optional<at::Tensor>& bias, const at::Tensor& mean, const at::Tensor& invstd,
                              double eps, at::Tensor& out) {
  at::native::resize_output(out, input.sizes());
  return out.copy_(sync_bn_elemt(input, weight, bias, mean, invstd, eps));
}

// Combines the statistics of every rank (rows of mean and invstd, counts[i] samples each) and updates the running
// statistics with the unbiased variance, as BatchNorm does.
std::tuple<at::Tensor, at::Tensor> sync_bn_gather_stats_with_counts(
    const at::Tensor& input, const at::Tensor& mean, const at::Tensor& invstd,
    const std::optional<at::Tensor>& running_mean, const std::optional<at::Tensor>& running_var, double momentum,
    double eps, const at::Tensor& counts) {
  const at::Tensor n = counts.to(mean.scalar_type()).unsqueeze(1);
  const at::Tensor total = n.sum();
  const at::Tensor global_mean = (mean * n).sum(0) / total;
  const at::Tensor var = invstd.pow(-2) - eps;
  const at::Tensor global_var = ((var + (mean - global_mean).pow(2)) * n).sum(0) / total;
  at::NoGradGuard no_grad;
  if (given(running_mean)) running_mean->mul_(1 - momentum).add_(global_mean.to(running_mean->scalar_type()), momentum);
  if (given(running_var)) {
    const at::Tensor unbiased = global_var * total / (total - 1);
    running_var->mul_(1 - momentum).add_(unbiased.to(running_var->scalar_type()), momentum);
  }
  return {global_mean, (global_var + eps).rsqrt()};
}

std::tuple<at::Tensor, at::Tensor> sync_bn_gather_stats(
    const at::Tensor& input, const at::Tensor& mean, const at::Tensor& invstd,
    const std::optional<at::Tensor>& running_mean, const std::optional<at::Tensor>& running_var, double momentum,
    double eps, int64_t count) {
  const at::Tensor counts = at::full({mean.size(0)}, count, mean.options());
  return sync_bn_gather_stats_with_counts(input, mean, invstd, running_mean, running_var, momentum, eps, counts);
}

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor> sync_bn_backward_reduce(
    const at::Tensor& grad_out, const at::Tensor& input, const at::Tensor& mean, const at::Tensor& invstd,
    const std::optional<at::Tensor>& weight, bool input_g, bool weight_g, bool bias_g) {
  const auto dims = reduce_dims(input);
  const at::Tensor dy = grad_out.to(mean.scalar_type());
  const at::Tensor sum_dy = dy.sum(dims);
  const at::Tensor sum_dy_xmu = (dy * (input.to(mean.scalar_type()) - per_channel(mean, input))).sum(dims);
  const auto param_dtype = given(weight) ? weight->scalar_type() : input.scalar_type();
  return {input_g ? sum_dy : at::Tensor(), input_g ? sum_dy_xmu : at::Tensor(),
          weight_g ? (sum_dy_xmu * invstd).to(param_dtype) : at::Tensor(),
          bias_g ? sum_dy.to(param_dtype) : at::Tensor()};
}

at::Tensor sync_bn_backward_elemt(const at::Tensor& grad_out, const at::Tensor& input, const at::Tensor& mean,
                                     const at::Tensor& invstd, const std::optional<at::Tensor>& weight,
                                     const at::Tensor& sum_dy, const at::Tensor& sum_dy_xmu, const at::Tensor& count) {
  const at::Tensor total = count.to(mean.scalar_type()).sum();
  const at::Tensor m = per_channel(mean, input), s = per_channel(invstd, input);
  at::Tensor scale = s;
  if (given(weight)) scale = scale * per_channel(*weight, input);
  const at::Tensor x = input.to(mean.scalar_type());
  const at::Tensor grad = (grad_out.to(mean.scalar_type()) - per_channel(sum_dy / total, input) -
                           (x - m) * s * s * per_channel(sum_dy_xmu / total, input)) *
                          scale;
  return grad.to(input.scalar_type());
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("_thnn_fused_lstm_cell", lstm_cell);
  m.impl("_thnn_fused_lstm_cell_backward_impl", lstm_cell_backward);
  m.impl("_thnn_fused_gru_cell", gru_cell);
  m.impl("_thnn_fused_gru_cell_backward", gru_cell_backward);
  m.impl("batch_norm_stats", sync_bn_stats);
  m.impl("batch_norm_elemt", sync_bn_elemt);
  m.impl("batch_norm_elemt.out", sync_bn_elemt_out);
  m.impl("batch_norm_gather_stats", sync_bn_gather_stats);
  m.impl("batch_norm_gather_stats_with_counts", sync_bn_gather_stats_with_counts);
  m.impl("batch_norm_backward_reduce", sync_bn_backward_reduce);
  m.impl("batch_norm_backward_elemt", sync_bn_backward_elemt);
}

TORCH_LIBRARY_IMPL(aten, AutogradPrivateUse1, m) {
  m.impl("lstm.input", lstm);
  m.impl("lstm.data", packed_lstm);
  m.impl("gru.input", rnn<&at::native::gru, &at::gru>);
  m.impl("gru.data", packed_rnn<&at::native::gru, &at::gru>);
  m.impl("rnn_tanh.input", rnn<&at::native::rnn_tanh, &at::rnn_tanh>);
  m.impl("rnn_tanh.data", packed_rnn<&at::native::rnn_tanh, &at::rnn_tanh>);
  m.impl("rnn_relu.input", rnn<&at::native::rnn_relu, &at::rnn_relu>);
  m.impl("rnn_relu.data", packed_rnn<&at::native::rnn_relu, &at::rnn_relu>);
}

}  // namespace softnpu
