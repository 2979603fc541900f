// The lowered graph: what conversion produces, the .om file stores and the executor runs.
#pragma once

#include <ATen/core/Tensor.h>

#include <map>
#include <string>
#include <vector>

#include "model/model.h"
#include "onnx/onnx.pb.h"

namespace softnpu::offline {

struct Metadata {
  std::string softnpu_version;
  std::string soc_version;
  int64_t opset = 0;
  int64_t onnx_ir_version = 0;
  std::string producer;
  std::string atc_command;
  std::string precision_mode;
};

struct Graph {
  std::vector<onnx::NodeProto> nodes;  // in execution order
  std::vector<TensorDesc> inputs;      // -1 for a dynamic dim
  std::vector<TensorDesc> outputs;     // -1 where the dim varies with the profile
  std::vector<int64_t> output_max_bytes;
  std::map<std::string, at::Tensor> constants;  // CPU tensors: the weights every node or output reads
  std::vector<int64_t> batch_profiles;
  std::vector<std::vector<int64_t>> dims_profiles;
  Metadata metadata;
};

// What the evaluation knows of a value at conversion.
struct AbstractValue {
  enum Kind { kConst, kMeta, kDynamic, kFailed } kind = kFailed;
  at::Tensor tensor;  // kConst: a CPU tensor; kMeta: a meta tensor (dtype and shape)
};

struct Evaluation {
  std::map<std::string, AbstractValue> values;
  std::vector<onnx::NodeProto> kept;  // the nodes left to run (the others were folded into constants)
  std::vector<UnsupportedNode> unsupported;
  std::vector<std::pair<std::string, std::string>> checked;  // every node's name and type, in order
};

// Runs the nodes over abstract values: folds what depends only on constants (when fold is set), infers dtypes and
// shapes of the rest with meta tensors, and records every node that cannot run.
Evaluation evaluate(const std::vector<onnx::NodeProto>& nodes, std::map<std::string, AbstractValue> seed, bool fold,
                    int opset);

// The lowering passes (passes.cpp): conv+batch norm folding, activation fusion, matmul+bias, dead nodes, Winograd
// tiles (from the evaluation's shapes), precision.
void lower(Graph& graph, const std::vector<std::string>& output_names,
           const std::map<std::string, AbstractValue>& values);
void apply_precision_mode(Graph& graph, const std::string& mode);

// The .om file (om_file.cpp).
std::string write_om(const Graph& graph);
Graph read_om(const void* data, size_t size, Status* status);
std::string graph_json(const Graph& graph);

std::string json_escape(const std::string& s);

}  // namespace softnpu::offline
