// The offline model as ACL and atc see it: conversion of an ONNX model to the .om format, loading an .om, and running
// it on a runtime stream. Everything under this header (the graph, the op kernels, the passes, the file format) is
// private to csrc/offline/model.
#pragma once

#include <softnpu/runtime.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace softnpu::offline {

// Element types are ONNX's TensorProto.DataType numbers (1 float, 10 float16, 7 int64, ...); ACL maps them to its own.
struct TensorDesc {
  std::string name;
  int32_t dtype = 0;
  std::vector<int64_t> dims;  // -1 marks a dynamic dimension
  std::string format;         // "NCHW", "NHWC" or "ND" (--input_format)
};

// One node the conversion cannot map to softnpu's kernels.
struct UnsupportedNode {
  std::string name;
  std::string op_type;
  std::string reason;
};

// The outcome of a conversion or of a load: on failure, ATC's error code (E10001, E10002, EZ3002, EZ3003, E19010,
// ...), the message and the `Solution:` line.
struct Status {
  bool ok = true;
  std::string code;
  std::string message;
  std::string solution;
  std::vector<UnsupportedNode> unsupported;  // every unsupported node, not only the first

  static Status error(std::string code, std::string message, std::string solution = {});
};

// atc's options that decide the conversion (the command line's parsing is atc's; these are the parsed values).
struct ConvertOptions {
  std::string soc_version;                          // a chip of the SoC table ("Ascend910B3"); checked at load
  std::vector<std::pair<std::string, std::vector<int64_t>>> input_shapes;  // --input_shape
  std::string input_format = "NCHW";               // --input_format
  std::vector<std::string> out_nodes;               // --out_nodes: "node:index" or output names
  std::string precision_mode = "force_fp16";        // --precision_mode
  std::vector<int64_t> dynamic_batch_sizes;         // --dynamic_batch_size
  std::vector<std::vector<int64_t>> dynamic_dims;   // --dynamic_dims: one profile per entry, the -1 dims in order
  std::string command_line;                         // recorded in the model's metadata
  std::string model_dir;                            // where weights kept outside the model file are (external data)
};

struct ConvertResult {
  Status status;
  std::string om;           // the offline model file's bytes when status.ok
  std::string report_json;  // the pre-check report (--check_report), written whether or not the check passed
};

// Checks everything first (structure, shapes, every node's kernel), then lowers and serializes. Nothing is produced
// unless every check passed.
ConvertResult convert_onnx(const std::string& onnx_bytes, const ConvertOptions& options);

// The SoC the devices present as (SOFTNPU_SOC_VERSION): the soc_version a model must be converted for to load here
// ("" if the variable is malformed; the runtime's calls report it).
std::string device_soc_version();
// Whether atc's --soc_version names a chip of the SoC table (csrc/common/soc_profiles.def), and their names.
bool known_soc_version(const std::string& name);
std::string soc_version_choices();

class Model {
 public:
  virtual ~Model() = default;

  // Parses and validates an .om image (header version, soc_version, partitions) and resolves every node's kernel, so
  // executing does no graph work. Weights go to npu device memory on the current device.
  static std::unique_ptr<Model> load(const void* data, size_t size, Status* status);

  virtual const std::vector<TensorDesc>& inputs() const = 0;
  virtual const std::vector<TensorDesc>& outputs() const = 0;
  // Bytes of each input and output at the largest profile: what a caller allocates.
  virtual size_t input_size(size_t index) const = 0;
  virtual size_t output_size(size_t index) const = 0;
  // Dynamic profiles (--dynamic_batch_size, --dynamic_dims); empty for a static model.
  virtual const std::vector<int64_t>& batch_profiles() const = 0;
  virtual const std::vector<std::vector<int64_t>>& dims_profiles() const = 0;
  // Metadata recorded at conversion: softnpu version, opset, soc_version, atc command line, precision mode.
  virtual std::string metadata_json() const = 0;

  // ASYNC. Enqueues the model on the stream: inputs[i] and outputs[i] are npu device memory (or pinned host memory)
  // of at least the sizes above; input_dims gives each input's dims for this run (the model's own dims when empty).
  // Output dims of the run are written to *output_dims once the run completes (read them after synchronizing).
  // An output whose size is 0 above has a shape that depends on input data: pass nullptr for it, and the run
  // allocates it in npu device memory (snpuMalloc; the caller frees it with snpuFree) and writes the pointer to
  // (*allocated)[i]. A non-null buffer too small for an output fails the run.
  // A kernel that fails reports the node's name and op type at the stream's next synchronizing call.
  virtual Status execute_async(snpuStream_t stream, const std::vector<void*>& inputs, const std::vector<void*>& outputs,
                               const std::vector<std::vector<int64_t>>& input_dims,
                               std::shared_ptr<std::vector<std::vector<int64_t>>> output_dims,
                               std::shared_ptr<std::vector<void*>> allocated = nullptr) = 0;

  // The JSON atc --mode=1 prints: header, metadata, graph (nodes with their inputs, outputs and attributes).
  virtual std::string to_json() const = 0;
};

}  // namespace softnpu::offline
