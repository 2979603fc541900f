// ATen's C++ Meta kernels, for shape inference that runs no Python. torch registers Python Meta kernels
// (torch/_meta_registrations.py, and its decompositions) over most of ATen's C++ ones, so redispatching to the Meta key
// runs Python code that calls torch.where, Tensor.__mul__, ... — calls a user's hooks (msprobe's API dump, anything
// patching torch.* functions) would take for the user's own. The op path infers with the C++ kernel where ATen has
// one: the functions of `at::meta` (ATen's *_meta_dispatch.h, listed by gen_cpp_meta.py), matched to the overload
// whose schema has their argument types.
#pragma once

#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/op_registration/infer_schema.h>

#include <vector>

namespace softnpu {

class CppMetaRegistry {
 public:
  struct Entry {
    const char* op;  // "aten::add"
    c10::KernelFunction kernel;
    c10::FunctionSchema schema;  // inferred from the C++ signature: argument types only
  };

  template <class FuncType>
  void add(const char* op, FuncType* fn) {
    entries.push_back({op, c10::KernelFunction::makeFromUnboxedRuntimeFunction<true>(fn),
                       c10::inferFunctionSchemaFlattenedReturns<FuncType>()});
  }

  std::vector<Entry> entries;
};

// The generated table (cpp_meta_table.cpp).
void add_aten_cpp_meta_kernels(CppMetaRegistry& r);

// op's C++ Meta kernel, or null when ATen has none (the dispatcher's Meta kernel then infers).
const c10::KernelFunction* cpp_meta_kernel(const c10::OperatorHandle& op);

// The overloads that have one ("aten::add.Tensor", ...), for tests.
std::vector<std::string> cpp_meta_ops();

}  // namespace softnpu
