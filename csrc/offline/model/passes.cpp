// The lowering passes, run once at conversion so that executing does no graph work: nodes no output needs are
// dropped, batch norm after a convolution is folded into its weights, an activation after a convolution or matmul
// runs inside it, a bias added after a matmul becomes the GEMM's bias, a residual added after a convolution or matmul
// becomes its fourth input, the exported attention core becomes one node that also splits and merges the heads,
// products of the same rows by constant matrices become one, 3x3 convolutions choose their Winograd tile; then the
// precision mode marks nodes.
#include <ATen/ATen.h>

#include <map>
#include <optional>
#include <set>

#include "model/graph.h"
#include "model/ops/op.h"
#include "model/ops/winograd.h"
#include "model/precision.h"

namespace softnpu::offline {

namespace {

void set_attr_s(onnx::NodeProto& n, const std::string& name, const std::string& value) {
  auto* a = n.add_attribute();
  a->set_name(name);
  a->set_type(onnx::AttributeProto::STRING);
  a->set_s(value);
}

struct Uses {
  std::map<std::string, int> count;
  std::map<std::string, size_t> consumer;  // the consumer of a value used once
};

Uses uses(const Graph& g, const std::vector<std::string>& outputs) {
  Uses u;
  for (size_t i = 0; i < g.nodes.size(); ++i)
    for (const auto& in : g.nodes[i].input())
      if (!in.empty()) ++u.count[in], u.consumer[in] = i;
  for (const auto& o : outputs) u.count[o] += 2;  // a graph output is never fused away
  return u;
}

void drop_dead_nodes(Graph& g, const std::vector<std::string>& outputs) {
  std::set<std::string> needed(outputs.begin(), outputs.end());
  std::vector<onnx::NodeProto> kept;
  for (auto it = g.nodes.rbegin(); it != g.nodes.rend(); ++it) {
    bool live = false;
    for (const auto& o : it->output()) live |= needed.count(o) > 0;
    if (!live) continue;
    for (const auto& in : it->input()) needed.insert(in);
    kept.push_back(*it);
  }
  g.nodes.assign(kept.rbegin(), kept.rend());
  for (auto it = g.constants.begin(); it != g.constants.end();)
    it = needed.count(it->first) ? std::next(it) : g.constants.erase(it);
}

// Drops the nodes at these indices (fused into another).
void erase_nodes(Graph& g, const std::set<size_t>& removed) {
  std::vector<onnx::NodeProto> kept;
  for (size_t i = 0; i < g.nodes.size(); ++i)
    if (!removed.count(i)) kept.push_back(std::move(g.nodes[i]));
  g.nodes = std::move(kept);
}

bool is_const(const Graph& g, const std::string& name) { return !name.empty() && g.constants.count(name); }

// Which node makes each value.
std::map<std::string, size_t> producers(const Graph& g) {
  std::map<std::string, size_t> producer;
  for (size_t i = 0; i < g.nodes.size(); ++i)
    for (const auto& o : g.nodes[i].output()) producer[o] = i;
  return producer;
}

// A value as the evaluation left it (a constant, or a meta tensor of its dtype and shape); undefined where unknown.
at::Tensor evaluated(const std::map<std::string, AbstractValue>& values, const std::string& name) {
  auto it = values.find(name);
  return it != values.end() && it->second.tensor.defined() ? it->second.tensor : at::Tensor();
}

// Conv -> BatchNormalization (inference): W' = W * s, B' = (B - mean) * s + beta, with s = gamma / sqrt(var + eps).
void fold_batch_norm(Graph& g, const std::vector<std::string>& outputs) {
  auto u = uses(g, outputs);
  std::set<size_t> removed;
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    auto& conv = g.nodes[i];
    if (conv.op_type() != "Conv" || conv.output_size() != 1 || !is_const(g, conv.input(1))) continue;
    if (conv.input_size() > 2 && !conv.input(2).empty() && !is_const(g, conv.input(2))) continue;
    const auto& y = conv.output(0);
    if (u.count[y] != 1) continue;
    size_t ci = u.consumer[y];
    auto& bn = g.nodes[ci];
    if (bn.op_type() != "BatchNormalization" || bn.input(0) != y || Attrs(bn).i("training_mode", 0) != 0) continue;
    if (bn.output_size() > 1 && std::any_of(bn.output().begin() + 1, bn.output().end(), [](const std::string& s) { return !s.empty(); }))
      continue;
    bool consts = true;
    for (int k = 1; k < 5; ++k) consts &= is_const(g, bn.input(k));
    if (!consts) continue;
    auto w = g.constants[conv.input(1)];
    if (!w.is_floating_point()) continue;
    auto eps = Attrs(bn).f("epsilon", 1e-5f);
    auto gamma = g.constants[bn.input(1)].to(at::kDouble), beta = g.constants[bn.input(2)].to(at::kDouble);
    auto mean = g.constants[bn.input(3)].to(at::kDouble), var = g.constants[bn.input(4)].to(at::kDouble);
    auto s = gamma / (var + eps).sqrt();
    std::vector<int64_t> bshape(w.dim(), 1);
    bshape[0] = -1;
    auto b = conv.input_size() > 2 && !conv.input(2).empty() ? g.constants[conv.input(2)].to(at::kDouble)
                                                              : at::zeros_like(mean);
    auto new_w = (w.to(at::kDouble) * s.reshape(bshape)).to(w.scalar_type()).contiguous();
    auto new_b = ((b - mean) * s + beta).to(w.scalar_type()).contiguous();
    auto wname = conv.name() + "/folded_weight", bname = conv.name() + "/folded_bias";
    g.constants[wname] = new_w;
    g.constants[bname] = new_b;
    conv.set_input(1, wname);
    if (conv.input_size() > 2) conv.set_input(2, bname); else conv.add_input(bname);
    conv.set_output(0, bn.output(0));
    removed.insert(ci);
  }
  erase_nodes(g, removed);
}

// Conv / MatMul / Gemm -> Add(., r) with r of the node's output shape and type (a residual connection): the node adds
// r before its activation (a fourth input, an extension only softnpu's kernels read), so the sum is not another pass
// over the activations. Shapes are the evaluation's.
void fuse_residual_add(Graph& g, const std::vector<std::string>& outputs,
                       const std::map<std::string, AbstractValue>& values) {
  auto u = uses(g, outputs);
  auto shape_of = [&](const std::string& name) { return evaluated(values, name); };
  std::set<size_t> removed;
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    auto& n = g.nodes[i];
    const auto& t = n.op_type();
    if ((t != "Conv" && t != "MatMul" && t != "Gemm") || n.output_size() != 1 || n.input_size() > 3 ||
        Attrs(n).has("softnpu_activation") || u.count[n.output(0)] != 1)
      continue;
    size_t ci = u.consumer[n.output(0)];
    auto& add = g.nodes[ci];
    if (add.op_type() != "Add" || removed.count(ci) || add.input(0) == add.input(1)) continue;
    const auto& other = add.input(0) == n.output(0) ? add.input(1) : add.input(0);
    auto y = shape_of(n.output(0)), r = shape_of(other);
    if (!y.defined() || !r.defined() || y.sizes() != r.sizes() || y.scalar_type() != r.scalar_type()) continue;
    // The residual must exist before the node runs: produced by an earlier node, or an input or constant.
    bool earlier = true;
    for (size_t k = i; k < g.nodes.size() && earlier; ++k)
      for (const auto& o : g.nodes[k].output()) earlier &= o != other;
    if (!earlier) continue;
    while (n.input_size() < 3) n.add_input("");
    n.add_input(other);
    n.set_output(0, add.output(0));
    removed.insert(ci);
  }
  erase_nodes(g, removed);
}

