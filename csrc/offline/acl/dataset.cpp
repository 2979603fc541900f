// Data buffers (a pointer and a size the caller owns) and datasets (the ordered buffers of a model's inputs or
// outputs, with the dynamic profile chosen for the next run).
#include <algorithm>

#include "internal.h"

using namespace softnpu::acl;

extern "C" {

aclDataBuffer* aclCreateDataBuffer(void* data, size_t size) {
  if (!data && size) {
    fail(ACL_ERROR_INVALID_PARAM, "aclCreateDataBuffer: data is null but size is " + std::to_string(size));
    return nullptr;
  }
  return new aclDataBuffer{data, size};
}

aclError aclDestroyDataBuffer(const aclDataBuffer* dataBuffer) {
  if (!dataBuffer) return fail(ACL_ERROR_INVALID_PARAM, "aclDestroyDataBuffer: dataBuffer is null");
  delete dataBuffer;
  return ACL_SUCCESS;
}

aclError aclUpdateDataBuffer(aclDataBuffer* dataBuffer, void* data, size_t size) {
  if (!dataBuffer || (!data && size))
    return fail(ACL_ERROR_INVALID_PARAM, "aclUpdateDataBuffer: dataBuffer is null, or data is null with a size");
  dataBuffer->data = data;
  dataBuffer->size = size;
  return ACL_SUCCESS;
}

void* aclGetDataBufferAddr(const aclDataBuffer* dataBuffer) { return dataBuffer ? dataBuffer->data : nullptr; }

uint32_t aclGetDataBufferSize(const aclDataBuffer* dataBuffer) {
  return dataBuffer ? static_cast<uint32_t>(dataBuffer->size) : 0;
}

size_t aclGetDataBufferSizeV2(const aclDataBuffer* dataBuffer) { return dataBuffer ? dataBuffer->size : 0; }

size_t aclDataTypeSize(aclDataType dataType) {
  switch (dataType) {
    case ACL_INT8:
    case ACL_UINT8:
    case ACL_FLOAT8_E5M2:
    case ACL_FLOAT8_E4M3FN:
    case ACL_FLOAT8_E8M0:
    case ACL_BOOL: return 1;
    case ACL_FLOAT16:
    case ACL_BF16:
    case ACL_INT16:
    case ACL_UINT16: return 2;
    case ACL_FLOAT:
    case ACL_INT32:
    case ACL_UINT32: return 4;
    case ACL_INT64:
    case ACL_UINT64:
    case ACL_DOUBLE:
    case ACL_COMPLEX64: return 8;
    case ACL_COMPLEX128: return 16;
    default: return 0;
  }
}

aclmdlDataset* aclmdlCreateDataset(void) { return new aclmdlDataset; }

aclError aclmdlDestroyDataset(const aclmdlDataset* dataset) {
  if (!dataset) return fail(ACL_ERROR_INVALID_PARAM, "aclmdlDestroyDataset: dataset is null");
  delete dataset;
  return ACL_SUCCESS;
}

aclError aclmdlAddDatasetBuffer(aclmdlDataset* dataset, aclDataBuffer* dataBuffer) {
  if (!dataset || !dataBuffer)
    return fail(ACL_ERROR_INVALID_PARAM, "aclmdlAddDatasetBuffer: dataset and dataBuffer must not be null");
  dataset->buffers.push_back(dataBuffer);
  return ACL_SUCCESS;
}

size_t aclmdlGetDatasetNumBuffers(const aclmdlDataset* dataset) { return dataset ? dataset->buffers.size() : 0; }

aclDataBuffer* aclmdlGetDatasetBuffer(const aclmdlDataset* dataset, size_t index) {
  if (!dataset || index >= dataset->buffers.size()) return nullptr;
  return dataset->buffers[index];
}

}
