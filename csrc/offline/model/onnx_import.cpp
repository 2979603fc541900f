// convert_onnx: ONNX model bytes to an offline model. Every check runs before anything is produced: the model's
// structure, its inputs against --input_shape and the dynamic profiles, and every node through its kernel.
#include <ATen/ATen.h>

#include <fstream>
#include <set>
#include <sstream>

#include "model/graph.h"
#include "model/model.h"
#include "model/subgraph.h"
#include "model/tensor.h"

namespace softnpu::offline {

namespace {

// The newest ai.onnx opset whose ops' semantics the kernels follow: that of the pinned onnx release.
constexpr int64_t kMaxOpset = 27;
constexpr int64_t kMinOpset = 1;

std::string dims_string(const std::vector<int64_t>& dims) {
  std::string s;
  for (size_t i = 0; i < dims.size(); ++i) s += (i ? "," : "") + std::to_string(dims[i]);
  return s;
}

std::string report(const Evaluation& ev, bool ok) {
  std::set<std::string> bad;
  for (const auto& u : ev.unsupported) bad.insert(u.name + "\n" + u.op_type);
  std::ostringstream o;
  o << "{\n  \"summary\": {\"result\": \"" << (ok ? "success" : "failed") << "\", \"op_total\": " << ev.checked.size()
    << ", \"op_unsupported\": " << ev.unsupported.size() << "},\n  \"op\": [";
  bool first = true;
  for (const auto& [name, type] : ev.checked) {
    if (bad.count(name + "\n" + type)) continue;
    o << (first ? "\n" : ",\n") << "    {\"name\": \"" << json_escape(name) << "\", \"type\": \"" << json_escape(type)
      << "\", \"result\": \"success\"}";
    first = false;
  }
  for (const auto& u : ev.unsupported) {
    o << (first ? "\n" : ",\n") << "    {\"name\": \"" << json_escape(u.name) << "\", \"type\": \""
      << json_escape(u.op_type) << "\", \"result\": \"failed\", \"reason\": \"" << json_escape(u.reason) << "\"}";
    first = false;
  }
  o << "\n  ]\n}\n";
  return o.str();
}

// The input dims for one profile: the model's dims with the profile's values in place of the -1 dims, in order.
std::vector<std::vector<int64_t>> profile_dims(const std::vector<TensorDesc>& inputs, const std::vector<int64_t>& values,
                                               bool batch_only) {
  std::vector<std::vector<int64_t>> out;
  size_t k = 0;
  for (const auto& in : inputs) {
    auto dims = in.dims;
    for (auto& d : dims)
      if (d < 0) d = batch_only ? values.at(0) : values.at(k++);
    out.push_back(dims);
  }
  return out;
}

// Weights the exporter kept in a file beside the model (torch.onnx.export's default for large models): read into the
// tensor, bounded by the file.
onnx::TensorProto with_external_data(const onnx::TensorProto& p, const std::string& dir) {
  if (p.data_location() != onnx::TensorProto::EXTERNAL) return p;
  std::string location;
  int64_t offset = 0, length = -1;
  for (const auto& kv : p.external_data()) {
    if (kv.key() == "location") location = kv.value();
    if (kv.key() == "offset") offset = std::stoll(kv.value());
    if (kv.key() == "length") length = std::stoll(kv.value());
  }
  if (dir.empty()) throw Unsupported("its data is in an external file, and the model was not read from a file");
  if (location.empty() || location.find("..") != std::string::npos || location[0] == '/')
    throw Unsupported("its external data location '" + location + "' is not a file beside the model");
  std::ifstream f(dir + "/" + location, std::ios::binary);
  if (!f) throw Unsupported("its external data file " + dir + "/" + location + " cannot be read");
  f.seekg(0, std::ios::end);
  int64_t size = f.tellg();
  if (length < 0) length = size - offset;
  if (offset < 0 || offset + length > size) throw Unsupported("its external data lies beyond the end of " + location);
  std::string data(length, '\0');
  f.seekg(offset);
  f.read(data.data(), length);
  onnx::TensorProto q = p;
  q.clear_external_data();
  q.set_data_location(onnx::TensorProto::DEFAULT);
  q.set_raw_data(std::move(data));
  return q;
}

}  // namespace

Status Status::error(std::string code, std::string message, std::string solution) {
  Status s;
  s.ok = false;
  s.code = std::move(code);
  s.message = std::move(message);
  s.solution = std::move(solution);
  return s;
}

ConvertResult convert_onnx(const std::string& onnx_bytes, const ConvertOptions& options) {
  ConvertResult result;
  onnx::ModelProto model;
  if (!model.ParseFromString(onnx_bytes)) {
    result.status = Status::error("E19005", "Failed to parse the model file: it is not an ONNX model.",
                                  "Check that --model names an ONNX file and --framework=5.");
    return result;
  }
  if (!model.has_graph()) {
    result.status = Status::error("E19005", "The ONNX model has no graph.", "Export the model again.");
    return result;
  }
  int64_t opset = -1;
  for (const auto& imp : model.opset_import())
    if (imp.domain().empty() || imp.domain() == "ai.onnx") opset = imp.version();
  // A model of other domains only (ai.onnx.ml, ai.onnx.preview.training) is checked node by node against the op
  // table; its ai.onnx opset is taken as the newest.
  if (opset < 0) opset = kMaxOpset;
  if (opset < kMinOpset || opset > kMaxOpset) {
    result.status = Status::error(
        "E10001", "Value [" + std::to_string(opset) + "] for the model's ai.onnx opset is invalid: softnpu supports opsets " +
                      std::to_string(kMinOpset) + " to " + std::to_string(kMaxOpset) + ".",
        "Export the model with an opset in that range.");
    return result;
  }
  // As CANN's atc: any chip it knows, whatever this host's devices are; the loader checks the model's chip.
  if (!known_soc_version(options.soc_version)) {
    result.status = Status::error("E10001", "Value [" + options.soc_version + "] for parameter [--soc_version] is invalid.",
                                  "Use one of: " + soc_version_choices() + ".");
    return result;
  }
  const auto& g = model.graph();

  // Constants: initializers, then Constant nodes fold with the rest.
  std::map<std::string, AbstractValue> seed;
  for (const auto& init : g.initializer()) {
    try {
      seed[init.name()] = {AbstractValue::kConst, from_proto(with_external_data(init, options.model_dir))};
    } catch (const std::exception& e) {
      result.status = Status::error("E19005", "Initializer '" + init.name() + "': " + e.what(), "Export the model again.");
      return result;
    }
  }

  // Inputs and their shapes: the model's, replaced by --input_shape; -1 dims need a profile.
  Graph graph;
  std::set<std::string> shaped;
  for (const auto& vi : g.input()) {
    if (seed.count(vi.name())) continue;
    TensorDesc d;
    d.name = vi.name();
    d.format = options.input_format;
    // An optional tensor input is taken as a tensor (the caller gives one).
    const auto& type = vi.type().has_optional_type() ? vi.type().optional_type().elem_type() : vi.type();
    if (!type.has_tensor_type()) {
      UnsupportedNode u{vi.name(), "Input", "inputs that are not tensors (sequences, maps, optionals) are not supported"};
      result.status = Status::error("EZ3003", "The model has an input softnpu cannot take: " + vi.name(),
                                    "Give the model tensor inputs.");
      result.status.unsupported.push_back(u);
      return result;
    }
    d.dtype = type.tensor_type().elem_type();
    for (const auto& dim : type.tensor_type().shape().dim()) d.dims.push_back(dim.has_dim_value() ? dim.dim_value() : -1);
    graph.inputs.push_back(d);
  }
  for (const auto& [name, dims] : options.input_shapes) {
    auto it = std::find_if(graph.inputs.begin(), graph.inputs.end(), [&](const TensorDesc& d) { return d.name == name; });
    if (it == graph.inputs.end()) {
      result.status = Status::error("E10001", "Value [" + name + "] for parameter [--input_shape] is invalid: the model has no input " + name + ".",
                                    "Name the model's inputs in --input_shape.");
      return result;
    }
    if (!it->dims.empty() && it->dims.size() != dims.size()) {
      result.status = Status::error("E10002", "Input shape [" + dims_string(dims) + "] of input [" + name + "] has rank " +
                                                  std::to_string(dims.size()) + ", the model's input has rank " +
                                                  std::to_string(it->dims.size()) + ".",
                                    "Give --input_shape the model's rank for this input.");
      return result;
    }
    for (size_t i = 0; i < it->dims.size() && i < dims.size(); ++i) {
      if (it->dims[i] >= 0 && dims[i] >= 0 && it->dims[i] != dims[i]) {
        result.status = Status::error("E10002", "Input shape [" + dims_string(dims) + "] of input [" + name +
                                                    "] differs from the model's static dim " + std::to_string(i) + ".",
                                      "Keep the model's static dims in --input_shape.");
        return result;
      }
    }
    it->dims = dims;
    shaped.insert(name);
  }
  size_t dynamic_dims = 0;
  for (const auto& in : graph.inputs)
    for (auto d : in.dims) dynamic_dims += d < 0;
  std::vector<std::vector<std::vector<int64_t>>> profiles;  // per profile, every input's dims
  if (!options.dynamic_batch_sizes.empty()) {
    for (const auto& in : graph.inputs) {
      for (size_t i = 0; i < in.dims.size(); ++i) {
        if (in.dims[i] < 0 && i != 0) {
          result.status = Status::error("E10002", "--dynamic_batch_size needs -1 in dim 0 only; input [" + in.name + "] has [" + dims_string(in.dims) + "].",
                                        "Set the other dims in --input_shape.");
          return result;
        }
      }
    }
    if (dynamic_dims == 0) {
      result.status = Status::error("E10001", "Value for parameter [--dynamic_batch_size] is invalid: no input has -1 in --input_shape.",
                                    "Mark the batch dim -1 in --input_shape.");
      return result;
    }
    for (auto b : options.dynamic_batch_sizes) profiles.push_back(profile_dims(graph.inputs, {b}, true));
    graph.batch_profiles = options.dynamic_batch_sizes;
  } else if (!options.dynamic_dims.empty()) {
    for (const auto& p : options.dynamic_dims) {
      if (p.size() != dynamic_dims) {
        result.status = Status::error("E10001", "Value for parameter [--dynamic_dims] is invalid: each profile needs " +
                                                    std::to_string(dynamic_dims) + " values, one per -1 dim.",
                                      "Give one value per -1 dim of --input_shape.");
        return result;
      }
      profiles.push_back(profile_dims(graph.inputs, p, false));
    }
    graph.dims_profiles = options.dynamic_dims;
  } else if (dynamic_dims) {
    for (const auto& in : graph.inputs) {
      if (std::count(in.dims.begin(), in.dims.end(), -1)) {
        result.status = Status::error(
            "E10002", "Input [" + in.name + "] has the dynamic shape [" + dims_string(in.dims) + "].",
            "Give its shape with --input_shape, or declare profiles with --dynamic_batch_size or --dynamic_dims.");
        return result;
      }
    }
  } else {
    profiles.push_back({});
    for (const auto& in : graph.inputs) profiles.back().push_back(in.dims);
  }

  // Outputs: the graph's, or --out_nodes ("node:index" or a value name).
  std::vector<std::string> output_names;
  if (options.out_nodes.empty()) {
    for (const auto& o : g.output()) output_names.push_back(o.name());
  } else {
    for (const auto& spec : options.out_nodes) {
      auto colon = spec.rfind(':');
      bool found = false;
      if (colon != std::string::npos) {
        auto node_name = spec.substr(0, colon);
        int index = std::atoi(spec.c_str() + colon + 1);
        for (const auto& n : g.node()) {
          if (n.name() == node_name && index >= 0 && index < n.output_size()) {
            output_names.push_back(n.output(index));
            found = true;
          }
        }
      }
      if (!found) {
        for (const auto& n : g.node())
          for (const auto& o : n.output())
            if (o == spec && !found) output_names.push_back(o), found = true;
      }
      if (!found) {
        result.status = Status::error("E10001", "Value [" + spec + "] for parameter [--out_nodes] is invalid: no such node output.",
                                      "Name outputs as node_name:index.");
        return result;
      }
    }
  }

  std::vector<onnx::NodeProto> nodes(g.node().begin(), g.node().end());
  for (size_t i = 0; i < nodes.size(); ++i)
    if (nodes[i].name().empty()) nodes[i].set_name(nodes[i].op_type() + "_" + std::to_string(i));
  capture_outer_values(nodes);

  // Check and fold once per profile; the first profile's folded graph is the one kept (folding depends only on
  // constants, so every profile keeps the same nodes).
  Evaluation first;
  std::vector<std::vector<at::Tensor>> output_per_profile;
  for (size_t p = 0; p < profiles.size(); ++p) {
    auto s = seed;
    for (size_t i = 0; i < graph.inputs.size(); ++i) {
      try {
        s[graph.inputs[i].name] = {AbstractValue::kMeta,
                                   at::empty(profiles[p][i], at::TensorOptions().device(at::kMeta).dtype(scalar_type(graph.inputs[i].dtype)))};
      } catch (const Unsupported& e) {
        result.status = Status::error("EZ3003", "Input [" + graph.inputs[i].name + "]: " + e.what(), "Change the input's type.");
        return result;
      }
    }
    auto ev = evaluate(nodes, std::move(s), true, static_cast<int>(opset));
    std::vector<at::Tensor> outs;
    for (const auto& name : output_names) {
      auto it = ev.values.find(name);
      if (it == ev.values.end() || it->second.kind == AbstractValue::kFailed) {
        outs.push_back({});
      } else if (it->second.kind == AbstractValue::kDynamic) {
        outs.push_back({});  // typed from the model's declaration below
      } else {
        outs.push_back(it->second.tensor);
      }
    }
    output_per_profile.push_back(outs);
    if (p == 0) {
      first = std::move(ev);
    } else if (!ev.unsupported.empty() && first.unsupported.empty()) {
      first.unsupported = ev.unsupported;
    }
  }
  result.report_json = report(first, first.unsupported.empty());
  if (!first.unsupported.empty()) {
    std::string list;
    for (const auto& u : first.unsupported) list += "\n  " + u.name + " (" + u.op_type + "): " + u.reason;
    bool no_parser = std::all_of(first.unsupported.begin(), first.unsupported.end(),
                                 [](const UnsupportedNode& u) { return !find_op(u.op_type) && u.op_type != "Output"; });
    result.status = Status::error(no_parser ? "E19010" : "EZ3003",
                                  std::to_string(first.unsupported.size()) + " node(s) of the model are not supported:" + list,
                                  "Replace these ops in the model, or check their attributes and types against softnpu's op list.");
    result.status.unsupported = first.unsupported;
    return result;
  }

  // The lowered graph.
  graph.nodes = std::move(first.kept);
  for (size_t i = 0; i < output_names.size(); ++i) {
    TensorDesc d;
    d.name = output_names[i];
    const auto& t0 = output_per_profile[0][i];
    d.format = "ND";
    if (!t0.defined()) {
      // Its shape depends on input data: the model's declared type and shape; the run allocates it unless the
      // declared shape is static.
      const onnx::ValueInfoProto* declared = nullptr;
      for (const auto& vi : g.output()) if (vi.name() == output_names[i]) declared = &vi;
      for (const auto& vi : g.value_info()) if (!declared && vi.name() == output_names[i]) declared = &vi;
      int64_t bytes = 0;
      try {
        if (!declared || !declared->type().tensor_type().has_elem_type()) throw Unsupported("no declared type");
        d.dtype = declared->type().tensor_type().elem_type();
        bytes = static_cast<int64_t>(c10::elementSize(scalar_type(d.dtype)));
      } catch (const Unsupported&) {
        result.status = Status::error("EZ3003", "Output [" + output_names[i] + "] depends on input data and the model does not declare a supported type for it.",
                                      "Declare the output's type in the model.");
        result.status.unsupported.push_back({output_names[i], "Output", "its type is not declared"});
        return result;
      }
      bool has_shape = declared->type().tensor_type().has_shape();
      for (const auto& dim : declared->type().tensor_type().shape().dim()) {
        bool known = dim.has_dim_value() && dim.dim_value() >= 0;
        d.dims.push_back(known ? dim.dim_value() : -1);
        bytes = known ? bytes * dim.dim_value() : 0;
      }
      if (!has_shape) bytes = 0;
      graph.outputs.push_back(d);
      graph.output_max_bytes.push_back(bytes);
      continue;
    }
    d.dtype = onnx_type(t0.scalar_type());
    d.dims = t0.sizes().vec();
    int64_t max_bytes = 0;
    for (const auto& outs : output_per_profile) {
      if (!outs[i].defined()) continue;
      max_bytes = std::max<int64_t>(max_bytes, outs[i].numel() * outs[i].element_size());
      for (size_t k = 0; k < d.dims.size(); ++k)
        if (outs[i].dim() != static_cast<int64_t>(d.dims.size()) || outs[i].size(k) != d.dims[k]) d.dims[k] = -1;
    }
    graph.outputs.push_back(d);
    // Bytes of the largest profile; at least 1 so that a size of 0 keeps meaning "allocated by the run".
    graph.output_max_bytes.push_back(std::max<int64_t>(max_bytes, 1));
    const auto& v = first.values[output_names[i]];
    if (v.kind == AbstractValue::kConst) graph.constants[output_names[i]] = v.tensor;
  }
  for (const auto& n : graph.nodes)
    for (const auto& in : n.input()) {
      auto it = first.values.find(in);
      if (!in.empty() && it != first.values.end() && it->second.kind == AbstractValue::kConst)
        graph.constants[in] = it->second.tensor;
    }
  graph.metadata.opset = opset;  // the lowering reads it
  lower(graph, output_names, first.values);
  apply_precision_mode(graph, options.precision_mode);

  graph.metadata.softnpu_version = SOFTNPU_VERSION;
  graph.metadata.soc_version = options.soc_version;
  graph.metadata.onnx_ir_version = model.ir_version();
  graph.metadata.producer = model.producer_name() + (model.producer_version().empty() ? "" : " " + model.producer_version());
  graph.metadata.atc_command = options.command_line;
  graph.metadata.precision_mode = options.precision_mode;
  result.om = write_om(graph);
  return result;
}

}  // namespace softnpu::offline
