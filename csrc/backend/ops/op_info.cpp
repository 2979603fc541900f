#include "backend/ops/op_info.h"

#include <ATen/core/function_schema.h>

#include <string>
#include <unordered_map>
#include <unordered_set>

#include "backend/ops/cube.h"
#include "backend/ops/fft_plan_cache.h"
#include "backend/ops/meta_cache.h"
#include "backend/ops/widen.h"

namespace softnpu {

namespace {

bool is_tensor_like(const c10::TypePtr& t) {
  if (t->kind() == c10::TypeKind::TensorType) return true;
  if (auto opt = t->cast<c10::OptionalType>()) return is_tensor_like(opt->getElementType());
  if (auto list = t->cast<c10::ListType>()) return is_tensor_like(list->getElementType());
  return false;
}

bool is_generator(const c10::TypePtr& t) {
  if (t->kind() == c10::TypeKind::GeneratorType) return true;
  if (auto opt = t->cast<c10::OptionalType>()) return opt->getElementType()->kind() == c10::TypeKind::GeneratorType;
  return false;
}

bool is_scalar_type(const c10::TypePtr& t) {
  if (t->kind() == c10::TypeKind::ScalarTypeType) return true;
  if (auto opt = t->cast<c10::OptionalType>()) return opt->getElementType()->kind() == c10::TypeKind::ScalarTypeType;
  return false;
}

bool same_alias_set(const c10::AliasInfo* a, const c10::AliasInfo* b) {
  return a && b && a->beforeSets() == b->beforeSets();
}

// Overload names of every operator, by base name ("aten::max" -> {"", "dim", "dim_max", ...}).
const std::unordered_map<std::string, std::vector<std::string>>& overloads_by_name() {
  static const auto table = [] {
    std::unordered_map<std::string, std::vector<std::string>> t;
    for (const auto& name : c10::Dispatcher::singleton().getAllOpNames())
      t[name.name].push_back(name.overload_name);
    return t;
  }();
  return table;
}

// The out= overload of a functional op: the same leading arguments (same names and types), then exactly one out=
// tensor per return of the functional op (a Tensor(a!)[] for a Tensor[] return).
std::optional<c10::OperatorHandle> find_out_variant(const c10::FunctionSchema& fn) {
  const auto& table = overloads_by_name();
  auto it = table.find(fn.name());
  if (it == table.end()) return std::nullopt;
  for (const auto& overload : it->second) {
    auto handle = c10::Dispatcher::singleton().findSchema({fn.name(), overload});
    if (!handle || !handle->hasSchema()) continue;
    const auto& cand = handle->schema();
    const auto& args = cand.arguments();
    size_t n_out = 0;
    for (const auto& a : args) n_out += a.is_out() ? 1 : 0;
    if (n_out == 0 || n_out != fn.returns().size() || args.size() != fn.arguments().size() + n_out) continue;
    bool match = true;
    for (size_t i = 0; i < fn.arguments().size() && match; ++i) {
      const auto& a = fn.arguments()[i];
      const auto& b = args[i];
      match = !b.is_out() && a.name() == b.name() && *a.type() == *b.type();
    }
    for (size_t i = fn.arguments().size(); i < args.size() && match; ++i) {
      const auto& type = args[i].type();
      const auto& ret = fn.returns()[i - fn.arguments().size()].type();
      const bool tensor_list = type->kind() == c10::TypeKind::ListType && *type == *ret &&
                               type->containedType(0)->kind() == c10::TypeKind::TensorType;
      match = args[i].is_out() && (type->kind() == c10::TypeKind::TensorType || tensor_list);
    }
    if (match) return handle;
  }
  return std::nullopt;
}

// Ops whose CPU kernel returns an auxiliary output of another shape than their Meta kernel infers (Meta describes
// CUDA's kernel) where later CPU kernels read it: _embedding_bag returns an empty offset2bag in "sum" mode, which its
// backward then recomputes; a Meta-shaped one would hold garbage that the backward reads. (Where no kernel reads the
// output, as for batch norm's saved statistics in eval mode, the difference is harmless: kernel.cpp.)
bool outputs_shaped_by_cpu_kernel(const c10::FunctionSchema& schema) {
  return schema.name() == "aten::_embedding_bag";
}

// Ops that run as themselves although they have an out= overload:
// - losses whose out= CPU kernel first resizes a reduced (0-dim) result to the input's shape, which PyTorch warns of
//   as deprecated on every call: the functional kernel computes the same value without it;
// - native_batch_norm and _batch_norm_with_update, whose out= CPU kernels normalize wrongly (and leave the saved
//   statistics unwritten) when the input is neither contiguous nor channels-last (a transposed one), where the
//   functional kernels are right (found by the differential fuzzer).
bool avoids_out_variant(const c10::FunctionSchema& schema) {
  static const std::unordered_set<std::string> ops = {"aten::mse_loss", "aten::smooth_l1_loss", "aten::huber_loss",
                                                      "aten::soft_margin_loss", "aten::binary_cross_entropy",
                                                      "aten::native_batch_norm", "aten::_batch_norm_with_update"};
  return ops.count(schema.name()) > 0;
}

// Whether a kernel writes this argument though the schema does not declare it: native_batch_norm and the SyncBatchNorm
// statistics ops update the running statistics in training mode. Routes that give a kernel copies of its operands
// (the float32 route, ops/widen.h) write back only the written arguments; tests/conformance/meta_audit.py finds such
// arguments by comparing every op's inputs before and after its CPU kernel.
bool writes_undeclared(const c10::FunctionSchema& schema, const c10::Argument& arg) {
  static const std::unordered_set<std::string> ops = {
      "aten::native_batch_norm", "aten::batch_norm_gather_stats_with_counts", "aten::batch_norm_update_stats"};
  return (arg.name() == "running_mean" || arg.name() == "running_var") && ops.count(schema.name()) > 0;
}

std::mutex& registry_mutex() {
  static std::mutex m;
  return m;
}

std::unordered_map<const c10::FunctionSchema*, std::unique_ptr<OpInfo>>& registry() {
  static std::unordered_map<const c10::FunctionSchema*, std::unique_ptr<OpInfo>> r;
  return r;
}

}  // namespace

OpInfo::OpInfo(const c10::OperatorHandle& handle) : op(handle) {
  const auto& schema = op.schema();
  meta_cache_ = is_fft_op(schema.name()) ? fft_plan_cache() : std::make_shared<MetaCache>();
  name = schema.name() + (schema.overload_name().empty() ? "" : "." + schema.overload_name());
  const auto& args = schema.arguments();
  for (size_t i = 0; i < args.size(); ++i) {
    const auto* alias = args[i].alias_info();
    if (alias && alias->isWrite() && is_tensor_like(args[i].type())) {
      written_args.push_back(static_cast<int>(i));
      if (args[i].is_out()) out_args.push_back(static_cast<int>(i));
    } else if (writes_undeclared(schema, args[i])) {
      written_args.push_back(static_cast<int>(i));
    }
    if (is_generator(args[i].type())) generator_args.push_back(static_cast<int>(i));
    if (is_scalar_type(args[i].real_type())) dtype_args.push_back(static_cast<int>(i));
  }
  bool all_returns_alias = !schema.returns().empty();
  for (const auto& ret : schema.returns()) {
    if (!is_tensor_like(ret.type())) returns_non_tensor = true;
    int aliased = -1;
    for (size_t i = 0; i < args.size() && aliased < 0; ++i)
      if (same_alias_set(ret.alias_info(), args[i].alias_info())) aliased = static_cast<int>(i);
    return_alias.push_back(aliased);
    if (aliased < 0) ++fresh_returns;
    if (!ret.alias_info() || ret.alias_info()->isWrite()) all_returns_alias = false;
  }
  // Not dynamic_output_shape: index.Tensor carries it for boolean masks, yet integer indexing must stay
  // asynchronous; for the truly dynamic ops (nonzero, unique) the Meta kernel fails and sends them to the
  // synchronizing path.
  data_dependent = returns_non_tensor || op.hasTag(at::Tag::data_dependent_output) ||
                   outputs_shaped_by_cpu_kernel(schema);
  // In-place views (as_strided_, squeeze_, ...) change the tensor's metadata, not its data.
  is_view = all_returns_alias || op.hasTag(at::Tag::inplace_view);
  has_meta = op.hasKernelForDispatchKey(c10::DispatchKey::Meta) ||
             op.hasKernelForDispatchKey(c10::DispatchKey::CompositeExplicitAutograd) ||
             op.hasKernelForDispatchKey(c10::DispatchKey::CompositeExplicitAutogradNonFunctional);
  meta_fix = softnpu::meta_fix(name);
  if (fresh_returns == static_cast<int>(schema.returns().size()) && !returns_non_tensor &&
      !avoids_out_variant(schema))
    out_variant = find_out_variant(schema);
  // Settles the cube's policy (and reads SOFTNPU_HALF_COMPUTE, raising its error) here on the host, before any
  // compute thread asks for it.
  float32_dtypes = softnpu::float32_dtypes(schema.name());
  if (float32_contract(float32_dtypes)) {
    for (size_t i = 0; i < args.size(); ++i)
      if (is_float32_contract_parameter(args[i].name())) contract_args.push_back(static_cast<int>(i));
    for (size_t i = 0; i < args.size(); ++i)
      if (args[i].name() == "weight") contract_weight = static_cast<int>(i);
  }
  if (float32_dtypes) cube_compute(c10::kHalf);
  widened_dtypes = softnpu::widened_dtypes(schema.name());
  cube_gemm = softnpu::cube_gemm(schema);
}

OpInfo::~OpInfo() = default;

OpInfo& op_info(const c10::OperatorHandle& op) {
  // Hot path: one lookup per op launch. The schema object lives as long as the registration, so its address is a
  // stable key.
  thread_local std::unordered_map<const c10::FunctionSchema*, OpInfo*> tls_cache;
  const c10::FunctionSchema* key = &op.schema();
  auto hit = tls_cache.find(key);
  if (hit != tls_cache.end()) return *hit->second;
  std::lock_guard<std::mutex> lock(registry_mutex());
  auto& slot = registry()[key];
  if (!slot) slot = std::make_unique<OpInfo>(op);
  tls_cache.emplace(key, slot.get());
  return *slot;
}

std::vector<OpInfo*> all_op_infos() {
  std::lock_guard<std::mutex> lock(registry_mutex());
  std::vector<OpInfo*> out;
  for (auto& [k, v] : registry()) out.push_back(v.get());
  return out;
}

}  // namespace softnpu
