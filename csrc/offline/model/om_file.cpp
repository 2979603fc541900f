// The offline model file: a fixed header (magic, format version, partition table), then the partitions, each a
// protobuf message of proto/om.proto. Reading checks the header, the version and every partition's bounds before
// parsing anything, so a truncated or foreign file is an error, never a crash.
#include <ATen/ATen.h>

#include <cstring>
#include <sstream>

#include "model/graph.h"
#include "model/tensor.h"
#include "om.pb.h"

namespace softnpu::offline {

namespace {

constexpr char kMagic[8] = {'S', 'N', 'P', 'U', 'O', 'M', '\0', '\0'};
// Bumped whenever a partition's meaning changes: a file of another version is refused at load.
constexpr uint32_t kFormatVersion = 1;

enum PartitionKind : uint32_t { kMetadata = 1, kGraph = 2, kWeights = 3 };

struct Header {
  char magic[8];
  uint32_t version;
  uint32_t partitions;
};

struct PartitionEntry {
  uint32_t kind;
  uint32_t reserved;
  uint64_t offset;
  uint64_t size;
};

void to_value_info(const TensorDesc& d, onnx::ValueInfoProto* vi) {
  vi->set_name(d.name);
  auto* tt = vi->mutable_type()->mutable_tensor_type();
  tt->set_elem_type(d.dtype);
  auto* shape = tt->mutable_shape();
  for (auto v : d.dims) {
    auto* dim = shape->add_dim();
    if (v >= 0) dim->set_dim_value(v); else dim->set_dim_param("-1");
  }
  vi->set_doc_string(d.format);
}

TensorDesc from_value_info(const onnx::ValueInfoProto& vi) {
  TensorDesc d;
  d.name = vi.name();
  d.dtype = vi.type().tensor_type().elem_type();
  for (const auto& dim : vi.type().tensor_type().shape().dim()) d.dims.push_back(dim.has_dim_value() ? dim.dim_value() : -1);
  d.format = vi.doc_string();
  return d;
}

}  // namespace

std::string write_om(const Graph& g) {
  om::Metadata meta;
  meta.set_softnpu_version(g.metadata.softnpu_version);
  meta.set_soc_version(g.metadata.soc_version);
  meta.set_opset(g.metadata.opset);
  meta.set_onnx_ir_version(g.metadata.onnx_ir_version);
  meta.set_producer(g.metadata.producer);
  meta.set_atc_command(g.metadata.atc_command);
  meta.set_precision_mode(g.metadata.precision_mode);

  om::Graph graph;
  for (const auto& n : g.nodes) *graph.add_nodes() = n;
  for (const auto& d : g.inputs) {
    to_value_info(d, graph.add_inputs());
    graph.add_input_formats(d.format);
  }
  for (const auto& d : g.outputs) to_value_info(d, graph.add_outputs());
  for (auto b : g.output_max_bytes) graph.add_output_max_bytes(b);
  for (auto b : g.batch_profiles) graph.add_batch_profiles(b);
  for (const auto& p : g.dims_profiles) {
    auto* dp = graph.add_dims_profiles();
    for (auto v : p) dp->add_dims(v);
  }

  om::Weights weights;
  for (const auto& [name, t] : g.constants) to_proto(t, name, weights.add_tensors());

  std::string parts[3] = {meta.SerializeAsString(), graph.SerializeAsString(), weights.SerializeAsString()};
  PartitionKind kinds[3] = {kMetadata, kGraph, kWeights};
  Header h{};
  std::memcpy(h.magic, kMagic, sizeof(kMagic));
  h.version = kFormatVersion;
  h.partitions = 3;
  std::string out(reinterpret_cast<const char*>(&h), sizeof(h));
  uint64_t offset = sizeof(Header) + 3 * sizeof(PartitionEntry);
  for (int i = 0; i < 3; ++i) {
    PartitionEntry e{kinds[i], 0, offset, parts[i].size()};
    out.append(reinterpret_cast<const char*>(&e), sizeof(e));
    offset += parts[i].size();
  }
  for (const auto& p : parts) out += p;
  return out;
}

Graph read_om(const void* data, size_t size, Status* status) {
  Graph g;
  auto fail = [&](std::string code, std::string message) {
    *status = Status::error(std::move(code), std::move(message), "Convert the model again with this softnpu's atc.");
    return Graph{};
  };
  const char* bytes = static_cast<const char*>(data);
  if (!data || size < sizeof(Header)) return fail("E19005", "The model is too short to be an offline model.");
  Header h;
  std::memcpy(&h, bytes, sizeof(h));
  if (std::memcmp(h.magic, kMagic, sizeof(kMagic)) != 0) return fail("E19005", "The file is not a softnpu offline model.");
  if (h.version != kFormatVersion)
    return fail("E19005", "The offline model has format version " + std::to_string(h.version) + "; this softnpu reads version " +
                              std::to_string(kFormatVersion) + ".");
  if (h.partitions > 16 || sizeof(Header) + h.partitions * sizeof(PartitionEntry) > size)
    return fail("E19005", "The offline model's partition table is damaged.");
  om::Metadata meta;
  om::Graph graph;
  om::Weights weights;
  bool seen[4] = {};
  for (uint32_t i = 0; i < h.partitions; ++i) {
    PartitionEntry e;
    std::memcpy(&e, bytes + sizeof(Header) + i * sizeof(PartitionEntry), sizeof(e));
    if (e.offset > size || e.size > size - e.offset) return fail("E19005", "The offline model is truncated.");
    const char* p = bytes + e.offset;
    bool ok = true;
    switch (e.kind) {
      case kMetadata: ok = meta.ParseFromArray(p, static_cast<int>(e.size)); break;
      case kGraph: ok = graph.ParseFromArray(p, static_cast<int>(e.size)); break;
      case kWeights: ok = weights.ParseFromArray(p, static_cast<int>(e.size)); break;
      default: continue;
    }
    if (!ok) return fail("E19005", "A partition of the offline model is damaged.");
    seen[e.kind] = true;
  }
  if (!seen[kMetadata] || !seen[kGraph] || !seen[kWeights]) return fail("E19005", "The offline model lacks a partition.");
  if (meta.soc_version() != device_soc_version()) {
    *status = Status::error("E10001", "The offline model was converted for soc_version [" + meta.soc_version() +
                                          "]; this device is [" + device_soc_version() + "].",
                            "Convert the model again with --soc_version=" + device_soc_version() + ".");
    return Graph{};
  }
  g.metadata = {meta.softnpu_version(), meta.soc_version(),    meta.opset(),         meta.onnx_ir_version(),
                meta.producer(),        meta.atc_command(),    meta.precision_mode()};
  g.nodes.assign(graph.nodes().begin(), graph.nodes().end());
  for (const auto& vi : graph.inputs()) g.inputs.push_back(from_value_info(vi));
  for (const auto& vi : graph.outputs()) g.outputs.push_back(from_value_info(vi));
  g.output_max_bytes.assign(graph.output_max_bytes().begin(), graph.output_max_bytes().end());
  g.batch_profiles.assign(graph.batch_profiles().begin(), graph.batch_profiles().end());
  for (const auto& p : graph.dims_profiles()) g.dims_profiles.emplace_back(p.dims().begin(), p.dims().end());
  if (g.output_max_bytes.size() != g.outputs.size()) return fail("E19005", "The offline model's output table is damaged.");
  try {
    for (const auto& t : weights.tensors()) g.constants[t.name()] = from_proto(t);
  } catch (const std::exception& e) {
    return fail("E19005", std::string("The offline model's weights are damaged: ") + e.what());
  }
  *status = Status{};
  return g;
}

std::string json_escape(const std::string& s) {
  std::string o;
  for (char c : s) {
    switch (c) {
      case '"': o += "\\\""; break;
      case '\\': o += "\\\\"; break;
      case '\n': o += "\\n"; break;
      case '\t': o += "\\t"; break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", c);
          o += buf;
        } else {
          o += c;
        }
    }
  }
  return o;
}