// Conv / ConvTranspose / Gemm / MatMul -> Relu, and Gemm / MatMul -> Gelu or Tanh (BERT's pooler): the producer
// applies it to its output (in its kernel's epilogue, or in place after ATen's).
void fuse_activation(Graph& g, const std::vector<std::string>& outputs) {
  auto u = uses(g, outputs);
  std::set<size_t> removed;
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    auto& n = g.nodes[i];
    const auto& t = n.op_type();
    if (t != "Conv" && t != "ConvTranspose" && t != "Gemm" && t != "MatMul") continue;
    if (n.output_size() != 1 || Attrs(n).has("softnpu_activation") || u.count[n.output(0)] != 1) continue;
    size_t ci = u.consumer[n.output(0)];
    auto& act = g.nodes[ci];
    if (removed.count(ci)) continue;
    std::string fused;
    if (act.op_type() == "Relu") fused = "Relu";
    if (act.op_type() == "Gelu" && (t == "Gemm" || t == "MatMul")) {
      auto form = Attrs(act).s("approximate", "none");
      fused = form == "none" ? "Gelu" : form == "tanh" ? "GeluTanh" : "";
    }
    if (act.op_type() == "Tanh" && (t == "Gemm" || t == "MatMul")) fused = "Tanh";
    if (fused.empty()) continue;
    set_attr_s(n, "softnpu_activation", fused);
    n.set_output(0, act.output(0));
    removed.insert(ci);
  }
  erase_nodes(g, removed);
}

