/* AscendCL's runtime calls (CANN's acl_rt.h): devices, contexts, streams, events, memory. A layer over softnpu's
 * runtime (softnpu/runtime.h): device memory is the runtime's npu memory, streams and events are runtime streams
 * and events. SYNC: complete when the call returns; ASYNC: enqueued on a stream, in stream order.
 * Every call fails with ACL_ERROR_UNINITIALIZE before aclInit, and the calls that act on the current device with
 * ACL_ERROR_RT_CONTEXT_NULL before aclrtSetDevice or aclrtSetCurrentContext on the calling thread. */
#ifndef INC_EXTERNAL_ACL_ACL_RT_H_
#define INC_EXTERNAL_ACL_ACL_RT_H_

#include "acl_base.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef void* aclrtContext;
typedef void* aclrtStream;
typedef void* aclrtEvent;

/* Event flags (aclrtCreateEventWithFlag's, CANN's values); torch_npu's events pass them to c10_npu::NPUEvent. */
#define ACL_EVENT_SYNC 0x00000001U
#define ACL_EVENT_TIME_LINE 0x00000008U
#define ACL_EVENT_IPC 0x00000040U

typedef enum aclrtRunMode { ACL_DEVICE = 0, ACL_HOST = 1 } aclrtRunMode;

typedef enum aclrtMemcpyKind {
  ACL_MEMCPY_HOST_TO_HOST = 0,
  ACL_MEMCPY_HOST_TO_DEVICE = 1,
  ACL_MEMCPY_DEVICE_TO_HOST = 2,
  ACL_MEMCPY_DEVICE_TO_DEVICE = 3,
  ACL_MEMCPY_DEFAULT = 4
} aclrtMemcpyKind;

/* Accepted and ignored: the software NPU's memory has one kind of page. */
typedef enum aclrtMemMallocPolicy {
  ACL_MEM_MALLOC_HUGE_FIRST = 0,
  ACL_MEM_MALLOC_HUGE_ONLY = 1,
  ACL_MEM_MALLOC_NORMAL_ONLY = 2,
  ACL_MEM_MALLOC_HUGE_FIRST_P2P = 3,
  ACL_MEM_MALLOC_HUGE_ONLY_P2P = 4,
  ACL_MEM_MALLOC_NORMAL_ONLY_P2P = 5
} aclrtMemMallocPolicy;

/* Every attribute answers for the device's whole memory (the software NPU has one kind). */
typedef enum aclrtMemAttr {
  ACL_DDR_MEM = 0,
  ACL_HBM_MEM = 1,
  ACL_DDR_MEM_HUGE = 2,
  ACL_DDR_MEM_NORMAL = 3,
  ACL_HBM_MEM_HUGE = 4,
  ACL_HBM_MEM_NORMAL = 5,
  ACL_DDR_MEM_P2P_HUGE = 6,
  ACL_DDR_MEM_P2P_NORMAL = 7,
  ACL_HBM_MEM_P2P_HUGE = 8,
  ACL_HBM_MEM_P2P_NORMAL = 9
} aclrtMemAttr;

/* CANN's types of the calls softnpu does not offer (resource limits, event status, UCE repair, cache operations,
 * overflow modes, utilization, exception callbacks): declared with CANN's values so that code written against CANN's
 * headers (torch_npu's stub sources among it) compiles. */
typedef enum { ACL_RT_DEV_RES_CUBE_CORE = 0, ACL_RT_DEV_RES_VECTOR_CORE } aclrtDevResLimitType;

typedef enum aclrtEventStatus {
  ACL_EVENT_STATUS_COMPLETE = 0,
  ACL_EVENT_STATUS_NOT_READY = 1,
  ACL_EVENT_STATUS_RESERVED = 2
} aclrtEventStatus;

typedef enum aclrtEventRecordedStatus {
  ACL_EVENT_RECORDED_STATUS_NOT_READY = 0,
  ACL_EVENT_RECORDED_STATUS_COMPLETE = 1
} aclrtEventRecordedStatus;

#define ACL_IPC_EVENT_HANDLE_SIZE 64U
/* An event shared between processes (aclrtIpcGetEventHandle / aclrtIpcOpenEventHandle): opaque bytes. */
typedef struct aclrtIpcEventHandle {
  char reserved[ACL_IPC_EVENT_HANDLE_SIZE];
} aclrtIpcEventHandle;

#define UCE_INFO_RESERVED_SIZE 14
typedef struct aclrtMemUceInfo {
  void* addr;
  size_t len;
  size_t reserved[UCE_INFO_RESERVED_SIZE];
} aclrtMemUceInfo;

