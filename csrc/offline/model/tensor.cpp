// ONNX tensors and attributes to ATen, and the op table.
#include "model/tensor.h"

#include <ATen/ATen.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>

namespace softnpu::offline {

namespace {

std::map<std::string, OpDef>& op_table() {
  static std::map<std::string, OpDef> table;
  return table;
}

}  // namespace

bool register_ops(std::vector<OpDef> defs) {
  for (auto& d : defs) {
    std::string type = d.type;
    // Two files registering one op type would leave the kernel to link order.
    if (!op_table().emplace(type, std::move(d)).second) {
      std::fprintf(stderr, "softnpu offline: op type %s is registered twice\n", type.c_str());
      std::abort();
    }
  }
  return true;
}

const OpDef* find_op(const std::string& type) {
  auto it = op_table().find(type);
  return it == op_table().end() ? nullptr : &it->second;
}

const OpDef* find_op(const onnx::NodeProto& node) {
  if (node.domain().empty() || node.domain() == "ai.onnx") return find_op(node.op_type());
  return find_op(node.domain() + ":" + node.op_type());
}

bool is_value_input(const OpDef& def, int index) {
  for (int v : def.value_inputs)
    if (v == index) return true;
  return false;
}

std::vector<std::string> registered_op_types() {
  std::vector<std::string> out;
  for (auto& [k, v] : op_table()) out.push_back(k);
  return out;
}

at::ScalarType scalar_type(int32_t t) {
  using TP = onnx::TensorProto;
  switch (t) {
    case TP::FLOAT: return at::kFloat;
    case TP::UINT8: return at::kByte;
    case TP::INT8: return at::kChar;
    case TP::UINT16: return at::kUInt16;
    case TP::INT16: return at::kShort;
    case TP::INT32: return at::kInt;
    case TP::INT64: return at::kLong;
    case TP::BOOL: return at::kBool;
    case TP::FLOAT16: return at::kHalf;
    case TP::DOUBLE: return at::kDouble;
    case TP::UINT32: return at::kUInt32;
    case TP::UINT64: return at::kUInt64;
    case TP::COMPLEX64: return at::kComplexFloat;
    case TP::COMPLEX128: return at::kComplexDouble;
    case TP::BFLOAT16: return at::kBFloat16;
    case TP::FLOAT8E4M3FN: return at::kFloat8_e4m3fn;
    case TP::FLOAT8E4M3FNUZ: return at::kFloat8_e4m3fnuz;
    case TP::FLOAT8E5M2: return at::kFloat8_e5m2;
    case TP::FLOAT8E5M2FNUZ: return at::kFloat8_e5m2fnuz;
    case TP::FLOAT8E8M0: return at::kFloat8_e8m0fnu;
    case TP::INT4: return at::kInt4;
    case TP::UINT4: return at::kUInt4;
    case TP::INT2: return at::kInt2;
    case TP::UINT2: return at::kUInt2;
    default: break;
  }
  auto name = onnx::TensorProto::DataType_IsValid(t) ? onnx::TensorProto::DataType_Name(static_cast<onnx::TensorProto::DataType>(t))
                                                     : std::to_string(t);
  throw Unsupported("element type " + name + " has no softnpu kernels");
}

int32_t onnx_type(at::ScalarType t) {
  using TP = onnx::TensorProto;
  switch (t) {
    case at::kFloat: return TP::FLOAT;
    case at::kByte: return TP::UINT8;
    case at::kChar: return TP::INT8;
    case at::kUInt16: return TP::UINT16;
    case at::kShort: return TP::INT16;
    case at::kInt: return TP::INT32;
    case at::kLong: return TP::INT64;
    case at::kBool: return TP::BOOL;
    case at::kHalf: return TP::FLOAT16;
    case at::kDouble: return TP::DOUBLE;
    case at::kUInt32: return TP::UINT32;
    case at::kUInt64: return TP::UINT64;
    case at::kComplexFloat: return TP::COMPLEX64;
    case at::kComplexDouble: return TP::COMPLEX128;
    case at::kBFloat16: return TP::BFLOAT16;
    case at::kFloat8_e4m3fn: return TP::FLOAT8E4M3FN;
    case at::kFloat8_e4m3fnuz: return TP::FLOAT8E4M3FNUZ;
    case at::kFloat8_e5m2: return TP::FLOAT8E5M2;
    case at::kFloat8_e5m2fnuz: return TP::FLOAT8E5M2FNUZ;
    case at::kFloat8_e8m0fnu: return TP::FLOAT8E8M0;
    case at::kInt4: return TP::INT4;
    case at::kUInt4: return TP::UINT4;
    case at::kInt2: return TP::INT2;
    case at::kUInt2: return TP::UINT2;
    default: throw Unsupported(std::string("ATen type ") + c10::toString(t) + " has no ONNX element type");
  }
}

int sub_byte_bits(at::ScalarType type) {
  switch (type) {
    case at::kInt4: case at::kUInt4: return 4;
    case at::kInt2: case at::kUInt2: return 2;
    default: return 0;
  }
}

at::Tensor storage_bytes(const at::Tensor& t) { return sub_byte_bits(t.scalar_type()) ? t.view(at::kByte) : t; }

at::Tensor sub_byte_values(const at::Tensor& t) {
  int bits = sub_byte_bits(t.scalar_type());
  auto b = t.view(at::kByte);
  if (t.scalar_type() == at::kUInt4 || t.scalar_type() == at::kUInt2) return b;
  int64_t half = int64_t{1} << (bits - 1);
  return ((b.to(at::kShort) ^ half) - half).to(at::kChar);  // sign extension
}

at::Tensor to_sub_byte(const at::Tensor& integers, at::ScalarType type) {
  int64_t mask = (int64_t{1} << sub_byte_bits(type)) - 1;
  return (integers.to(at::kLong) & mask).to(at::kByte).view(type);
}

namespace {

// ONNX packs sub-byte elements into bytes, the first element in the low bits.
at::Tensor unpack(const uint8_t* packed, int64_t n, at::ScalarType type, const std::vector<int64_t>& dims) {
  int bits = sub_byte_bits(type), per_byte = 8 / bits;
  auto t = at::empty(dims, at::kByte);
  auto* out = t.data_ptr<uint8_t>();
  for (int64_t i = 0; i < n; ++i) out[i] = (packed[i / per_byte] >> (bits * (i % per_byte))) & ((1 << bits) - 1);
  return t.view(type);
}

std::string pack(const at::Tensor& t) {
  int bits = sub_byte_bits(t.scalar_type()), per_byte = 8 / bits;
  auto c = t.view(at::kByte).contiguous();
  const auto* in = c.data_ptr<uint8_t>();
  std::string out((c.numel() + per_byte - 1) / per_byte, '\0');
  for (int64_t i = 0; i < c.numel(); ++i) out[i / per_byte] |= static_cast<char>((in[i] & ((1 << bits) - 1)) << (bits * (i % per_byte)));
  return out;
}

}  // namespace

at::Tensor from_proto(const onnx::TensorProto& p) {
  if (p.data_location() == onnx::TensorProto::EXTERNAL)
    throw Unsupported("tensor '" + p.name() + "' keeps its data in an external file");
  if (p.has_segment()) throw Unsupported("tensor '" + p.name() + "' is segmented");
  auto type = scalar_type(p.data_type());
  std::vector<int64_t> dims(p.dims().begin(), p.dims().end());
  int64_t n = 1;
  for (auto d : dims) n *= d;
  auto opts = at::TensorOptions().dtype(type);
  if (int bits = sub_byte_bits(type)) {
    int64_t bytes = (n * bits + 7) / 8;
    std::string packed = p.raw_data();
    if (!p.has_raw_data()) {
      for (auto v : p.int32_data()) packed.push_back(static_cast<char>(v));
    }
    if (static_cast<int64_t>(packed.size()) != bytes)
      throw Unsupported("tensor '" + p.name() + "' has " + std::to_string(packed.size()) + " bytes of packed data for " +
                        std::to_string(n) + " elements");
    return unpack(reinterpret_cast<const uint8_t*>(packed.data()), n, type, dims);
  }
  if (p.has_raw_data()) {
    const auto& raw = p.raw_data();
    if (static_cast<int64_t>(raw.size()) != n * static_cast<int64_t>(c10::elementSize(type)))
      throw Unsupported("tensor '" + p.name() + "' has " + std::to_string(raw.size()) + " bytes of raw data for " +
                        std::to_string(n) + " elements");
    auto t = at::empty(dims, opts);
    if (n) std::memcpy(t.data_ptr(), raw.data(), raw.size());
    return t;
  }
  using TP = onnx::TensorProto;
  auto t = at::empty(dims, opts);
  auto check = [&](int size) {
    if (size != n)
      throw Unsupported("tensor '" + p.name() + "' has " + std::to_string(size) + " values for " + std::to_string(n) +
                        " elements");
  };
  switch (p.data_type()) {
    case TP::FLOAT: check(p.float_data_size()); std::copy(p.float_data().begin(), p.float_data().end(), t.data_ptr<float>()); break;
    case TP::DOUBLE: check(p.double_data_size()); std::copy(p.double_data().begin(), p.double_data().end(), t.data_ptr<double>()); break;
    case TP::INT64: check(p.int64_data_size()); std::copy(p.int64_data().begin(), p.int64_data().end(), t.data_ptr<int64_t>()); break;
    case TP::UINT32: case TP::UINT64: {
      check(p.uint64_data_size());
      auto src = at::tensor(std::vector<int64_t>(p.uint64_data().begin(), p.uint64_data().end()), at::kLong);
      t.copy_(src.reshape(dims).view(at::kUInt64).to(type));
      break;
    }
    case TP::COMPLEX64: {
      if (p.float_data_size() != 2 * n) check(p.float_data_size() / 2);
      std::copy(p.float_data().begin(), p.float_data().end(), reinterpret_cast<float*>(t.data_ptr()));
      break;
    }
    case TP::COMPLEX128: {
      if (p.double_data_size() != 2 * n) check(p.double_data_size() / 2);
      std::copy(p.double_data().begin(), p.double_data().end(), reinterpret_cast<double*>(t.data_ptr()));
      break;
    }
    default: {
      // int32_data holds every type of 32 bits or less: integers by value, float16/bfloat16/float8 by bit pattern.
      check(p.int32_data_size());
      std::vector<int32_t> v(p.int32_data().begin(), p.int32_data().end());
      auto src = at::tensor(v, at::kInt).reshape(dims);
      bool bits = type == at::kHalf || type == at::kBFloat16 || c10::isFloat8Type(type);
      if (!bits) {
        t.copy_(src.to(type));
      } else if (c10::elementSize(type) == 2) {
        t.view(at::kShort).copy_(src.to(at::kShort));
      } else {
        t.view(at::kByte).copy_(src.to(at::kByte));
      }
    }
  }
  return t;
}

void to_proto(const at::Tensor& t, const std::string& name, onnx::TensorProto* p) {
  p->set_name(name);
  p->set_data_type(onnx_type(t.scalar_type()));
  for (auto d : t.sizes()) p->add_dims(d);
  if (sub_byte_bits(t.scalar_type())) {
    p->set_raw_data(pack(t));
    return;
  }
  auto c = t.contiguous();
  p->set_raw_data(std::string(static_cast<const char*>(c.data_ptr()), c.nbytes()));
}

void set_int_attr(onnx::NodeProto& node, const std::string& name, int64_t value) {
  for (auto& a : *node.mutable_attribute())
    if (a.name() == name) {
      a.set_i(value);
      return;
    }
  auto* a = node.add_attribute();
  a->set_name(name);
  a->set_type(onnx::AttributeProto::INT);
  a->set_i(value);
}

const onnx::AttributeProto* Attrs::find(const std::string& name) const {
  for (const auto& a : node_.attribute())
    if (a.name() == name) return &a;
  return nullptr;
}

int64_t Attrs::i(const std::string& name, int64_t fallback) const {
  auto* a = find(name);
  return a ? a->i() : fallback;
}

int64_t Attrs::required_i(const std::string& name) const {
  auto* a = find(name);
  if (!a) throw Unsupported("attribute '" + name + "' is required");
  return a->i();
}

float Attrs::f(const std::string& name, float fallback) const {
  auto* a = find(name);
  return a ? a->f() : fallback;
}

std::string Attrs::s(const std::string& name, const std::string& fallback) const {
  auto* a = find(name);
  return a ? a->s() : fallback;
}

std::vector<int64_t> Attrs::ints(const std::string& name, std::vector<int64_t> fallback) const {
  auto* a = find(name);
  return a ? std::vector<int64_t>(a->ints().begin(), a->ints().end()) : fallback;
}

std::vector<float> Attrs::floats(const std::string& name, std::vector<float> fallback) const {
  auto* a = find(name);
  return a ? std::vector<float>(a->floats().begin(), a->floats().end()) : fallback;
}

at::Tensor Attrs::t(const std::string& name) const {
  auto* a = find(name);
  return a ? from_proto(a->t()) : at::Tensor();
}

std::vector<int64_t> values_i64(const at::Tensor& t) {
  if (t.is_meta()) throw DataDependent("reads the values of an input known only at run time");
  auto c = t.to(at::kLong).contiguous().reshape({-1});
  return std::vector<int64_t>(c.data_ptr<int64_t>(), c.data_ptr<int64_t>() + c.numel());
}

std::vector<double> values_f64(const at::Tensor& t) {
  if (t.is_meta()) throw DataDependent("reads the values of an input known only at run time");
  auto c = t.to(at::kDouble).contiguous().reshape({-1});
  return std::vector<double>(c.data_ptr<double>(), c.data_ptr<double>() + c.numel());
}

int64_t value_i64(const at::Tensor& t) {
  auto v = values_i64(t);
  if (v.size() != 1) throw Unsupported("expected a single value, got " + std::to_string(v.size()));
  return v[0];
}

double value_f64(const at::Tensor& t) {
  auto v = values_f64(t);
  if (v.size() != 1) throw Unsupported("expected a single value, got " + std::to_string(v.size()));
  return v[0];
}

int64_t normalize_axis(int64_t axis, int64_t rank) {
  if (axis < -rank || axis >= std::max<int64_t>(rank, 1))
    throw Unsupported("axis " + std::to_string(axis) + " is out of range for rank " + std::to_string(rank));
  return axis < 0 ? axis + rank : axis;
}

at::Tensor gather_rows(const at::Tensor& x, int64_t batches, int64_t rows, const std::vector<int64_t>& offsets,
                       bool per_batch, const std::vector<int64_t>& shape) {
  auto y = at::empty(shape, x.options());
  if (y.numel() == 0) return y;
  if (batches * rows == 0) throw std::out_of_range("index into a dim of size 0");
  auto src = storage_bytes(x).contiguous();
  size_t slice_bytes = src.nbytes() / (batches * rows);
  int64_t picks = per_batch ? static_cast<int64_t>(offsets.size()) / batches : static_cast<int64_t>(offsets.size());
  const auto* from = static_cast<const char*>(src.const_data_ptr());
  auto* dst = static_cast<char*>(storage_bytes(y).data_ptr());
  for (int64_t b = 0; b < batches; ++b)
    for (int64_t j = 0; j < picks; ++j) {
      int64_t r = offsets[per_batch ? b * picks + j : j];
      if (r < -rows || r >= rows)
        throw std::out_of_range("index " + std::to_string(r) + " is out of range for a dim of size " + std::to_string(rows));
      if (r < 0) r += rows;
      std::memcpy(dst, from + (b * rows + r) * slice_bytes, slice_bytes);
      dst += slice_bytes;
    }
  return y;
}

std::string describe(const onnx::NodeProto& node) { return node.op_type() + " '" + node.name() + "'"; }

}  // namespace softnpu::offline