namespace {

std::string dims_json(const std::vector<int64_t>& dims) {
  std::string s = "[";
  for (size_t i = 0; i < dims.size(); ++i) s += (i ? ", " : "") + std::to_string(dims[i]);
  return s + "]";
}

std::string descs_json(const std::vector<TensorDesc>& ds) {
  std::string s = "[";
  for (size_t i = 0; i < ds.size(); ++i) {
    auto t = onnx::TensorProto::DataType_IsValid(ds[i].dtype)
                 ? onnx::TensorProto::DataType_Name(static_cast<onnx::TensorProto::DataType>(ds[i].dtype))
                 : std::string("?");
    s += std::string(i ? ", " : "") + "{\"name\": \"" + json_escape(ds[i].name) + "\", \"dtype\": \"" + t + "\", \"dims\": " + dims_json(ds[i].dims) + ", \"format\": \"" + ds[i].format + "\"}";
  }
  return s + "]";
}

}  // namespace

std::string graph_json(const Graph& g) {
  std::ostringstream o;
  o << "{\n  \"header\": {\"magic\": \"SNPUOM\", \"version\": " << kFormatVersion << "},\n";
  o << "  \"metadata\": {\"softnpu_version\": \"" << json_escape(g.metadata.softnpu_version) << "\", \"soc_version\": \""
    << json_escape(g.metadata.soc_version) << "\", \"opset\": " << g.metadata.opset << ", \"onnx_ir_version\": "
    << g.metadata.onnx_ir_version << ", \"producer\": \"" << json_escape(g.metadata.producer)
    << "\", \"atc_command\": \"" << json_escape(g.metadata.atc_command) << "\", \"precision_mode\": \""
    << json_escape(g.metadata.precision_mode) << "\"},\n";
  o << "  \"inputs\": " << descs_json(g.inputs) << ",\n  \"outputs\": " << descs_json(g.outputs) << ",\n";
  o << "  \"dynamic_batch_size\": " << dims_json(g.batch_profiles) << ",\n  \"dynamic_dims\": [";
  for (size_t i = 0; i < g.dims_profiles.size(); ++i) o << (i ? ", " : "") << dims_json(g.dims_profiles[i]);
  o << "],\n  \"weights\": [";
  bool first = true;
  for (const auto& [name, t] : g.constants) {
    o << (first ? "" : ", ") << "{\"name\": \"" << json_escape(name) << "\", \"dims\": " << dims_json(t.sizes().vec())
      << ", \"dtype\": \"" << c10::toString(t.scalar_type()) << "\"}";
    first = false;
  }
  o << "],\n  \"nodes\": [";
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const auto& n = g.nodes[i];
    o << (i ? ",\n" : "\n") << "    {\"name\": \"" << json_escape(n.name()) << "\", \"type\": \"" << n.op_type()
      << "\", \"inputs\": [";
    for (int k = 0; k < n.input_size(); ++k) o << (k ? ", " : "") << "\"" << json_escape(n.input(k)) << "\"";
    o << "], \"outputs\": [";
    for (int k = 0; k < n.output_size(); ++k) o << (k ? ", " : "") << "\"" << json_escape(n.output(k)) << "\"";
    o << "], \"attributes\": {";
    for (int k = 0; k < n.attribute_size(); ++k) {
      const auto& a = n.attribute(k);
      o << (k ? ", " : "") << "\"" << json_escape(a.name()) << "\": ";
      switch (a.type()) {
        case onnx::AttributeProto::INT: o << a.i(); break;
        case onnx::AttributeProto::FLOAT: o << a.f(); break;
        case onnx::AttributeProto::STRING: o << "\"" << json_escape(a.s()) << "\""; break;
        case onnx::AttributeProto::INTS: o << dims_json({a.ints().begin(), a.ints().end()}); break;
        case onnx::AttributeProto::FLOATS: {
          o << "[";
          for (int j = 0; j < a.floats_size(); ++j) o << (j ? ", " : "") << a.floats(j);
          o << "]";
          break;
        }
        default: o << "\"<" << onnx::AttributeProto::AttributeType_Name(a.type()) << ">\"";
      }
    }
    o << "}}";
  }
  o << "\n  ]\n}\n";
  return o.str();
}

}  // namespace softnpu::offline