typedef enum {
  ACL_RT_NO_ERROR = 0,
  ACL_RT_ERROR_MEMORY = 1,
  ACL_RT_ERROR_L2 = 2,
  ACL_RT_ERROR_AICORE = 3,
  ACL_RT_ERROR_LINK = 4,
  ACL_RT_ERROR_OTHERS = 0xFFFF
} aclrtErrorType;

typedef enum aclrtAicoreErrorType {
  ACL_RT_AICORE_ERROR_UNKNOWN,
  ACL_RT_AICORE_ERROR_SW,
  ACL_RT_AICORE_ERROR_HW_LOCAL
} aclrtAicoreErrorType;

#define ACL_RT_MEM_UCE_INFO_MAX_NUM 20
typedef struct {
  size_t arraySize;
  aclrtMemUceInfo memUceInfoArray[ACL_RT_MEM_UCE_INFO_MAX_NUM];
} aclrtMemUceInfoArray;

typedef union aclrtErrorInfoDetail {
  aclrtMemUceInfoArray uceInfo;
  aclrtAicoreErrorType aicoreErrType;
} aclrtErrorInfoDetail;

typedef struct aclrtErrorInfo {
  uint8_t tryRepair;
  uint8_t hasDetail;
  uint8_t reserved[2];
  aclrtErrorType errorType;
  aclrtErrorInfoDetail detail;
} aclrtErrorInfo;

typedef enum aclrtCmoType {
  ACL_RT_CMO_TYPE_PREFETCH = 0,
  ACL_RT_CMO_TYPE_WRITEBACK,
  ACL_RT_CMO_TYPE_INVALID,
  ACL_RT_CMO_TYPE_FLUSH
} aclrtCmoType;

typedef enum aclrtLastErrLevel { ACL_RT_THREAD_LEVEL = 0 } aclrtLastErrLevel;

typedef enum aclrtFloatOverflowMode {
  ACL_RT_OVERFLOW_MODE_SATURATION = 0,
  ACL_RT_OVERFLOW_MODE_INFNAN,
  ACL_RT_OVERFLOW_MODE_UNDEF
} aclrtFloatOverflowMode;

typedef struct aclrtUtilizationExtendInfo aclrtUtilizationExtendInfo;
typedef struct aclrtUtilizationInfo {
  int32_t cubeUtilization;
  int32_t vectorUtilization;
  int32_t aicpuUtilization;
  int32_t memoryUtilization;
  aclrtUtilizationExtendInfo* utilizationExtend;
} aclrtUtilizationInfo;

typedef struct rtExceptionInfo aclrtExceptionInfo;
typedef void (*aclrtExceptionInfoCallback)(aclrtExceptionInfo* exceptionInfo);

/* ---- devices and contexts */

/* SYNC. ACL_HOST: the program runs on the host, beside the device (as with an Ascend card in a server). */
ACL_FUNC_VISIBILITY aclError aclrtGetRunMode(aclrtRunMode* runMode);
/* SYNC. Makes the device current for the calling thread (its default context). ACL_ERROR_RT_INVALID_DEVICEID for a
 * device that does not exist. */
ACL_FUNC_VISIBILITY aclError aclrtSetDevice(int32_t deviceId);
/* SYNC. Waits for the device's work and releases this thread's hold on it (its default context is no longer
 * current). */
ACL_FUNC_VISIBILITY aclError aclrtResetDevice(int32_t deviceId);
/* SYNC. */
ACL_FUNC_VISIBILITY aclError aclrtGetDevice(int32_t* deviceId);
/* SYNC. Does not need aclrtSetDevice. */
ACL_FUNC_VISIBILITY aclError aclrtGetDeviceCount(uint32_t* count);
/* SYNC. The SoC the devices present as (SOFTNPU_SOC_VERSION: "Ascend910B3"), the soc_version models are checked
 * against at load; NULL if the runtime cannot start. Needs no device. */
ACL_FUNC_VISIBILITY const char* aclrtGetSocName(void);
/* SYNC. Waits for all work on the current device. */
ACL_FUNC_VISIBILITY aclError aclrtSynchronizeDevice(void);
/* SYNC. Creates a context on the device and makes it current for the calling thread. */
ACL_FUNC_VISIBILITY aclError aclrtCreateContext(aclrtContext* context, int32_t deviceId);
/* SYNC. Waits for the context's device, then destroys it (it stops being current where it was). */
ACL_FUNC_VISIBILITY aclError aclrtDestroyContext(aclrtContext context);
/* SYNC. */
ACL_FUNC_VISIBILITY aclError aclrtSetCurrentContext(aclrtContext context);
ACL_FUNC_VISIBILITY aclError aclrtGetCurrentContext(aclrtContext* context);

/* ---- streams and events (a NULL stream is the current device's default stream) */

