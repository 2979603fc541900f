#include "model/subgraph.h"

#include <ATen/ATen.h>

#include <set>

#include "model/tensor.h"

namespace softnpu::offline {

namespace {

void collect_outer(const onnx::GraphProto& g, std::vector<std::string>& out, std::set<std::string>& seen) {
  std::set<std::string> defined;
  for (const auto& i : g.input()) defined.insert(i.name());
  for (const auto& i : g.initializer()) defined.insert(i.name());
  auto use = [&](const std::string& name) {
    if (!name.empty() && !defined.count(name) && seen.insert(name).second) out.push_back(name);
  };
  for (const auto& n : g.node()) {
    for (const auto& i : n.input()) use(i);
    for (const auto& a : n.attribute()) {
      std::vector<const onnx::GraphProto*> subs;
      if (a.has_g()) subs.push_back(&a.g());
      for (const auto& sg : a.graphs()) subs.push_back(&sg);
      for (const auto* sg : subs)
        for (const auto& name : outer_values(*sg)) use(name);
    }
    for (const auto& o : n.output()) defined.insert(o);
  }
  for (const auto& o : g.output()) use(o.name());
}

bool has_subgraph(const onnx::NodeProto& n) {
  for (const auto& a : n.attribute())
    if (a.has_g() || a.graphs_size()) return true;
  return false;
}

void capture_in(onnx::NodeProto& n) {
  std::vector<std::string> names;
  std::set<std::string> seen;
  for (auto& a : *n.mutable_attribute()) {
    std::vector<onnx::GraphProto*> subs;
    if (a.has_g()) subs.push_back(a.mutable_g());
    for (auto& sg : *a.mutable_graphs()) subs.push_back(&sg);
    for (auto* sg : subs) {
      std::vector<onnx::NodeProto> inner(sg->node().begin(), sg->node().end());
      capture_outer_values(inner);
      sg->clear_node();
      for (auto& x : inner) *sg->add_node() = std::move(x);
      for (const auto& name : outer_values(*sg))
        if (seen.insert(name).second) names.push_back(name);
    }
  }
  if (names.empty()) return;
  auto* a = n.add_attribute();
  a->set_name(kCapturesAttribute);
  a->set_type(onnx::AttributeProto::STRINGS);
  for (const auto& name : names) {
    a->add_strings(name);
    n.add_input(name);
  }
}

}  // namespace

std::vector<std::string> outer_values(const onnx::GraphProto& graph) {
  std::vector<std::string> out;
  std::set<std::string> seen;
  collect_outer(graph, out, seen);
  return out;
}

void capture_outer_values(std::vector<onnx::NodeProto>& nodes) {
  for (auto& n : nodes)
    if (has_subgraph(n)) capture_in(n);
}

Subgraph::Subgraph(const onnx::GraphProto& graph, int opset) {
  for (const auto& i : graph.input()) inputs_.push_back(i.name());
  for (const auto& o : graph.output()) outputs_.push_back(o.name());
  for (const auto& init : graph.initializer()) constants_[init.name()] = from_proto(init);
  for (const auto& n : graph.node()) {
    const OpDef* def = find_op(n);
    if (!def) throw Unsupported("subgraph node " + describe(n) + ": no softnpu kernel for op type " + n.op_type());
    OpContext ctx{n, Attrs(n), opset, n.input_size(), n.output_size()};
    Node node{describe(n), def->build(ctx), {n.input().begin(), n.input().end()}, {n.output().begin(), n.output().end()}};
    nodes_.push_back(std::move(node));
  }
}

Tensors Subgraph::run(const Tensors& inputs, const std::map<std::string, at::Tensor>& outer) const {
  std::map<std::string, at::Tensor> env = outer;
  for (const auto& [k, v] : constants_) env[k] = v;
  for (size_t i = 0; i < inputs_.size() && i < inputs.size(); ++i) env[inputs_[i]] = inputs[i];
  for (const auto& n : nodes_) {
    Tensors in(n.in.size()), out(n.out.size());
    for (size_t i = 0; i < n.in.size(); ++i) {
      if (n.in[i].empty()) continue;
      auto it = env.find(n.in[i]);
      if (it == env.end()) throw Unsupported("subgraph value '" + n.in[i] + "' is not defined");
      in[i] = it->second;
    }
    try {
      n.kernel(in, out);
    } catch (const c10::Error& e) {
      throw std::runtime_error("in subgraph node " + n.label + ": " + e.what_without_backtrace());
    }
    for (size_t i = 0; i < n.out.size(); ++i)
      if (!n.out[i].empty()) env[n.out[i]] = out[i];
  }
  Tensors result;
  for (const auto& o : outputs_) {
    auto it = env.find(o);
    if (it == env.end()) throw Unsupported("subgraph output '" + o + "' is not produced");
    result.push_back(it->second);
  }
  return result;
}

}  // namespace softnpu::offline
