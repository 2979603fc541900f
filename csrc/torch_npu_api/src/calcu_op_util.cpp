// CalcuOpUtil: ATen's dtypes as ACL's (acl_base.h's aclDataType values) and host/device scalar helpers.
#include "torch_npu/csrc/framework/utils/CalcuOpUtil.h"

#include <ATen/ATen.h>

#include <utility>

#include "torch_npu/csrc/core/npu/NPUFormat.h"

namespace at_npu::native {

namespace {

constexpr std::pair<at::ScalarType, aclDataType> kTypes[] = {
    {at::kFloat, ACL_FLOAT},       {at::kHalf, ACL_FLOAT16},          {at::kChar, ACL_INT8},
    {at::kInt, ACL_INT32},         {at::kByte, ACL_UINT8},            {at::kShort, ACL_INT16},
    {at::kUInt16, ACL_UINT16},     {at::kUInt32, ACL_UINT32},         {at::kLong, ACL_INT64},
    {at::kUInt64, ACL_UINT64},     {at::kDouble, ACL_DOUBLE},         {at::kBool, ACL_BOOL},
    {at::kComplexFloat, ACL_COMPLEX64}, {at::kComplexDouble, ACL_COMPLEX128}, {at::kBFloat16, ACL_BF16},
    {at::kFloat8_e5m2, ACL_FLOAT8_E5M2}, {at::kFloat8_e4m3fn, ACL_FLOAT8_E4M3FN},
    {at::kFloat8_e8m0fnu, ACL_FLOAT8_E8M0},
};

}  // namespace

aclDataType CalcuOpUtil::ConvertToAclDataType(const at::ScalarType& data_type) {
  for (const auto& [aten, acl] : kTypes) {
    if (aten == data_type) return acl;
  }
  return ACL_DT_UNDEFINED;
}

at::ScalarType CalcuOpUtil::ConvertToATenType(aclDataType data_type) {
  for (const auto& [aten, acl] : kTypes) {
    if (acl == data_type) return aten;
  }
  return at::ScalarType::Undefined;
}

c10::Scalar CalcuOpUtil::ConvertTensorToScalar(const at::Tensor& tensor) { return tensor.item(); }

at::Tensor CalcuOpUtil::CopyScalarToDevice(const c10::Scalar& cpu_scalar, at::ScalarType scalar_data_type) {
  return CopyTensorHostToDevice(at::scalar_tensor(cpu_scalar, at::TensorOptions().dtype(scalar_data_type)));
}

at::Tensor CalcuOpUtil::CopyTensorHostToDevice(const at::Tensor& cpu_tensor) {
  return cpu_tensor.to(at::Device(c10::DeviceType::PrivateUse1), /*non_blocking=*/cpu_tensor.is_pinned());
}

int64_t CalcuOpUtil::GetTensorNpuFormat(const at::Tensor& tensor) { return get_npu_format(tensor); }

bool CalcuOpUtil::IsScalarWrappedToTensor(const at::Tensor& tensor) {
  return tensor.dim() == 0 && tensor.unsafeGetTensorImpl()->is_wrapped_number();
}

float CalcuOpUtil::GetScalarFloatValue(const c10::Scalar& scalar) { return scalar.toFloat(); }

}  // namespace at_npu::native
