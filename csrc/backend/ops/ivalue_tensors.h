// The tensors an op argument or return holds, as the host side (executor.cpp) and the compute side (kernel.cpp) of
// the op path both walk them.
#pragma once

#include <ATen/core/ivalue.h>

namespace softnpu {

// Calls f on each tensor v holds (a tensor, a tensor list, a list of optional tensors), in order. A None entry of an
// optional-tensor list comes as an undefined tensor, so positions line up between values of the same argument.
template <typename F>
void visit_tensors(const c10::IValue& v, F&& f) {
  if (v.isTensor()) {
    f(v.toTensor());
  } else if (v.isTensorList()) {
    for (const at::Tensor& t : v.toTensorList()) f(t);
  } else if (v.isList()) {
    for (const auto& e : v.toListRef()) f(e.isTensor() ? e.toTensor() : at::Tensor());
  }
}

}  // namespace softnpu
