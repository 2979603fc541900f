#include "backend/ops/cpp_meta.h"

#include <mutex>
#include <string>
#include <unordered_map>

namespace softnpu {

namespace {

// Argument types as the dispatcher compares them (SymInt as int, ScalarType as int, ...).
bool same_arguments(const c10::FunctionSchema& cpp, const c10::FunctionSchema& schema) {
  if (cpp.arguments().size() != schema.arguments().size()) return false;
  for (size_t i = 0; i < cpp.arguments().size(); ++i)
    if (cpp.arguments()[i].type()->str() != schema.arguments()[i].type()->str()) return false;
  return true;
}

struct Table {
  CppMetaRegistry registry;
  std::unordered_map<c10::OperatorName, const c10::KernelFunction*> by_overload;

  Table() {
    add_aten_cpp_meta_kernels(registry);
    std::unordered_map<std::string, std::vector<c10::OperatorHandle>> overloads;
    for (const c10::OperatorName& name : c10::Dispatcher::singleton().getAllOpNames())
      if (auto op = c10::Dispatcher::singleton().findOp(name)) overloads[name.name].push_back(*op);
    std::unordered_map<c10::OperatorName, int> matches;
    for (const auto& e : registry.entries) {
      const auto it = overloads.find(e.op);
      if (it == overloads.end()) continue;
      for (const c10::OperatorHandle& op : it->second) {
        if (!op.hasSchema() || !same_arguments(e.schema, op.schema())) continue;
        by_overload[op.operator_name()] = &e.kernel;
        ++matches[op.operator_name()];
      }
    }
    // An overload two C++ functions fit (types alone cannot tell them apart) keeps the dispatcher's kernel.
    for (const auto& [name, n] : matches)
      if (n > 1) by_overload.erase(name);
  }
};

Table& table() {
  static Table t;
  return t;
}

}  // namespace

const c10::KernelFunction* cpp_meta_kernel(const c10::OperatorHandle& op) {
  const auto& map = table().by_overload;
  const auto it = map.find(op.operator_name());
  return it == map.end() ? nullptr : it->second;
}

std::vector<std::string> cpp_meta_ops() {
  std::vector<std::string> out;
  for (const auto& [name, kernel] : table().by_overload) out.push_back(c10::toString(name));
  return out;
}

}  // namespace softnpu