/* SYNC. A stream on the current device. */
ACL_FUNC_VISIBILITY aclError aclrtCreateStream(aclrtStream* stream);
/* SYNC. Waits for the stream's work, then destroys it. */
ACL_FUNC_VISIBILITY aclError aclrtDestroyStream(aclrtStream stream);
/* SYNC. Waits for the stream's work; reports the failure of a kernel or model run on it (ACL_ERROR_RT_MODEL_EXECUTE
 * for a model, ACL_ERROR_RT_AICORE_EXCEPTION for another kernel; aclGetRecentErrMsg names the node). */
ACL_FUNC_VISIBILITY aclError aclrtSynchronizeStream(aclrtStream stream);
typedef enum aclrtStreamStatus {
  ACL_STREAM_STATUS_COMPLETE = 0,
  ACL_STREAM_STATUS_NOT_READY = 1,
  ACL_STREAM_STATUS_RESERVED = 0xFFFF
} aclrtStreamStatus;
/* SYNC. Whether the work queued on the stream so far has completed; reports no error. */
ACL_FUNC_VISIBILITY aclError aclrtStreamQuery(aclrtStream stream, aclrtStreamStatus* status);
/* SYNC. */
ACL_FUNC_VISIBILITY aclError aclrtCreateEvent(aclrtEvent* event);
ACL_FUNC_VISIBILITY aclError aclrtDestroyEvent(aclrtEvent event);
/* ASYNC. The event completes, with a timestamp, when the stream reaches this point. */
ACL_FUNC_VISIBILITY aclError aclrtRecordEvent(aclrtEvent event, aclrtStream stream);
/* ASYNC. Work queued on the stream later waits for the event. */
ACL_FUNC_VISIBILITY aclError aclrtStreamWaitEvent(aclrtStream stream, aclrtEvent event);
/* SYNC. */
ACL_FUNC_VISIBILITY aclError aclrtSynchronizeEvent(aclrtEvent event);
/* SYNC. Milliseconds between two completed events. */
ACL_FUNC_VISIBILITY aclError aclrtEventElapsedTime(float* ms, aclrtEvent startEvent, aclrtEvent endEvent);
/* SYNC. When a completed event's work finished, in microseconds since the host started. */
ACL_FUNC_VISIBILITY aclError aclrtEventGetTimestamp(aclrtEvent event, uint64_t* timestamp);

/* ---- memory */

/* SYNC. Device memory of the current device (npu memory: counted in npu-smi and the device's free memory).
 * ACL_ERROR_INVALID_PARAM for size 0, ACL_ERROR_RT_MEMORY_ALLOCATION when the device is full. */
ACL_FUNC_VISIBILITY aclError aclrtMalloc(void** devPtr, size_t size, aclrtMemMallocPolicy policy);
/* SYNC. aclrtMalloc without CANN's 32-byte tail padding: the software NPU's allocations have no tail to pad, so it is
 * aclrtMalloc (the same checks and errors). */
ACL_FUNC_VISIBILITY aclError aclrtMallocAlign32(void** devPtr, size_t size, aclrtMemMallocPolicy policy);
/* SYNC. Waits for the device's work first. */
ACL_FUNC_VISIBILITY aclError aclrtFree(void* devPtr);
/* SYNC. Pinned host memory (asynchronous copies from or to it do not wait). */
ACL_FUNC_VISIBILITY aclError aclrtMallocHost(void** hostPtr, size_t size);
ACL_FUNC_VISIBILITY aclError aclrtFreeHost(void* hostPtr);
/* SYNC. Copies count bytes into dst, which holds destMax bytes (ACL_ERROR_INVALID_PARAM if count > destMax). */
ACL_FUNC_VISIBILITY aclError aclrtMemcpy(void* dst, size_t destMax, const void* src, size_t count,
                                         aclrtMemcpyKind kind);
/* ASYNC when the host side is pinned memory (aclrtMallocHost) or for device to device; with pageable host memory it
 * completes (device to host) or stages the source (host to device) before returning. */
ACL_FUNC_VISIBILITY aclError aclrtMemcpyAsync(void* dst, size_t destMax, const void* src, size_t count,
                                              aclrtMemcpyKind kind, aclrtStream stream);
/* SYNC. Sets count bytes of device memory (holding maxCount bytes) to value. */
ACL_FUNC_VISIBILITY aclError aclrtMemset(void* devPtr, size_t maxCount, int32_t value, size_t count);
/* ASYNC. */
ACL_FUNC_VISIBILITY aclError aclrtMemsetAsync(void* devPtr, size_t maxCount, int32_t value, size_t count,
                                              aclrtStream stream);
/* SYNC. Free and total memory of the current device, in bytes. */
ACL_FUNC_VISIBILITY aclError aclrtGetMemInfo(aclrtMemAttr attr, size_t* free, size_t* total);

#ifdef __cplusplus
}
#endif

#endif /* INC_EXTERNAL_ACL_ACL_RT_H_ */
