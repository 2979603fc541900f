/* AscendCL's base types (CANN's acl_base.h): error numbers, data types, formats, data buffers. */
#ifndef INC_EXTERNAL_ACL_ACL_BASE_H_
#define INC_EXTERNAL_ACL_ACL_BASE_H_

#include <stddef.h>
#include <stdint.h>

#include "error_codes/rt_error_codes.h"

#ifdef __cplusplus
extern "C" {
#endif

#define ACL_FUNC_VISIBILITY __attribute__((visibility("default")))

typedef int aclError;
typedef uint16_t aclFloat16;
typedef struct aclDataBuffer aclDataBuffer;

static const int ACL_ERROR_NONE = 0;
static const int ACL_SUCCESS = 0;

static const int ACL_ERROR_INVALID_PARAM = 100000;
static const int ACL_ERROR_UNINITIALIZE = 100001;
static const int ACL_ERROR_REPEAT_INITIALIZE = 100002;
static const int ACL_ERROR_INVALID_FILE = 100003;
static const int ACL_ERROR_WRITE_FILE = 100004;
static const int ACL_ERROR_INVALID_FILE_SIZE = 100005;
static const int ACL_ERROR_PARSE_FILE = 100006;
static const int ACL_ERROR_FILE_MISSING_ATTR = 100007;
static const int ACL_ERROR_FILE_ATTR_INVALID = 100008;
static const int ACL_ERROR_INVALID_DUMP_CONFIG = 100009;
static const int ACL_ERROR_INVALID_PROFILING_CONFIG = 100010;
static const int ACL_ERROR_INVALID_MODEL_ID = 100011;
static const int ACL_ERROR_DESERIALIZE_MODEL = 100012;
static const int ACL_ERROR_PARSE_MODEL = 100013;
static const int ACL_ERROR_READ_MODEL_FAILURE = 100014;
static const int ACL_ERROR_MODEL_SIZE_INVALID = 100015;
static const int ACL_ERROR_MODEL_MISSING_ATTR = 100016;
static const int ACL_ERROR_MODEL_INPUT_NOT_MATCH = 100017;
static const int ACL_ERROR_MODEL_OUTPUT_NOT_MATCH = 100018;
static const int ACL_ERROR_MODEL_NOT_DYNAMIC = 100019;
static const int ACL_ERROR_UNSUPPORTED_DATA_TYPE = 100026;
static const int ACL_ERROR_FORMAT_NOT_MATCH = 100027;
static const int ACL_ERROR_REPEAT_FINALIZE = 100037;

static const int ACL_ERROR_BAD_ALLOC = 200000;
static const int ACL_ERROR_API_NOT_SUPPORT = 200001;
static const int ACL_ERROR_INVALID_DEVICE = 200002;
static const int ACL_ERROR_INVALID_RESOURCE_HANDLE = 200005;
static const int ACL_ERROR_FEATURE_UNSUPPORTED = 200006;

static const int ACL_ERROR_INTERNAL_ERROR = 500000;
static const int ACL_ERROR_FAILURE = 500001;
static const int ACL_ERROR_GE_FAILURE = 500002;
static const int ACL_ERROR_RT_FAILURE = 500003;

typedef enum {
  ACL_DT_UNDEFINED = -1,
  ACL_FLOAT = 0,
  ACL_FLOAT16 = 1,
  ACL_INT8 = 2,
  ACL_INT32 = 3,
  ACL_UINT8 = 4,
  ACL_INT16 = 6,
  ACL_UINT16 = 7,
  ACL_UINT32 = 8,
  ACL_INT64 = 9,
  ACL_UINT64 = 10,
  ACL_DOUBLE = 11,
  ACL_BOOL = 12,
  ACL_STRING = 13,
  ACL_COMPLEX64 = 16,
  ACL_COMPLEX128 = 17,
  ACL_BF16 = 27,
  ACL_FLOAT8_E5M2 = 35,
  ACL_FLOAT8_E4M3FN = 36,
  ACL_FLOAT8_E8M0 = 37
} aclDataType;

typedef enum {
  ACL_FORMAT_UNDEFINED = -1,
  ACL_FORMAT_NCHW = 0,
  ACL_FORMAT_NHWC = 1,
  ACL_FORMAT_ND = 2,
  ACL_FORMAT_NC1HWC0 = 3,
  ACL_FORMAT_FRACTAL_Z = 4,
  ACL_FORMAT_NDHWC = 27,
  ACL_FORMAT_FRACTAL_NZ = 29,
  ACL_FORMAT_NCDHW = 30,
  ACL_FORMAT_NCL = 47
} aclFormat;

/* Operator tensor descriptions (CANN's aclTensorDesc, the single-operator API): declared so that code written against
 * CANN's headers compiles; softnpu runs operators through aclnn (libopapi.so) and offers no aclCreateTensorDesc. */
typedef struct aclTensorDesc aclTensorDesc;
#define ACL_TENSOR_SHAPE_RANGE_NUM 2

typedef enum { ACL_MEMTYPE_DEVICE = 0, ACL_MEMTYPE_HOST = 1, ACL_MEMTYPE_HOST_COMPILE_INDEPENDENT = 2 } aclMemType;

typedef enum { ACL_DEBUG = 0, ACL_INFO = 1, ACL_WARNING = 2, ACL_ERROR = 3 } aclLogLevel;

/* A data buffer describes memory the caller owns (aclrtMalloc'd); destroying it leaves the memory alone.
 * NULL on a null data pointer with a non-zero size. */
ACL_FUNC_VISIBILITY aclDataBuffer* aclCreateDataBuffer(void* data, size_t size);
ACL_FUNC_VISIBILITY aclError aclDestroyDataBuffer(const aclDataBuffer* dataBuffer);
ACL_FUNC_VISIBILITY aclError aclUpdateDataBuffer(aclDataBuffer* dataBuffer, void* data, size_t size);
/* NULL / 0 for a null buffer. */
ACL_FUNC_VISIBILITY void* aclGetDataBufferAddr(const aclDataBuffer* dataBuffer);
ACL_FUNC_VISIBILITY uint32_t aclGetDataBufferSize(const aclDataBuffer* dataBuffer);
ACL_FUNC_VISIBILITY size_t aclGetDataBufferSizeV2(const aclDataBuffer* dataBuffer);
/* Bytes of one element; 0 for ACL_DT_UNDEFINED, ACL_STRING and unknown types. */
ACL_FUNC_VISIBILITY size_t aclDataTypeSize(aclDataType dataType);

/* The message of the calling thread's most recent failed call (what failed and why), or NULL if there was none
 * since the last time it was read: reading it clears it. */
ACL_FUNC_VISIBILITY const char* aclGetRecentErrMsg(void);

#ifdef __cplusplus
}
#endif

#endif /* INC_EXTERNAL_ACL_ACL_BASE_H_ */
