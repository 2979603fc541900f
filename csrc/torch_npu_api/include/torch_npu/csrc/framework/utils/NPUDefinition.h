// torch_npu's NPUDefinition.h: the types OpCommand's interface names. DynamicInputRegFunc builds a GE graph operator
// (ge::OperatorPtr, CANN's graph engine) for operators with a variable number of inputs; softnpu runs no GE graphs,
// so only the type is declared (OpCommand::DynamicInputReg accepts one and does not call it).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace ge {
class Operator;
using OperatorPtr = std::shared_ptr<Operator>;
}  // namespace ge

namespace at_npu::native {

using DyNumAndIndex = std::vector<std::pair<uint32_t, uint32_t>>;
using DynamicInputRegFunc = std::function<ge::OperatorPtr(DyNumAndIndex, std::string)>;

}  // namespace at_npu::native
