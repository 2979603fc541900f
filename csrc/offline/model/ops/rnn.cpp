// Recurrent ONNX ops: RNN, GRU and LSTM, as one loop over time per direction. The input projection of every step is
// one matmul up front; each step adds the recurrent matmul, applies the gates, and masks batch entries whose
// sequence has ended (sequence_lens), so Y is zero there and Y_h holds each sequence's last state.
#include <ATen/ATen.h>

#include "model/ops/op.h"

namespace softnpu::offline {

namespace {

enum class Cell { kRnn, kGru, kLstm };

struct Activation {
  std::string name;
  double alpha = 0, beta = 0;
  at::Tensor operator()(const at::Tensor& x) const {
    if (name == "Sigmoid") return at::sigmoid(x);
    if (name == "Tanh") return at::tanh(x);
    if (name == "Relu") return at::relu(x);
    if (name == "Affine") return x * alpha + beta;
    if (name == "LeakyRelu") return at::where(x < 0, x * alpha, x);
    if (name == "ThresholdedRelu") return at::where(x > alpha, x, at::zeros_like(x));
    if (name == "ScaledTanh") return at::tanh(x * beta) * alpha;
    if (name == "HardSigmoid") return at::clamp(x * alpha + beta, 0, 1);
    if (name == "Elu") return at::where(x < 0, (at::exp(x) - 1) * alpha, x);
    if (name == "Softsign") return x / (1 + at::abs(x));
    return at::log1p(at::exp(x));  // Softplus
  }
};

// Default alpha and beta of each activation (ONNX's operator defaults) and whether it takes them.
Activation make_activation(const std::string& name, const std::vector<float>& alphas, const std::vector<float>& betas,
                           size_t* ai, size_t* bi) {
  struct Spec { const char* name; int params; double alpha, beta; };
  static const Spec specs[] = {{"Sigmoid", 0, 0, 0},    {"Tanh", 0, 0, 0},           {"Relu", 0, 0, 0},
                               {"Affine", 2, 1, 0},     {"LeakyRelu", 1, 0.01, 0},   {"ThresholdedRelu", 1, 1, 0},
                               {"ScaledTanh", 2, 1, 1}, {"HardSigmoid", 2, 0.2, 0.5}, {"Elu", 1, 1, 0},
                               {"Softsign", 0, 0, 0},   {"Softplus", 0, 0, 0}};
  for (const auto& s : specs) {
    if (name != s.name) continue;
    Activation a{name, s.alpha, s.beta};
    // The alpha and beta lists are consumed in order by the activations that take them.
    if (s.params >= 1 && *ai < alphas.size()) a.alpha = alphas[(*ai)++];
    if (s.params >= 2 && *bi < betas.size()) a.beta = betas[(*bi)++];
    return a;
  }
  throw Unsupported("activation " + name);
}

struct Config {
  Cell cell;
  int64_t directions = 1;
  bool reverse = false;  // a single reverse direction
  int64_t layout = 0;
  double clip = 0;       // 0: none
  bool linear_before_reset = false, input_forget = false;
  std::vector<std::vector<Activation>> acts;  // per direction
};

at::Tensor clipped(const at::Tensor& x, double clip) { return clip > 0 ? at::clamp(x, -clip, clip) : x; }

// One direction over time. x: [T, B, I]; w: [G*H, I]; r: [G*H, H]; b: [2*G*H] or undefined; p: [3*H] or undefined;
// h, c: [B, H]; lens: [B, 1] int64 or undefined. Returns Y [T, B, H] and the final h (and c).
std::tuple<at::Tensor, at::Tensor, at::Tensor> run_direction(const Config& cfg, const std::vector<Activation>& act,
                                                             const at::Tensor& x, const at::Tensor& w,
                                                             const at::Tensor& r, const at::Tensor& b,
                                                             const at::Tensor& p, at::Tensor h, at::Tensor c,
                                                             const at::Tensor& lens, bool reverse) {
  int64_t steps = x.size(0), hidden = r.size(1);
  int64_t gates = w.size(0) / hidden;
  auto xw = at::matmul(x, w.t());
  at::Tensor wb, rb;
  if (b.defined()) {
    wb = b.narrow(0, 0, gates * hidden);
    rb = b.narrow(0, gates * hidden, gates * hidden);
    xw = xw + wb;
  }
  std::vector<at::Tensor> ys(steps);
  for (int64_t k = 0; k < steps; ++k) {
    int64_t t = reverse ? steps - 1 - k : k;
    auto xt = xw[t];
    at::Tensor hn, cn;
    if (cfg.cell == Cell::kRnn) {
      auto g = xt + at::matmul(h, r.t());
      if (rb.defined()) g = g + rb;
      hn = act[0](clipped(g, cfg.clip));
    } else if (cfg.cell == Cell::kGru) {
      auto rzr = r.narrow(0, 0, 2 * hidden), rh = r.narrow(0, 2 * hidden, hidden);
      auto hzr = at::matmul(h, rzr.t());
      if (rb.defined()) hzr = hzr + rb.narrow(0, 0, 2 * hidden);
      auto z = act[0](clipped(xt.narrow(1, 0, hidden) + hzr.narrow(1, 0, hidden), cfg.clip));
      auto rt = act[0](clipped(xt.narrow(1, hidden, hidden) + hzr.narrow(1, hidden, hidden), cfg.clip));
      auto rbh = rb.defined() ? rb.narrow(0, 2 * hidden, hidden) : at::zeros({hidden}, h.options());
      auto hh = cfg.linear_before_reset ? rt * (at::matmul(h, rh.t()) + rbh) : at::matmul(rt * h, rh.t()) + rbh;
      auto cand = act[1](clipped(xt.narrow(1, 2 * hidden, hidden) + hh, cfg.clip));
      hn = (1 - z) * cand + z * h;
    } else {
      auto g = xt + at::matmul(h, r.t());
      if (rb.defined()) g = g + rb;
      auto gi = g.narrow(1, 0, hidden), go = g.narrow(1, hidden, hidden), gf = g.narrow(1, 2 * hidden, hidden),
           gc = g.narrow(1, 3 * hidden, hidden);
      if (p.defined()) {
        gi = gi + p.narrow(0, 0, hidden) * c;
        gf = gf + p.narrow(0, 2 * hidden, hidden) * c;
      }
      auto i = act[0](clipped(gi, cfg.clip));
      auto f = cfg.input_forget ? 1 - i : act[0](clipped(gf, cfg.clip));
      cn = f * c + i * act[1](clipped(gc, cfg.clip));
      if (p.defined()) go = go + p.narrow(0, hidden, hidden) * cn;
      auto o = act[0](clipped(go, cfg.clip));
      hn = o * act[2](cn);
    }
    if (lens.defined()) {
      auto live = lens > t;
      ys[t] = at::where(live, hn, at::zeros_like(hn));
      h = at::where(live, hn, h);
      if (cn.defined()) c = at::where(live, cn, c);
    } else {
      ys[t] = hn;
      h = hn;
      if (cn.defined()) c = cn;
    }
  }
  return {steps ? at::stack(ys) : at::empty({0, x.size(1), hidden}, x.options()), h, c};
}

template <Cell C>
Kernel recurrent(const OpContext& ctx) {
  Config cfg;
  cfg.cell = C;
  auto direction = ctx.attrs.s("direction", "forward");
  if (direction != "forward" && direction != "reverse" && direction != "bidirectional")
    throw Unsupported("direction " + direction);
  cfg.directions = direction == "bidirectional" ? 2 : 1;
  cfg.reverse = direction == "reverse";
  cfg.layout = ctx.attrs.i("layout", 0);
  cfg.clip = ctx.attrs.f("clip", 0.0f);
  cfg.linear_before_reset = ctx.attrs.i("linear_before_reset", 0);
  cfg.input_forget = ctx.attrs.i("input_forget", 0);
  std::vector<std::string> defaults = C == Cell::kRnn   ? std::vector<std::string>{"Tanh"}
                                      : C == Cell::kGru ? std::vector<std::string>{"Sigmoid", "Tanh"}
                                                        : std::vector<std::string>{"Sigmoid", "Tanh", "Tanh"};
  std::vector<std::string> names;
  if (const auto* a = ctx.attrs.find("activations"))
    for (const auto& s : a->strings()) names.push_back(s);
  size_t per = defaults.size();
  if (names.empty())
    for (int64_t d = 0; d < cfg.directions; ++d) names.insert(names.end(), defaults.begin(), defaults.end());
  if (names.size() != per * cfg.directions)
    throw Unsupported("activations lists " + std::to_string(names.size()) + " functions for " +
                      std::to_string(per * cfg.directions));
  auto alphas = ctx.attrs.floats("activation_alpha"), betas = ctx.attrs.floats("activation_beta");
  size_t ai = 0, bi = 0;
  for (int64_t d = 0; d < cfg.directions; ++d) {
    cfg.acts.emplace_back();
    for (size_t k = 0; k < per; ++k) cfg.acts.back().push_back(make_activation(names[d * per + k], alphas, betas, &ai, &bi));
  }
  return [cfg](const Tensors& in, Tensors& out) {
    auto input = [&](size_t i) { return i < in.size() && in[i].defined() ? in[i] : at::Tensor(); };
    auto x = cfg.layout ? in[0].transpose(0, 1) : in[0];
    const auto &w = in[1], &r = in[2];
    auto b = input(3), lens = input(4), h0 = input(5), c0 = C == Cell::kLstm ? input(6) : at::Tensor();
    auto p = C == Cell::kLstm ? input(7) : at::Tensor();
    int64_t batch = x.size(1), hidden = r.size(-1);
    if (cfg.layout) {
      if (h0.defined()) h0 = h0.transpose(0, 1);
      if (c0.defined()) c0 = c0.transpose(0, 1);
    }
    auto lens_col = lens.defined() ? lens.to(at::kLong).reshape({batch, 1}) : at::Tensor();
    std::vector<at::Tensor> ys, hs, cs;
    for (int64_t d = 0; d < cfg.directions; ++d) {
      auto h = h0.defined() ? h0[d] : at::zeros({batch, hidden}, x.options());
      auto c = C == Cell::kLstm ? (c0.defined() ? c0[d] : at::zeros({batch, hidden}, x.options())) : at::Tensor();
      bool reverse = cfg.reverse || d == 1;
      auto [y, hl, cl] = run_direction(cfg, cfg.acts[d], x, w[d], r[d], b.defined() ? b[d] : b,
                                       p.defined() ? p[d] : p, h, c, lens_col, reverse);
      ys.push_back(y);
      hs.push_back(hl);
      if (cl.defined()) cs.push_back(cl);
    }
    auto y = at::stack(ys, 1);    // [T, dirs, B, H]
    auto yh = at::stack(hs, 0);   // [dirs, B, H]
    if (cfg.layout) {
      y = y.permute({2, 0, 1, 3});
      yh = yh.transpose(0, 1);
    }
    if (out.size() > 0) out[0] = y.contiguous();
    if (out.size() > 1) out[1] = yh.contiguous();
    if (out.size() > 2 && C == Cell::kLstm) {
      auto yc = at::stack(cs, 0);
      out[2] = (cfg.layout ? yc.transpose(0, 1) : yc).contiguous();
    }
  };
}

const bool registered = register_ops({
    {"RNN", recurrent<Cell::kRnn>},
    {"GRU", recurrent<Cell::kGru>},
    {"LSTM", recurrent<Cell::kLstm>},
});

}  // namespace

}  // namespace softnpu::offline