// MatMul(x, W) -> Add(., b) with constant 2-D W and 1-D b of W's columns: one GEMM with its bias (MatMul's third
// input, an extension only softnpu's kernel reads).
void fuse_matmul_bias(Graph& g, const std::vector<std::string>& outputs) {
  auto u = uses(g, outputs);
  std::set<size_t> removed;
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    auto& mm = g.nodes[i];
    if (mm.op_type() != "MatMul" || mm.input_size() != 2 || !is_const(g, mm.input(1))) continue;
    const auto& w = g.constants[mm.input(1)];
    if (w.dim() != 2 || !w.is_floating_point() || u.count[mm.output(0)] != 1) continue;
    size_t ci = u.consumer[mm.output(0)];
    auto& add = g.nodes[ci];
    if (add.op_type() != "Add" || removed.count(ci)) continue;
    const auto& other = add.input(0) == mm.output(0) ? add.input(1) : add.input(0);
    if (!is_const(g, other)) continue;
    const auto& b = g.constants[other];
    if (b.dim() != 1 || b.size(0) != w.size(1) || b.scalar_type() != w.scalar_type()) continue;
    mm.add_input(other);
    mm.set_output(0, add.output(0));
    removed.insert(ci);
  }
  erase_nodes(g, removed);
}

// MatMul(q, kt) -> [Add(., mask)] -> Softmax(last axis) -> [Where(IsNaN(.), 0, .)] -> MatMul(., v), every value
// between them used once, float32 of the evaluation's shapes with equal batch dims: one softnpu:SoftmaxAttention node
// (ops/softmax_attention.cpp) in place of the last MatMul, with q's and kt's multiplications by scalar constants as
// its scale. torch.onnx.export writes scaled_dot_product_attention so.
void fuse_softmax_attention(Graph& g, const std::vector<std::string>& outputs,
                            const std::map<std::string, AbstractValue>& values) {
  auto u = uses(g, outputs);
  const auto producer = producers(g);
  auto value = [&](const std::string& name) { return evaluated(values, name); };
  auto made_by = [&](const std::string& name, const char* type) -> onnx::NodeProto* {
    auto it = producer.find(name);
    return it != producer.end() && g.nodes[it->second].op_type() == type && g.nodes[it->second].domain().empty()
               ? &g.nodes[it->second] : nullptr;
  };
  auto single_consumer = [&](const std::string& name) -> onnx::NodeProto* {
    return u.count[name] == 1 ? &g.nodes[u.consumer[name]] : nullptr;
  };
  std::set<size_t> removed;
  for (size_t si = 0; si < g.nodes.size(); ++si) {
    auto& softmax = g.nodes[si];
    if (softmax.op_type() != "Softmax" || !softmax.domain().empty() || g.metadata.opset < 13) continue;
    auto scores = value(softmax.input(0));
    if (!scores.defined() || scores.scalar_type() != at::kFloat || scores.dim() < 2 ||
        normalize_axis(Attrs(softmax).i("axis", -1), scores.dim()) != scores.dim() - 1 || u.count[softmax.input(0)] != 1)
      continue;
    // Before the softmax: the product, with the mask added or not.
    onnx::NodeProto* add = made_by(softmax.input(0), "Add");
    std::string product = softmax.input(0), mask;
    if (add) {
      bool first = made_by(add->input(0), "MatMul") && u.count[add->input(0)] == 1;
      product = first ? add->input(0) : add->input(1);
      mask = first ? add->input(1) : add->input(0);
      auto m = value(mask);
      if (!m.defined() || m.scalar_type() != at::kFloat || m.dim() > scores.dim() || u.count[product] != 1) continue;
    }
    onnx::NodeProto* mm1 = made_by(product, "MatMul");
    if (!mm1 || Attrs(*mm1).has("softnpu_activation")) continue;
    // A mask of the scores' own shape is already the product's residual input (fuse_residual_add).
    if (!add && mm1->input_size() == 4 && mm1->input(2).empty()) mask = mm1->input(3);
    else if (mm1->input_size() != 2) continue;
    // After it: the Where that zeroes NaNs, or not; then the product by v.
    std::string probs = softmax.output(0);
    onnx::NodeProto *isnan = nullptr, *where = nullptr;
    if (u.count[probs] == 2) {
      for (size_t k = si + 1; k < g.nodes.size(); ++k) {
        auto& n = g.nodes[k];
        if (n.op_type() == "IsNaN" && n.input(0) == probs) isnan = &n;
      }
      if (!isnan || u.count[isnan->output(0)] != 1) continue;
      where = single_consumer(isnan->output(0));
      if (!where || where->op_type() != "Where" || where->input(0) != isnan->output(0) || where->input(2) != probs ||
          !is_const(g, where->input(1)) || g.constants[where->input(1)].numel() != 1 ||
          value_f64(g.constants[where->input(1)]) != 0.0)
        continue;
      probs = where->output(0);
    }
    onnx::NodeProto* mm2 = single_consumer(probs);
    if (!mm2 || mm2->op_type() != "MatMul" || !mm2->domain().empty() || mm2->input(0) != probs) continue;
    auto q = value(mm1->input(0)), kt = value(mm1->input(1)), v = value(mm2->input(1));
    if (!q.defined() || !kt.defined() || !v.defined() || q.dim() != scores.dim() || kt.dim() != q.dim() ||
        v.dim() != q.dim() || q.scalar_type() != at::kFloat || kt.scalar_type() != at::kFloat ||
        v.scalar_type() != at::kFloat)
      continue;
    auto batch = q.sizes().slice(0, q.dim() - 2);
    if (kt.sizes().slice(0, q.dim() - 2) != batch || v.sizes().slice(0, q.dim() - 2) != batch) continue;
    // q and kt multiplied by scalar constants (the exporter's sqrt of the softmax scale on each): the scores' scale.
    double scale = 1.0;
    std::string operand[2] = {mm1->input(0), mm1->input(1)};
    std::vector<onnx::NodeProto*> scalings;
    for (auto& name : operand) {
      onnx::NodeProto* mul = made_by(name, "Mul");
      if (!mul || u.count[name] != 1) continue;
      for (int k = 0; k < 2; ++k) {
        const auto& c = mul->input(k);
        if (!is_const(g, c) || g.constants[c].numel() != 1 || g.constants[c].scalar_type() != at::kFloat ||
            is_const(g, mul->input(1 - k)))
          continue;
        auto other = value(mul->input(1 - k));
        if (!other.defined() || other.sizes() != value(name).sizes()) continue;
        scale *= value_f64(g.constants[c]);
        name = mul->input(1 - k);
        scalings.push_back(mul);
        break;
      }
    }
    onnx::NodeProto fused;
    fused.set_name(mm2->name());
    fused.set_domain("softnpu");
    fused.set_op_type("SoftmaxAttention");
    for (const auto& in : {operand[0], operand[1], mm2->input(1)}) fused.add_input(in);
    if (!mask.empty()) fused.add_input(mask);
    fused.add_output(mm2->output(0));
    set_int_attr(fused, "nan_to_zero", where != nullptr);
    if (scale != 1.0) {
      auto* a = fused.add_attribute();
      a->set_name("scale");
      a->set_type(onnx::AttributeProto::FLOAT);
      a->set_f(static_cast<float>(scale));
    }
    for (auto* n : {mm1, add, &softmax, isnan, where})
      if (n) removed.insert(n - g.nodes.data());
    for (auto* n : scalings) removed.insert(n - g.nodes.data());
    *mm2 = std::move(fused);
  }
  erase_nodes(g, removed);
}

