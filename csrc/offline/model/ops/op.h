// The op table of the offline model: every ONNX op softnpu runs, as a builder that reads the node's attributes once
// (at conversion and again at load) and returns the kernel that runs it. Kernels are ATen calls on host-addressable
// tensors: at conversion on meta tensors (shape and type inference) or on constants (folding), at run time on npu
// device memory, inside the stream's kernel.
#pragma once

#include <ATen/core/Tensor.h>

#include <functional>
#include <stdexcept>
#include <string>
#include <vector>

#include "onnx/onnx.pb.h"

namespace softnpu::offline {

using Tensors = std::vector<at::Tensor>;

// The node cannot run on softnpu (an attribute value, a type or a mode without a kernel): the conversion reports it
// with this reason.
struct Unsupported : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// Inference needs the values of an input that exist only at run time: the node's outputs have dynamic shapes.
struct DataDependent : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// Sets an INT attribute of a node, replacing one of that name (the lowering's and the executor's marks).
void set_int_attr(onnx::NodeProto& node, const std::string& name, int64_t value);

class Attrs {
 public:
  explicit Attrs(const onnx::NodeProto& node) : node_(node) {}
  const onnx::AttributeProto* find(const std::string& name) const;
  bool has(const std::string& name) const { return find(name) != nullptr; }
  int64_t i(const std::string& name, int64_t fallback) const;
  float f(const std::string& name, float fallback) const;
  std::string s(const std::string& name, const std::string& fallback) const;
  std::vector<int64_t> ints(const std::string& name, std::vector<int64_t> fallback = {}) const;
  std::vector<float> floats(const std::string& name, std::vector<float> fallback = {}) const;
  at::Tensor t(const std::string& name) const;  // undefined when absent
  int64_t required_i(const std::string& name) const;

 private:
  const onnx::NodeProto& node_;
};

struct OpContext {
  const onnx::NodeProto& node;
  Attrs attrs;
  int opset;        // of the node's domain, as the model imports it
  int num_inputs;   // positions, absent optional inputs included
  int num_outputs;
  bool has_input(int i) const { return i < num_inputs && !node.input(i).empty(); }
  bool has_output(int i) const { return i < num_outputs && !node.output(i).empty(); }
};

// in: one tensor per input position (undefined for an absent optional input); out: resized to num_outputs by the
// caller, a kernel fills the present ones.
using Kernel = std::function<void(const Tensors& in, Tensors& out)>;
using Builder = Kernel (*)(const OpContext&);

struct OpDef {
  std::string type;
  Builder build;
  std::vector<int> value_inputs;  // inputs whose values (not only shapes) the kernel reads on the host
  bool deterministic = true;      // false: never folded at conversion (random ops)
};

// Ops register at load of the library, one static registration per op file.
bool register_ops(std::vector<OpDef> defs);
const OpDef* find_op(const std::string& type);
// A node's op: ai.onnx's by type, another domain's registered as "domain:type" (ai.onnx.preview:FlexAttention).
const OpDef* find_op(const onnx::NodeProto& node);
bool is_value_input(const OpDef& def, int index);
std::vector<std::string> registered_op_types();

// ---- helpers for kernels
at::ScalarType scalar_type(int32_t onnx_type);  // throws Unsupported for types ATen has not (string, int4, ...)
int32_t onnx_type(at::ScalarType type);
std::vector<int64_t> values_i64(const at::Tensor& t);  // throws DataDependent for a meta tensor
std::vector<double> values_f64(const at::Tensor& t);
int64_t value_i64(const at::Tensor& t);
double value_f64(const at::Tensor& t);
int64_t normalize_axis(int64_t axis, int64_t rank);
// Sub-byte integers (INT4, UINT4, INT2, UINT2) are ATen's shell dtypes (Int4, UInt4, Int2, UInt2), which have no
// kernels: one element per byte, its bit pattern in the low bits (numpy's ml_dtypes layout). Kernels compute on their
// values and store results back (tensor.cpp).
int sub_byte_bits(at::ScalarType type);                                // 0 for other types
at::Tensor sub_byte_values(const at::Tensor& t);                        // int8 or uint8 values of a sub-byte tensor
at::Tensor to_sub_byte(const at::Tensor& integers, at::ScalarType type);  // wrapped to the type's bits
at::Tensor storage_bytes(const at::Tensor& t);  // a sub-byte tensor viewed as uint8 (for copies); others unchanged
// Gather's and GatherND's copy: x viewed as [batches, rows, slice], the row numbers (ONNX's negative ones count from
// the end; one list for every batch, or batches lists one after another when per_batch) -> [batches, picks, slice],
// shaped as `shape`. The rows are copied directly: ATen's route (wrap, where, index_select) is four ops, most of a
// small model's gather time.
at::Tensor gather_rows(const at::Tensor& x, int64_t batches, int64_t rows, const std::vector<int64_t>& offsets,
                       bool per_batch, const std::vector<int64_t>& shape);
// ONNX's Cast (cast.cpp): float8 targets saturate to their largest finite value when `saturate`, else overflow to
// NaN (infinity for float8e5m2); float8e8m0 rounds as round_mode ("up", "down", "nearest") says.
at::Tensor onnx_cast(const at::Tensor& x, at::ScalarType to, bool saturate, const std::string& round_mode = "up");
// The op name in errors: "Conv 'conv1'".
std::string describe(const onnx::NodeProto& node);

}  // namespace softnpu::offline
