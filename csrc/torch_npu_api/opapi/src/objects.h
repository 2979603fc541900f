// The objects behind aclnn's opaque handles, and how an operator reads them: an aclTensor becomes an npu tensor over
// the caller's device memory (no copy, no ownership), an aclScalar a c10::Scalar.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/Scalar.h>

#include <vector>

#include "aclnn/acl_meta.h"

struct aclTensor {
  std::vector<int64_t> view_dims;
  std::vector<int64_t> strides;
  int64_t offset = 0;
  aclDataType dtype = ACL_DT_UNDEFINED;
  aclFormat format = ACL_FORMAT_ND;
  std::vector<int64_t> storage_dims;
  void* data = nullptr;
};

struct aclScalar {
  c10::Scalar value;
  aclDataType dtype = ACL_DT_UNDEFINED;
};

struct aclIntArray {
  std::vector<int64_t> values;
};
struct aclFloatArray {
  std::vector<float> values;
};
struct aclBoolArray {
  std::vector<bool> values;
};
struct aclTensorList {
  std::vector<const aclTensor*> tensors;
};
struct aclScalarList {
  std::vector<const aclScalar*> scalars;
};

namespace torch_npu_api::opapi {

// ATen's dtype for an ACL dtype (Undefined if none).
at::ScalarType aten_type(aclDataType type);
// The npu tensor a descriptor describes (its device is the memory's).
at::Tensor to_tensor(const aclTensor* tensor);
c10::Scalar to_scalar(const aclScalar* scalar);

}  // namespace torch_npu_api::opapi