// Where a chain of Reshape and Transpose puts the elements of its start (a contiguous tensor), followed without running
// the chain: each dim of the result is a run of atoms (outermost first), an atom a size and a stride of the start.
// A Reshape regroups the atoms (splitting one where a new dim ends inside it), a Transpose reorders the dims; so a
// chain that copies on the way (merging dims that are not adjacent in memory) is still followed.
struct Atom {
  int64_t size, stride;
};
using View = std::vector<std::vector<Atom>>;

View contiguous_view(at::IntArrayRef sizes) {
  View v(sizes.size());
  int64_t stride = 1;
  for (int64_t d = static_cast<int64_t>(sizes.size()) - 1; d >= 0; --d) {
    if (sizes[d] != 1) v[d].push_back({sizes[d], stride});
    stride *= sizes[d];
  }
  return v;
}

std::optional<View> reshape_view(const View& v, at::IntArrayRef sizes) {
  std::vector<Atom> atoms;
  for (const auto& dim : v) atoms.insert(atoms.end(), dim.begin(), dim.end());
  View out(sizes.size());
  size_t next = 0;
  for (size_t d = 0; d < sizes.size(); ++d) {
    for (int64_t left = sizes[d]; left != 1;) {
      if (next == atoms.size()) return std::nullopt;
      Atom& a = atoms[next];
      if (a.size <= left && left % a.size == 0) {
        out[d].push_back(a), left /= a.size, ++next;
      } else if (a.size % left == 0) {  // the dim ends inside the atom: it takes the atom's outer part
        out[d].push_back({left, a.stride * (a.size / left)}), a.size /= left, left = 1;
      } else {
        return std::nullopt;
      }
    }
  }
  if (next != atoms.size()) return std::nullopt;
  return out;
}

