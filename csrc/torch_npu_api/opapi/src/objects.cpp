// aclCreate* / aclDestroy*: descriptors copied at creation, so the caller's arrays may go right after the call.
#include "objects.h"

#include <ATen/ATen.h>
#include <ATen/ops/from_blob.h>
#include <c10/util/BFloat16.h>
#include <c10/util/Half.h>

#include "aclnn/aclnn_base.h"
#include "torch_npu/csrc/framework/utils/CalcuOpUtil.h"

namespace torch_npu_api::opapi {

at::ScalarType aten_type(aclDataType type) { return at_npu::native::CalcuOpUtil::ConvertToATenType(type); }

at::Tensor to_tensor(const aclTensor* t) {
  // The device is the one the memory belongs to (the backend's hooks resolve a device pointer).
  return at::for_blob(t->data, t->view_dims)
      .strides(t->strides)
      .storage_offset(t->offset)
      .options(at::TensorOptions().dtype(aten_type(t->dtype)).device(c10::DeviceType::PrivateUse1))
      .make_tensor();
}

c10::Scalar to_scalar(const aclScalar* scalar) { return scalar->value; }

}  // namespace torch_npu_api::opapi

namespace {

bool read_scalar(const void* value, aclDataType type, c10::Scalar* out) {
  switch (type) {
    case ACL_FLOAT: *out = *static_cast<const float*>(value); return true;
    case ACL_FLOAT16: *out = *static_cast<const c10::Half*>(value); return true;
    case ACL_BF16: *out = *static_cast<const c10::BFloat16*>(value); return true;
    case ACL_DOUBLE: *out = *static_cast<const double*>(value); return true;
    case ACL_INT8: *out = static_cast<int64_t>(*static_cast<const int8_t*>(value)); return true;
    case ACL_INT16: *out = static_cast<int64_t>(*static_cast<const int16_t*>(value)); return true;
    case ACL_INT32: *out = static_cast<int64_t>(*static_cast<const int32_t*>(value)); return true;
    case ACL_INT64: *out = *static_cast<const int64_t*>(value); return true;
    case ACL_UINT8: *out = static_cast<int64_t>(*static_cast<const uint8_t*>(value)); return true;
    case ACL_UINT16: *out = static_cast<int64_t>(*static_cast<const uint16_t*>(value)); return true;
    case ACL_UINT32: *out = static_cast<int64_t>(*static_cast<const uint32_t*>(value)); return true;
    case ACL_UINT64: *out = static_cast<int64_t>(*static_cast<const uint64_t*>(value)); return true;
    case ACL_BOOL: *out = *static_cast<const bool*>(value); return true;
    default: return false;
  }
}

}  // namespace

