// Graphs inside a node (If's branches, Loop's and Scan's bodies): their kernels are built once with the node's, and
// run on the tensors the node gives them. Values a subgraph reads from the enclosing graph are made explicit inputs of
// the node at conversion (capture_outer_values), so the executor's slot plan keeps them alive like any input.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "model/ops/op.h"

namespace softnpu::offline {

// The attribute listing, in order, the enclosing graph's values a node's subgraphs read; they follow the node's own
// inputs.
inline constexpr const char* kCapturesAttribute = "softnpu_captures";

// Names a graph reads but does not define (nested graphs included), in order of first use.
std::vector<std::string> outer_values(const onnx::GraphProto& graph);

// Appends to every node with subgraphs the outer values they read, as extra inputs (recursively inside subgraphs).
void capture_outer_values(std::vector<onnx::NodeProto>& nodes);

class Subgraph {
 public:
  Subgraph(const onnx::GraphProto& graph, int opset);
  size_t num_inputs() const { return inputs_.size(); }
  size_t num_outputs() const { return outputs_.size(); }
  // Runs the graph: its inputs in order, and the outer values it reads by name.
  Tensors run(const Tensors& inputs, const std::map<std::string, at::Tensor>& outer) const;

 private:
  struct Node {
    std::string label;
    Kernel kernel;
    std::vector<std::string> in, out;
  };
  std::vector<std::string> inputs_, outputs_;
  std::map<std::string, at::Tensor> constants_;
  std::vector<Node> nodes_;
};

}  // namespace softnpu::offline