// The view after a Reshape (to its evaluated output shape, with a constant shape input) or a Transpose; nullopt for
// any other node.
std::optional<View> follow(const Graph& g, const View& v, const onnx::NodeProto& n, const at::Tensor& out) {
  if (!n.domain().empty() || !out.defined()) return std::nullopt;
  if (n.op_type() == "Transpose") {
    std::vector<int64_t> reversed(v.size());
    for (size_t d = 0; d < reversed.size(); ++d) reversed[d] = static_cast<int64_t>(reversed.size() - 1 - d);
    auto perm = Attrs(n).ints("perm", reversed);
    if (perm.size() != v.size()) return std::nullopt;
    View t;
    for (auto p : perm) {
      if (p < 0 || p >= static_cast<int64_t>(v.size())) return std::nullopt;
      t.push_back(v[p]);
    }
    return t;
  }
  if (n.op_type() != "Reshape" || !is_const(g, n.input(1))) return std::nullopt;
  return reshape_view(v, out.sizes());
}

// The view is the strided tensor of these sizes and strides: each dim's atoms make one stride (strides of dims of
// one element do not matter).
bool same_layout(const View& v, const std::vector<int64_t>& sizes, const std::vector<int64_t>& strides) {
  if (v.size() != sizes.size()) return false;
  for (size_t d = 0; d < sizes.size(); ++d) {
    int64_t size = 1;
    for (size_t k = 0; k < v[d].size(); ++k) {
      size *= v[d][k].size;
      if (k + 1 < v[d].size() && v[d][k].stride != v[d][k + 1].size * v[d][k + 1].stride) return false;
    }
    if (size != sizes[d] || (size > 1 && v[d].back().stride != strides[d])) return false;
  }
  return true;
}

