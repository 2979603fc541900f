// Signal processing: DFT and STFT over ATen's FFTs, the Hann, Hamming and Blackman windows, MelWeightMatrix.
// ONNX carries complex values as a trailing dim of 2 (real, imaginary); a trailing dim of 1 is a real signal.
#include <ATen/ATen.h>

#include <cmath>

#include "model/ops/op.h"

namespace softnpu::offline {

namespace {

// The signal of x[..., 1 or 2] as a complex or real tensor in double precision: float32 FFTs leave rounding noise
// of 1e-6 where the exact result is 0, which a comparison with ONNX's double-precision reference rejects.
at::Tensor as_signal(const at::Tensor& x) {
  auto v = x.to(at::kDouble);
  if (v.size(-1) == 1) return v.squeeze(-1);
  if (v.size(-1) != 2) throw Unsupported("the last dim must be 1 (real) or 2 (complex)");
  return at::view_as_complex(v.contiguous());
}

at::Tensor as_pairs(const at::Tensor& r, at::ScalarType type) {
  return (r.is_complex() ? at::view_as_real(r) : r.unsqueeze(-1)).to(type);
}

Kernel dft(const OpContext& ctx) {
  bool axis_input = ctx.opset >= 20;
  int64_t attr_axis = ctx.attrs.i("axis", 1);
  bool inverse = ctx.attrs.i("inverse", 0), onesided = ctx.attrs.i("onesided", 0);
  return [=](const Tensors& in, Tensors& out) {
    const auto& x = in[0];
    int64_t r = x.dim();
    int64_t axis = axis_input ? (in.size() > 2 && in[2].defined() ? value_i64(in[2]) : -2) : attr_axis;
    axis = ((axis % r) + r) % r;
    if (axis == r - 1) throw Unsupported("the DFT axis cannot be the last (real/imaginary) dim");
    bool has_length = in.size() > 1 && in[1].defined();
    int64_t n = has_length ? value_i64(in[1]) : (inverse && onesided ? 2 * (x.size(axis) - 1) : x.size(axis));
    auto s = as_signal(x);
    at::Tensor y;
    if (!inverse) {
      y = at::fft_fft(s, n, axis);
      if (onesided) y = y.narrow(axis, 0, n / 2 + 1);
    } else {
      y = onesided ? at::fft_irfft(s, n, axis) : at::fft_ifft(s, n, axis);
    }
    out[0] = as_pairs(y, x.scalar_type());
  };
}

Kernel stft(const OpContext& ctx) {
  bool onesided = ctx.attrs.i("onesided", 1);
  return [onesided](const Tensors& in, Tensors& out) {
    const auto& x = in[0];
    int64_t step = value_i64(in[1]);
    bool has_window = in.size() > 2 && in[2].defined();
    int64_t length = in.size() > 3 && in[3].defined() ? value_i64(in[3]) : has_window ? in[2].size(0) : 0;
    if (length <= 0 || step <= 0) throw Unsupported("STFT needs a frame_length or a window, and a positive frame_step");
    auto s = as_signal(x);  // [batch, samples]
    auto frames = s.unfold(1, length, step);  // [batch, frames, length]
    if (has_window) frames = frames * in[2].to(at::kDouble);
    auto y = at::fft_fft(frames, length, -1);
    if (onesided && !s.is_complex()) y = y.narrow(-1, 0, length / 2 + 1);
    out[0] = as_pairs(y, x.scalar_type());
  };
}

enum class Window { kHann, kHamming, kBlackman };

template <Window W>
Kernel window(const OpContext& ctx) {
  auto type = scalar_type(static_cast<int32_t>(ctx.attrs.i("output_datatype", 1)));
  bool periodic = ctx.attrs.i("periodic", 1);
  return [type, periodic](const Tensors& in, Tensors& out) {
    int64_t size = value_i64(in[0]);
    auto n = at::arange(size, at::kDouble);
    double period = static_cast<double>(periodic ? size : size - 1);
    auto phase = n * (2 * M_PI / period);
    at::Tensor w;
    if (W == Window::kHann) w = 0.5 - 0.5 * at::cos(phase);
    if (W == Window::kHamming) w = 25.0 / 46.0 - (21.0 / 46.0) * at::cos(phase);
    if (W == Window::kBlackman) w = 0.42 - 0.5 * at::cos(phase) + 0.08 * at::cos(2 * phase);
    out[0] = w.to(type);
  };
}

// Triangular filters between mel-spaced frequencies, mapped to DFT bins by floor((dft_length + 1) * f / rate).
Kernel mel_weight_matrix(const OpContext& ctx) {
  auto type = scalar_type(static_cast<int32_t>(ctx.attrs.i("output_datatype", 1)));
  return [type](const Tensors& in, Tensors& out) {
    int64_t mel_bins = value_i64(in[0]), dft_length = value_i64(in[1]);
    double rate = value_f64(in[2]), low = value_f64(in[3]), high = value_f64(in[4]);
    int64_t spectrogram_bins = dft_length / 2 + 1;
    auto mel = [](double hz) { return 2595.0 * std::log10(1.0 + hz / 700.0); };
    double low_mel = mel(low), step = (mel(high) - low_mel) / static_cast<double>(mel_bins + 2);
    std::vector<int64_t> bins(mel_bins + 2);
    for (int64_t i = 0; i < mel_bins + 2; ++i) {
      double hz = 700.0 * (std::pow(10.0, (i * step + low_mel) / 2595.0) - 1.0);
      bins[i] = static_cast<int64_t>(std::floor((dft_length + 1) * hz / rate));
    }
    auto w = at::zeros({spectrogram_bins, mel_bins}, at::kDouble);
    auto a = w.accessor<double, 2>();
    for (int64_t i = 0; i < mel_bins; ++i) {
      int64_t lo = bins[i], center = bins[i + 1], hi = bins[i + 2];
      if (lo < 0 || center >= spectrogram_bins || hi > spectrogram_bins)
        throw Unsupported("the mel edges fall outside the DFT's bins");
      if (center - lo == 0) {
        a[center][i] = 1;
      } else {
        for (int64_t j = lo; j <= center; ++j) a[j][i] = static_cast<double>(j - lo) / (center - lo);
      }
      for (int64_t j = center; j < hi; ++j) a[j][i] = static_cast<double>(hi - j) / (hi - center);
    }
    out[0] = w.to(type);
  };
}

const bool registered = register_ops({
    {"DFT", dft, {1, 2}},
    {"STFT", stft, {1, 3}},
    {"HannWindow", window<Window::kHann>, {0}},
    {"HammingWindow", window<Window::kHamming>, {0}},
    {"BlackmanWindow", window<Window::kBlackman>, {0}},
    {"MelWeightMatrix", mel_weight_matrix, {0, 1, 2, 3, 4}},
});

}  // namespace

}  // namespace softnpu::offline
