// Names the PrivateUse1 backend "npu" when the library loads, so C++ programs can write torch::Device("npu:0")
// without Python (the Python package renames it too, which is allowed with the same name).
#include <c10/core/DeviceType.h>

namespace softnpu {

namespace {
const bool renamed = [] {
  c10::register_privateuse1_backend("npu");
  return true;
}();
}  // namespace

}  // namespace softnpu