// SoftmaxAttention whose q, kt and v are the exporter's head split of [B, S, H*D] products (Reshape to [B, S, H, D]
// and Transpose; for kt, whatever chain of the two lands on [B, H, D, T]) and whose output is merged back the same way
// (Transpose, Reshape to [B, S, H*E]): the node takes the products and writes the merged output itself, its heads
// form (ops/softmax_attention.cpp), and the chains' copies are gone. A chain is followed as a strided view of its
// start and must land on the head split's layout; every value in it is used once.
void fuse_attention_heads(Graph& g, const std::vector<std::string>& outputs,
                          const std::map<std::string, AbstractValue>& values) {
  auto u = uses(g, outputs);
  const auto producer = producers(g);
  auto value = [&](const std::string& name) { return evaluated(values, name); };
  auto is_layout = [](const onnx::NodeProto& n) {
    return n.domain().empty() && (n.op_type() == "Reshape" || n.op_type() == "Transpose");
  };
  // From an input of the node back to the first value a layout node did not make: that value, the chain in order and
  // where the chain puts the start's elements (nullopt if the start is not a 3-D float tensor or the chain has
  // another node).
  struct Split {
    std::string start;
    std::vector<size_t> chain;
    std::optional<View> view;
  };
  auto split_of = [&](std::string name) {
    Split s;
    for (auto it = producer.find(name); it != producer.end() && is_layout(g.nodes[it->second]) && u.count[name] == 1;
         it = producer.find(name)) {
      s.chain.insert(s.chain.begin(), it->second);
      name = g.nodes[it->second].input(0);
    }
    s.start = name;
    auto x = value(name);
    if (s.chain.empty() || !x.defined() || x.dim() != 3 || x.scalar_type() != at::kFloat) return s;
    s.view = contiguous_view(x.sizes());
    for (size_t k = 0; k < s.chain.size() && s.view; ++k) {
      const auto& n = g.nodes[s.chain[k]];
      s.view = follow(g, *s.view, n, value(n.output(0)));
    }
    return s;
  };
  std::set<size_t> removed;
  for (auto& att : g.nodes) {
    if (att.domain() != "softnpu" || att.op_type() != "SoftmaxAttention" || Attrs(att).has("heads")) continue;
    auto y = value(att.output(0));
    if (!y.defined() || y.dim() != 4 || u.count[att.output(0)] != 1) continue;
    auto q = split_of(att.input(0)), kt = split_of(att.input(1)), v = split_of(att.input(2));
    if (!q.view || !kt.view || !v.view) continue;
    auto qv = value(att.input(0)), ktv = value(att.input(1)), vv = value(att.input(2));
    if (!qv.defined() || !ktv.defined() || !vv.defined() || qv.dim() != 4 || ktv.dim() != 4 || vv.dim() != 4) continue;
    const int64_t B = qv.size(0), H = qv.size(1), S = qv.size(2), D = qv.size(3), T = ktv.size(3), E = vv.size(3);
    if (!same_layout(*q.view, {B, H, S, D}, {S * H * D, D, H * D, 1}) ||
        !same_layout(*kt.view, {B, H, D, T}, {T * H * D, D, 1, H * D}) ||
        !same_layout(*v.view, {B, H, T, E}, {T * H * E, E, H * E, 1}))
      continue;
    if (value(q.start).sizes() != at::IntArrayRef{B, S, H * D} || value(kt.start).sizes() != at::IntArrayRef{B, T, H * D} ||
        value(v.start).sizes() != at::IntArrayRef{B, T, H * E})
      continue;
    // After it: the node writes [B, S, H, E], which the chain must read as [B, S, H*E].
    View out = contiguous_view({B, S, H, E});
    std::swap(out[1], out[2]);
    std::vector<size_t> merge;
    std::string merged = att.output(0);
    while (u.count[merged] == 1 && !same_layout(out, {B, S, H * E}, {S * H * E, H * E, 1})) {
      auto& n = g.nodes[u.consumer[merged]];
      auto next = is_layout(n) && n.input(0) == merged ? follow(g, out, n, value(n.output(0))) : std::nullopt;
      if (!next) break;
      out = *next;
      merge.push_back(u.consumer[merged]);
      merged = n.output(0);
    }
    if (merge.empty() || !same_layout(out, {B, S, H * E}, {S * H * E, H * E, 1})) continue;
    att.set_input(0, q.start);
    att.set_input(1, kt.start);
    att.set_input(2, v.start);
    att.set_output(0, merged);
    set_int_attr(att, "heads", H);
    for (const auto* chain : {&q.chain, &kt.chain, &v.chain, &merge}) removed.insert(chain->begin(), chain->end());
  }
  erase_nodes(g, removed);
}

