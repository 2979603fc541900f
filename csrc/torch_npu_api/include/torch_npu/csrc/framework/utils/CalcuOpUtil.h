// torch_npu's CalcuOpUtil: conversions between ATen's and ACL's types.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/Scalar.h>

#include "third_party/acl/inc/acl/acl_base.h"

#include <string>

// torch_npu's header has this at global scope, and extensions (MindSpeed's aclnn_common.h) write `string` unqualified.
using std::string;

namespace at_npu::native {

class CalcuOpUtil {
 public:
  // ACL_DT_UNDEFINED for a dtype ACL has no type for.
  static aclDataType ConvertToAclDataType(const at::ScalarType& data_type);
  static at::ScalarType ConvertToATenType(aclDataType data_type);
  static c10::Scalar ConvertTensorToScalar(const at::Tensor& tensor);
  static at::Tensor CopyScalarToDevice(const c10::Scalar& cpu_scalar, at::ScalarType scalar_data_type);
  static at::Tensor CopyTensorHostToDevice(const at::Tensor& cpu_tensor);
  static int64_t GetTensorNpuFormat(const at::Tensor& tensor);
  static bool IsScalarWrappedToTensor(const at::Tensor& tensor);
  static float GetScalarFloatValue(const c10::Scalar& scalar);
};

}  // namespace at_npu::native
