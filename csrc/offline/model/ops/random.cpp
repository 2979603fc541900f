// Random generators (RandomNormal, RandomUniform and their *Like forms, Bernoulli, Multinomial: never folded at
// conversion, drawn from a generator seeded by the `seed` attribute, else the default CPU generator) and
// NonMaxSuppression.
#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>

#include <algorithm>
#include <numeric>

#include "model/ops/op.h"

namespace softnpu::offline {

namespace {

enum class Dist { kUniform, kNormal };

// RandomUniform/RandomNormal (shape and dtype from attributes) and their *Like forms (from the input).
template <Dist D, bool Like>
Kernel random(const OpContext& ctx) {
  auto shape = ctx.attrs.ints("shape");
  bool has_dtype = ctx.attrs.has("dtype");
  auto type = has_dtype ? scalar_type(static_cast<int32_t>(ctx.attrs.i("dtype", 1))) : at::kFloat;
  double a = D == Dist::kUniform ? ctx.attrs.f("low", 0.0f) : ctx.attrs.f("mean", 0.0f);
  double b = D == Dist::kUniform ? ctx.attrs.f("high", 1.0f) : ctx.attrs.f("scale", 1.0f);
  bool seeded = ctx.attrs.has("seed");
  auto seed = ctx.attrs.f("seed", 0.0f);
  return [=](const Tensors& in, Tensors& out) {
    auto options = Like ? in[0].options().dtype(has_dtype ? type : in[0].scalar_type()) : at::TensorOptions().dtype(type);
    auto y = at::empty(Like ? in[0].sizes().vec() : shape, options);
    if (y.is_meta()) {
      out[0] = y;
      return;
    }
    auto gen = seeded ? at::detail::createCPUGenerator(static_cast<uint64_t>(seed)) : at::detail::getDefaultCPUGenerator();
    if (D == Dist::kUniform) y.uniform_(a, b, gen);
    else y.normal_(a, b, gen);
    out[0] = y;
  };
}

Kernel bernoulli(const OpContext& ctx) {
  bool has_dtype = ctx.attrs.has("dtype");
  auto type = has_dtype ? scalar_type(static_cast<int32_t>(ctx.attrs.i("dtype", 1))) : at::kFloat;
  bool seeded = ctx.attrs.has("seed");
  auto seed = ctx.attrs.f("seed", 0.0f);
  return [=](const Tensors& in, Tensors& out) {
    auto to = has_dtype ? type : in[0].scalar_type();
    if (in[0].is_meta()) {
      out[0] = at::empty(in[0].sizes(), in[0].options().dtype(to));
      return;
    }
    auto gen = seeded ? at::detail::createCPUGenerator(static_cast<uint64_t>(seed)) : at::detail::getDefaultCPUGenerator();
    out[0] = at::bernoulli(in[0].to(at::kDouble), gen).to(to);
  };
}

Kernel multinomial(const OpContext& ctx) {
  auto type = scalar_type(static_cast<int32_t>(ctx.attrs.i("dtype", 6)));
  int64_t samples = ctx.attrs.i("sample_size", 1);
  bool seeded = ctx.attrs.has("seed");
  auto seed = ctx.attrs.f("seed", 0.0f);
  return [=](const Tensors& in, Tensors& out) {
    if (in[0].is_meta()) {
      out[0] = at::empty({in[0].size(0), samples}, in[0].options().dtype(type));
      return;
    }
    auto gen = seeded ? at::detail::createCPUGenerator(static_cast<uint64_t>(seed)) : at::detail::getDefaultCPUGenerator();
    // The input holds unnormalized log-probabilities.
    out[0] = at::multinomial(at::softmax(in[0].to(at::kDouble), 1), samples, true, gen).to(type);
  };
}

struct Box {
  float y1, x1, y2, x2;
};

float iou(const Box& a, const Box& b) {
  float ih = std::min(a.y2, b.y2) - std::max(a.y1, b.y1), iw = std::min(a.x2, b.x2) - std::max(a.x1, b.x1);
  if (ih <= 0 || iw <= 0) return 0;
  float inter = ih * iw;
  float uni = (a.y2 - a.y1) * (a.x2 - a.x1) + (b.y2 - b.y1) * (b.x2 - b.x1) - inter;
  return uni > 0 ? inter / uni : 0;
}

// Greedy per batch and class: candidates above score_threshold by decreasing score (the lower index first on ties),
// each kept unless its IoU with a kept box exceeds iou_threshold, up to max_output_boxes_per_class.
Kernel non_max_suppression(const OpContext& ctx) {
  bool center = ctx.attrs.i("center_point_box", 0);
  return [center](const Tensors& in, Tensors& out) {
    if (in[0].is_meta() || in[1].is_meta()) throw DataDependent("the boxes and scores decide the output's size");
    int64_t max_out = in.size() > 2 && in[2].defined() && in[2].numel() ? value_i64(in[2]) : 0;
    double iou_threshold = in.size() > 3 && in[3].defined() && in[3].numel() ? value_f64(in[3]) : 0.0;
    bool has_score = in.size() > 4 && in[4].defined() && in[4].numel();
    double score_threshold = has_score ? value_f64(in[4]) : 0.0;
    auto boxes = in[0].to(at::kFloat).contiguous();
    auto scores = in[1].to(at::kFloat).contiguous();
    int64_t batches = boxes.size(0), n = boxes.size(1), classes = scores.size(1);
    if (scores.size(0) != batches || scores.size(2) != n) throw Unsupported("boxes and scores disagree in shape");
    auto b = boxes.accessor<float, 3>();
    auto s = scores.accessor<float, 3>();
    std::vector<int64_t> selected;
    for (int64_t bi = 0; bi < batches; ++bi) {
      std::vector<Box> bx(n);
      for (int64_t i = 0; i < n; ++i) {
        if (center) {
          float xc = b[bi][i][0], yc = b[bi][i][1], w = b[bi][i][2], h = b[bi][i][3];
          bx[i] = {yc - h / 2, xc - w / 2, yc + h / 2, xc + w / 2};
        } else {
          bx[i] = {std::min(b[bi][i][0], b[bi][i][2]), std::min(b[bi][i][1], b[bi][i][3]),
                   std::max(b[bi][i][0], b[bi][i][2]), std::max(b[bi][i][1], b[bi][i][3])};
        }
      }
      for (int64_t c = 0; c < classes; ++c) {
        std::vector<int64_t> order;
        for (int64_t i = 0; i < n; ++i)
          if (!has_score || s[bi][c][i] > score_threshold) order.push_back(i);
        std::stable_sort(order.begin(), order.end(), [&](int64_t x, int64_t y) { return s[bi][c][x] > s[bi][c][y]; });
        std::vector<int64_t> kept;
        for (int64_t i : order) {
          if (static_cast<int64_t>(kept.size()) >= max_out) break;
          bool suppressed = std::any_of(kept.begin(), kept.end(), [&](int64_t k) { return iou(bx[i], bx[k]) > iou_threshold; });
          if (!suppressed) kept.push_back(i);
        }
        for (int64_t k : kept) selected.insert(selected.end(), {bi, c, k});
      }
    }
    out[0] = at::tensor(selected, at::kLong).reshape({-1, 3});
  };
}

const bool registered = register_ops({
    {"RandomUniform", random<Dist::kUniform, false>, {}, false},
    {"RandomNormal", random<Dist::kNormal, false>, {}, false},
    {"RandomUniformLike", random<Dist::kUniform, true>, {}, false},
    {"RandomNormalLike", random<Dist::kNormal, true>, {}, false},
    {"Bernoulli", bernoulli, {}, false},
    {"Multinomial", multinomial, {}, false},
    {"NonMaxSuppression", non_max_suppression, {0, 1, 2, 3, 4}},
});

}  // namespace

}  // namespace softnpu::offline