// MatMuls of one input by constant matrices (attention's q, k and v projections): one product by the matrices side by
// side, whose outputs are its column blocks (attribute softnpu_split, their widths; ops/nn.cpp). One pass over the
// input instead of three, and a product wide enough to share among threads. Each must be a plain product of the same
// rows (no residual or activation), its bias absent or constant; widths are multiples of 16,
// so each block stays on the packed kernel's panels (ops/direct_conv.h).
void merge_shared_input_products(Graph& g) {
  auto mergeable = [&](const onnx::NodeProto& n) {
    if (n.op_type() != "MatMul" || !n.domain().empty() || n.output_size() != 1 || n.input_size() > 3 ||
        !is_const(g, n.input(1)) || Attrs(n).has("softnpu_activation"))
      return false;
    const auto& w = g.constants[n.input(1)];
    if (w.dim() != 2 || w.scalar_type() != at::kFloat || w.size(1) % 16 != 0) return false;
    if (n.input_size() < 3 || n.input(2).empty()) return true;
    if (!is_const(g, n.input(2))) return false;
    const auto& b = g.constants[n.input(2)];
    return b.dim() == 1 && b.size(0) == w.size(1) && b.scalar_type() == at::kFloat;
  };
  std::map<std::string, std::vector<size_t>> by_input;  // rows -> the mergeable products of them, in order
  for (size_t i = 0; i < g.nodes.size(); ++i)
    if (mergeable(g.nodes[i])) by_input[g.nodes[i].input(0)].push_back(i);
  std::set<size_t> removed;
  for (auto& [rows, group] : by_input) {
    const int64_t k = g.constants[g.nodes[group[0]].input(1)].size(0);
    std::vector<size_t> same;
    for (size_t i : group)
      if (g.constants[g.nodes[i].input(1)].size(0) == k) same.push_back(i);
    if (same.size() < 2) continue;
    std::vector<at::Tensor> matrices, biases;
    bool any_bias = false;
    auto& first = g.nodes[same[0]];
    onnx::NodeProto merged;
    merged.set_name(first.name());
    merged.set_op_type("MatMul");
    auto* split = merged.add_attribute();
    split->set_name("softnpu_split");
    split->set_type(onnx::AttributeProto::INTS);
    for (size_t i : same) {
      const auto& n = g.nodes[i];
      const auto& w = g.constants[n.input(1)];
      matrices.push_back(w);
      bool bias = n.input_size() > 2 && !n.input(2).empty();
      any_bias |= bias;
      biases.push_back(bias ? g.constants[n.input(2)] : at::zeros({w.size(1)}, w.options()));
      split->add_ints(w.size(1));
      merged.add_output(n.output(0));
      if (i != same[0]) removed.insert(i);
    }
    std::string name = first.input(1) + "/merged";
    while (g.constants.count(name) || g.constants.count(name + "/bias")) name += "'";
    g.constants[name] = at::cat(matrices, 1);
    merged.add_input(rows);
    merged.add_input(name);
    if (any_bias) {
      g.constants[name + "/bias"] = at::cat(biases);
      merged.add_input(name + "/bias");
    }
    first = std::move(merged);  // where the first one was: every product's rows exist there
  }
  erase_nodes(g, removed);
}

