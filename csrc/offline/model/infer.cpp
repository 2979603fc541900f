// Conversion's evaluation of the graph: constant folding and dtype/shape inference by running each node's kernel on
// constants and meta tensors. A node is checked by building its kernel and running it, so what converts is what the
// executor runs.
#include <ATen/ATen.h>
#include <c10/util/Exception.h>

#include "model/graph.h"
#include "model/ops/op.h"

namespace softnpu::offline {

namespace {

// Folding bigger constants would grow the weights partition (Expand of a scalar to a large shape).
constexpr int64_t kMaxFoldedBytes = 64 << 20;

// Meta kernels accept every dtype; the CPU kernel the executor will run may not (ATen has no uint16 addition). The
// node runs once more on zeros at its real shapes, and a kernel missing for its types is reported at conversion.
// Other errors there come from the zeros themselves (an integer division by zero) and say nothing about the model.
constexpr int64_t kMaxTrialBytes = 256 << 20;

Tensors zeros_for(const Tensors& in) {
  int64_t bytes = 0;
  for (const auto& t : in)
    if (t.defined()) bytes += t.numel() * t.element_size();
  if (bytes > kMaxTrialBytes) return {};
  Tensors real(in.size());
  for (size_t i = 0; i < in.size(); ++i)
    if (in[i].defined())
      real[i] = !in[i].is_meta() ? in[i]
                : sub_byte_bits(in[i].scalar_type())
                    ? at::zeros(in[i].sizes(), at::kByte).view(in[i].scalar_type())
                    : at::zeros(in[i].sizes(), in[i].options().device(at::kCPU));
  return real;
}

// The node run on zeros, its outputs as meta tensors; empty when the inputs are too big or the run fails.
Tensors run_on_zeros(const Kernel& kernel, const Tensors& in, const onnx::NodeProto& node) {
  auto real = zeros_for(in);
  if (real.empty() && !in.empty()) return {};
  Tensors out(node.output_size());
  try {
    kernel(real, out);
  } catch (const std::exception&) {
    return {};
  }
  for (auto& t : out)
    if (t.defined()) t = t.to(at::kMeta);
  return out;
}

template <typename Fail>
bool dtype_supported(const Kernel& kernel, const Tensors& in, const onnx::NodeProto& node, Fail& fail) {
  auto real = zeros_for(in);
  if (real.empty() && !in.empty()) return true;
  Tensors out(node.output_size());
  try {
    kernel(real, out);
  } catch (const c10::Error& e) {
    std::string what = e.what_without_backtrace();
    if (what.find("not implemented for") != std::string::npos) {
      fail(what);
      return false;
    }
  } catch (const std::exception&) {
  }
  return true;
}

}  // namespace

Evaluation evaluate(const std::vector<onnx::NodeProto>& nodes, std::map<std::string, AbstractValue> seed, bool fold,
                    int opset) {
  Evaluation ev;
  ev.values = std::move(seed);
  for (const auto& node : nodes) {
    ev.checked.emplace_back(node.name(), node.op_type());
    auto mark_outputs = [&](AbstractValue::Kind kind) {
      for (const auto& o : node.output())
        if (!o.empty()) ev.values[o] = AbstractValue{kind, {}};
    };
    auto fail = [&](const std::string& reason) {
      ev.unsupported.push_back({node.name(), node.op_type(), reason});
      mark_outputs(AbstractValue::kFailed);
    };
    const OpDef* def = find_op(node);
    if (!def) {
      bool standard = node.domain().empty() || node.domain() == "ai.onnx";
      fail(standard ? "no softnpu kernel for op type " + node.op_type()
                    : "domain '" + node.domain() + "' has no softnpu kernel for op type " + node.op_type());
      continue;
    }
    Tensors in(node.input_size());
    bool any_failed = false, any_dynamic = false, all_const = true;
    for (int i = 0; i < node.input_size(); ++i) {
      if (node.input(i).empty()) continue;
      auto it = ev.values.find(node.input(i));
      if (it == ev.values.end()) {
        any_failed = true;
        ev.unsupported.push_back({node.name(), node.op_type(),
                                  "input '" + node.input(i) + "' is not produced before this node"});
        break;
      }
      const auto& v = it->second;
      if (v.kind == AbstractValue::kFailed) any_failed = true;
      if (v.kind == AbstractValue::kDynamic) any_dynamic = true;
      if (v.kind != AbstractValue::kConst) all_const = false;
      in[i] = v.tensor;
    }
    if (any_failed) {
      mark_outputs(AbstractValue::kFailed);
      continue;
    }
    Kernel kernel;
    try {
      OpContext ctx{node, Attrs(node), opset, node.input_size(), node.output_size()};
      kernel = def->build(ctx);
    } catch (const Unsupported& e) {
      fail(e.what());
      continue;
    } catch (const std::exception& e) {
      fail(e.what());
      continue;
    }
    if (any_dynamic) {
      mark_outputs(AbstractValue::kDynamic);
      ev.kept.push_back(node);
      continue;
    }
    bool folding = fold && all_const && def->deterministic;
    if (!folding) {
      for (int i = 0; i < node.input_size(); ++i)
        if (in[i].defined() && !in[i].is_meta() && !is_value_input(*def, i)) in[i] = in[i].to(at::kMeta);
    }
    Tensors out(node.output_size());
    bool ran_on_zeros = false;
    try {
      kernel(in, out);
    } catch (const DataDependent&) {
      mark_outputs(AbstractValue::kDynamic);
      ev.kept.push_back(node);
      continue;
    } catch (const c10::NotImplementedError& e) {
      // An ATen op without a meta kernel (relu has none): the node's dtypes and shapes come from running it on
      // zeros, as the dtype check below does; too big to try, its outputs' shapes are known only when it runs.
      if (folding) {
        fail(e.what_without_backtrace());
        continue;
      }
      out = run_on_zeros(kernel, in, node);
      if (out.empty()) {
        mark_outputs(AbstractValue::kDynamic);
        ev.kept.push_back(node);
        continue;
      }
      ran_on_zeros = true;
    } catch (const c10::Error& e) {
      fail(e.what_without_backtrace());
      continue;
    } catch (const std::exception& e) {
      fail(e.what());
      continue;
    }
    if (!folding && !ran_on_zeros && !dtype_supported(kernel, in, node, fail)) continue;
    bool small = true, all_real = true;
    for (const auto& t : out) {
      if (t.defined() && static_cast<int64_t>(t.nbytes()) > kMaxFoldedBytes) small = false;
      if (t.defined() && t.is_meta()) all_real = false;
    }
    // Real outputs from meta inputs were computed from shapes alone (Shape, Size): constants too.
    if ((folding || (all_real && def->deterministic)) && small) {
      for (int i = 0; i < node.output_size(); ++i)
        if (!node.output(i).empty()) ev.values[node.output(i)] = {AbstractValue::kConst, out[i].contiguous()};
      continue;
    }
    for (int i = 0; i < node.output_size(); ++i) {
      if (node.output(i).empty()) continue;
      if (!out[i].defined()) {
        fail("produced no value for output " + std::to_string(i));
        break;
      }
      ev.values[node.output(i)] = {AbstractValue::kMeta, out[i].is_meta() ? out[i] : out[i].to(at::kMeta)};
    }
    ev.kept.push_back(node);
  }
  return ev;
}

}  // namespace softnpu::offline