extern "C" {

aclTensor* aclCreateTensor(const int64_t* viewDims, uint64_t viewDimsNum, aclDataType dataType, const int64_t* stride,
                           int64_t offset, aclFormat format, const int64_t* storageDims, uint64_t storageDimsNum,
                           void* tensorData) {
  if ((viewDims == nullptr && viewDimsNum > 0) || offset < 0 ||
      torch_npu_api::opapi::aten_type(dataType) == at::ScalarType::Undefined) {
    return nullptr;
  }
  auto* t = new aclTensor;
  t->view_dims.assign(viewDims, viewDims + viewDimsNum);
  if (stride != nullptr) {
    t->strides.assign(stride, stride + viewDimsNum);
  } else {  // contiguous
    t->strides.resize(viewDimsNum);
    int64_t step = 1;
    for (uint64_t i = viewDimsNum; i-- > 0;) {
      t->strides[i] = step;
      step *= std::max<int64_t>(viewDims[i], 1);
    }
  }
  t->offset = offset;
  t->dtype = dataType;
  t->format = format;
  if (storageDims != nullptr) t->storage_dims.assign(storageDims, storageDims + storageDimsNum);
  t->data = tensorData;
  return t;
}

aclScalar* aclCreateScalar(void* value, aclDataType dataType) {
  if (value == nullptr) return nullptr;
  c10::Scalar s;
  if (!read_scalar(value, dataType, &s)) return nullptr;
  return new aclScalar{s, dataType};
}

aclIntArray* aclCreateIntArray(const int64_t* value, uint64_t size) {
  if (value == nullptr && size > 0) return nullptr;
  return new aclIntArray{std::vector<int64_t>(value, value + size)};
}

aclFloatArray* aclCreateFloatArray(const float* value, uint64_t size) {
  if (value == nullptr && size > 0) return nullptr;
  return new aclFloatArray{std::vector<float>(value, value + size)};
}

aclBoolArray* aclCreateBoolArray(const bool* value, uint64_t size) {
  if (value == nullptr && size > 0) return nullptr;
  return new aclBoolArray{std::vector<bool>(value, value + size)};
}

aclTensorList* aclCreateTensorList(const aclTensor* const* value, uint64_t size) {
  if (value == nullptr && size > 0) return nullptr;
  return new aclTensorList{std::vector<const aclTensor*>(value, value + size)};
}

aclScalarList* aclCreateScalarList(const aclScalar* const* value, uint64_t size) {
  if (value == nullptr && size > 0) return nullptr;
  return new aclScalarList{std::vector<const aclScalar*>(value, value + size)};
}

aclnnStatus aclDestroyTensor(const aclTensor* tensor) {
  delete tensor;
  return ACLNN_SUCCESS;
}
aclnnStatus aclDestroyScalar(const aclScalar* scalar) {
  delete scalar;
  return ACLNN_SUCCESS;
}
aclnnStatus aclDestroyIntArray(const aclIntArray* array) {
  delete array;
  return ACLNN_SUCCESS;
}
aclnnStatus aclDestroyFloatArray(const aclFloatArray* array) {
  delete array;
  return ACLNN_SUCCESS;
}
aclnnStatus aclDestroyBoolArray(const aclBoolArray* array) {
  delete array;
  return ACLNN_SUCCESS;
}
aclnnStatus aclDestroyTensorList(const aclTensorList* array) {
  if (array == nullptr) return ACLNN_SUCCESS;
  for (const aclTensor* t : array->tensors) delete t;
  delete array;
  return ACLNN_SUCCESS;
}
aclnnStatus aclDestroyScalarList(const aclScalarList* array) {
  if (array == nullptr) return ACLNN_SUCCESS;
  for (const aclScalar* s : array->scalars) delete s;
  delete array;
  return ACLNN_SUCCESS;
}

aclnnStatus aclGetViewShape(const aclTensor* tensor, int64_t** viewDims, uint64_t* viewDimsNum) {
  if (tensor == nullptr || viewDims == nullptr || viewDimsNum == nullptr) return ACLNN_ERR_PARAM_NULLPTR;
  *viewDimsNum = tensor->view_dims.size();
  *viewDims = new int64_t[std::max<size_t>(tensor->view_dims.size(), 1)];
  std::copy(tensor->view_dims.begin(), tensor->view_dims.end(), *viewDims);
  return ACLNN_SUCCESS;
}

aclnnStatus aclGetDataType(const aclTensor* tensor, aclDataType* dataType) {
  if (tensor == nullptr || dataType == nullptr) return ACLNN_ERR_PARAM_NULLPTR;
  *dataType = tensor->dtype;
  return ACLNN_SUCCESS;
}

aclnnStatus aclGetFormat(const aclTensor* tensor, aclFormat* format) {
  if (tensor == nullptr || format == nullptr) return ACLNN_ERR_PARAM_NULLPTR;
  *format = tensor->format;
  return ACLNN_SUCCESS;
}

aclnnStatus aclnnInit(const char* configPath) { return ACLNN_SUCCESS; }
aclnnStatus aclnnFinalize(void) { return ACLNN_SUCCESS; }

}  // extern "C"