// Conv with a 3x3 filter and stride 1 -> Winograd F(m x m, 3 x 3) (winograd.h), marked with its m; the executor
// transforms the filter at load where the host has the kernels. m is chosen from the output positions per run (the
// first profile's): F(4x4) takes the fewest multiplications but reads a filter 4x the size, F(2x2) 1.8x, and on few
// positions (a 7x7 map at batch 1) reading it costs more than the multiplications save. The thresholds are
// resnet18's layers measured against each other (benchmarks/offline.py).
void choose_winograd(Graph& g, const std::map<std::string, AbstractValue>& values) {
  for (auto& n : g.nodes) {
    if (n.op_type() != "Conv" || !is_const(g, n.input(1))) continue;
    auto y = values.find(n.output(0));
    if (y == values.end() || !y->second.tensor.defined() || y->second.tensor.dim() != 4) continue;
    const auto& out = y->second.tensor;
    Attrs a(n);
    int m = winograd::tile_size(g.constants[n.input(1)], a.i("group", 1), a.ints("strides", {1, 1}),
                                a.ints("dilations", {1, 1}), out.size(0) * out.size(2) * out.size(3));
    if (m) set_int_attr(n, "softnpu_winograd", m);
  }
}

bool is_cube(const std::string& t) { return t == "Conv" || t == "ConvTranspose" || t == "MatMul" || t == "Gemm"; }

}  // namespace

void lower(Graph& g, const std::vector<std::string>& outputs, const std::map<std::string, AbstractValue>& values) {
  drop_dead_nodes(g, outputs);
  fold_batch_norm(g, outputs);
  fuse_matmul_bias(g, outputs);
  fuse_residual_add(g, outputs, values);
  fuse_activation(g, outputs);
  fuse_softmax_attention(g, outputs, values);
  fuse_attention_heads(g, outputs, values);
  merge_shared_input_products(g);
  drop_dead_nodes(g, outputs);
  choose_winograd(g, values);
}

// As ATC's precision modes, on the software NPU: "fp16" nodes take float32 inputs rounded to float16 and round their
// float32 outputs to it (the cube's half-precision storage; compute stays float32, so every host is fast), with their
// constant weights rounded at conversion. Inputs whose values are parameters (an OpDef's value_inputs: Resize's
// scales, a Pad value) are never rounded: 1/3 in float16 would change a shape. force_fp16 marks every node,
// allow_fp32_to_fp16 and allow_mix_precision the cube ops (Conv, ConvTranspose, MatMul, Gemm); force_fp32 computes
// float16 cube ops in float32; must_keep_origin_dtype keeps every type.
void apply_precision_mode(Graph& g, const std::string& mode) {
  bool all = mode == "force_fp16";
  bool cube = all || mode == "allow_fp32_to_fp16" || mode == "allow_mix_precision" || mode == "allow_mix_precision_fp16";
  for (auto& n : g.nodes) {
    if (mode == "force_fp32" && is_cube(n.op_type())) {
      set_attr_s(n, "softnpu_precision", "fp32");
      continue;
    }
    if (!(all || (cube && is_cube(n.op_type())))) continue;
    set_attr_s(n, "softnpu_precision", "fp16");
    const OpDef* def = find_op(n);
    for (int i = 0; i < n.input_size(); ++i) {
      if (def && is_value_input(*def, i)) continue;
      auto it = g.constants.find(n.input(i));
      if (it != g.constants.end() && it->second.scalar_type() == at::kFloat)
        it->second = round_to_half(it->second);
    }
  }
}

}  // namespace softnpu::offline
