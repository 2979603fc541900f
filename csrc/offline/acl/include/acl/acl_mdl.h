/* AscendCL's model calls (CANN's acl_mdl.h): loading an offline model (.om, written by atc), its description,
 * datasets, execution and dynamic batch / dims. A model runs on a stream of the runtime as one task. */
#ifndef INC_EXTERNAL_ACL_ACL_MODEL_H_
#define INC_EXTERNAL_ACL_ACL_MODEL_H_

#include "acl_base.h"
#include "acl_rt.h"

#ifdef __cplusplus
extern "C" {
#endif

#define ACL_MAX_DIM_CNT 128
#define ACL_MAX_TENSOR_NAME_LEN 128
#define ACL_MAX_BATCH_NUM 128
/* The extra last input of a model converted with --dynamic_batch_size or --dynamic_dims: its buffer is added to the
 * input dataset (any device memory of its size) and aclmdlSetDynamicBatchSize / aclmdlSetInputDynamicDims name its
 * index. */
#define ACL_DYNAMIC_TENSOR_NAME "ascend_mbatch_shape_data"

typedef struct aclmdlDataset aclmdlDataset;
typedef struct aclmdlDesc aclmdlDesc;
/* A captured model run (CANN's model runtime instance, what aclmdlRICaptureBegin/End give): declared for code written
 * against CANN's headers; softnpu captures graphs through torch.npu.NPUGraph instead. */
typedef void* aclmdlRI;

typedef struct aclmdlIODims {
  char name[ACL_MAX_TENSOR_NAME_LEN];
  size_t dimCount;
  int64_t dims[ACL_MAX_DIM_CNT];
} aclmdlIODims;

typedef struct aclmdlBatch {
  size_t batchCount;
  uint64_t batch[ACL_MAX_BATCH_NUM];
} aclmdlBatch;

/* ---- loading (SYNC; the model's weights go to the current device's memory) */

/* ACL_ERROR_READ_MODEL_FAILURE for a file that cannot be read; ACL_ERROR_PARSE_MODEL for bytes that are not an
 * offline model of this softnpu or of this device (aclGetRecentErrMsg says why). */
ACL_FUNC_VISIBILITY aclError aclmdlLoadFromFile(const char* modelPath, uint32_t* modelId);
ACL_FUNC_VISIBILITY aclError aclmdlLoadFromMem(const void* model, size_t modelSize, uint32_t* modelId);
/* Waits for the model's queued runs, then frees it. ACL_ERROR_INVALID_MODEL_ID for an id not loaded. */
ACL_FUNC_VISIBILITY aclError aclmdlUnload(uint32_t modelId);

/* ---- description (SYNC) */

ACL_FUNC_VISIBILITY aclmdlDesc* aclmdlCreateDesc(void);
ACL_FUNC_VISIBILITY aclError aclmdlDestroyDesc(aclmdlDesc* modelDesc);
ACL_FUNC_VISIBILITY aclError aclmdlGetDesc(aclmdlDesc* modelDesc, uint32_t modelId);
/* 0 for a null or empty description. A dynamic model counts ACL_DYNAMIC_TENSOR_NAME among its inputs (last). */
ACL_FUNC_VISIBILITY size_t aclmdlGetNumInputs(aclmdlDesc* modelDesc);
ACL_FUNC_VISIBILITY size_t aclmdlGetNumOutputs(aclmdlDesc* modelDesc);
/* Bytes to allocate: at the largest profile of a dynamic model. 0 for a bad index, and for an output whose shape
 * depends on input data: give it a data buffer of NULL and size 0 for every run (ACL_ERROR_INVALID_PARAM
 * otherwise), and the run allocates it (the buffer then holds the device memory, which the caller frees with
 * aclrtFree, and its size). */
ACL_FUNC_VISIBILITY size_t aclmdlGetInputSizeByIndex(aclmdlDesc* modelDesc, size_t index);
ACL_FUNC_VISIBILITY size_t aclmdlGetOutputSizeByIndex(aclmdlDesc* modelDesc, size_t index);
/* The model's dims, -1 for a dynamic dimension. */
ACL_FUNC_VISIBILITY aclError aclmdlGetInputDims(const aclmdlDesc* modelDesc, size_t index, aclmdlIODims* dims);
ACL_FUNC_VISIBILITY aclError aclmdlGetOutputDims(const aclmdlDesc* modelDesc, size_t index, aclmdlIODims* dims);
/* The dims of the output of the model's latest completed run (after aclmdlExecute, or after synchronizing the
 * stream of aclmdlExecuteAsync); the model's dims before any run. */
ACL_FUNC_VISIBILITY aclError aclmdlGetCurOutputDims(const aclmdlDesc* modelDesc, size_t index, aclmdlIODims* dims);
/* NULL for a bad index; valid while the description lives. */
ACL_FUNC_VISIBILITY const char* aclmdlGetInputNameByIndex(const aclmdlDesc* modelDesc, size_t index);
ACL_FUNC_VISIBILITY const char* aclmdlGetOutputNameByIndex(const aclmdlDesc* modelDesc, size_t index);
ACL_FUNC_VISIBILITY aclFormat aclmdlGetInputFormat(const aclmdlDesc* modelDesc, size_t index);
ACL_FUNC_VISIBILITY aclFormat aclmdlGetOutputFormat(const aclmdlDesc* modelDesc, size_t index);
ACL_FUNC_VISIBILITY aclDataType aclmdlGetInputDataType(const aclmdlDesc* modelDesc, size_t index);
ACL_FUNC_VISIBILITY aclDataType aclmdlGetOutputDataType(const aclmdlDesc* modelDesc, size_t index);
ACL_FUNC_VISIBILITY aclError aclmdlGetInputIndexByName(const aclmdlDesc* modelDesc, const char* name, size_t* index);
ACL_FUNC_VISIBILITY aclError aclmdlGetOutputIndexByName(const aclmdlDesc* modelDesc, const char* name, size_t* index);
/* The --dynamic_batch_size profiles; batchCount 0 for a model without them. */
ACL_FUNC_VISIBILITY aclError aclmdlGetDynamicBatch(const aclmdlDesc* modelDesc, aclmdlBatch* batch);
/* The --dynamic_dims profiles: how many, and each as the shapes of every input concatenated (index is -1). */
ACL_FUNC_VISIBILITY aclError aclmdlGetInputDynamicGearCount(const aclmdlDesc* modelDesc, size_t index,
                                                            size_t* gearCount);
ACL_FUNC_VISIBILITY aclError aclmdlGetInputDynamicDims(const aclmdlDesc* modelDesc, size_t index, aclmdlIODims* dims,
                                                       size_t gearCount);

/* ---- datasets (SYNC; a dataset holds data buffers, destroying it leaves them alone) */

ACL_FUNC_VISIBILITY aclmdlDataset* aclmdlCreateDataset(void);
ACL_FUNC_VISIBILITY aclError aclmdlDestroyDataset(const aclmdlDataset* dataset);
ACL_FUNC_VISIBILITY aclError aclmdlAddDatasetBuffer(aclmdlDataset* dataset, aclDataBuffer* dataBuffer);
ACL_FUNC_VISIBILITY size_t aclmdlGetDatasetNumBuffers(const aclmdlDataset* dataset);
ACL_FUNC_VISIBILITY aclDataBuffer* aclmdlGetDatasetBuffer(const aclmdlDataset* dataset, size_t index);

/* ---- dynamic profiles: recorded in the input dataset, at the index of ACL_DYNAMIC_TENSOR_NAME (SYNC) */

/* ACL_ERROR_MODEL_NOT_DYNAMIC for a model without batch profiles, ACL_ERROR_INVALID_PARAM for a batch size that is
 * not one of them or an index that is not the dynamic input's. */
ACL_FUNC_VISIBILITY aclError aclmdlSetDynamicBatchSize(uint32_t modelId, aclmdlDataset* dataset, size_t index,
                                                       uint64_t batchSize);
/* dims: every input's shape concatenated, matching one of the --dynamic_dims profiles. */
ACL_FUNC_VISIBILITY aclError aclmdlSetInputDynamicDims(uint32_t modelId, aclmdlDataset* dataset, size_t index,
                                                       const aclmdlIODims* dims);

/* ---- execution. Inputs and outputs are device memory (aclrtMalloc) or pinned host memory (aclrtMallocHost), each
 * buffer at least the size of the tensor it holds: ACL_ERROR_MODEL_INPUT_NOT_MATCH / ACL_ERROR_MODEL_OUTPUT_NOT_MATCH
 * for a wrong number of buffers, ACL_ERROR_INVALID_PARAM for a buffer too small or of ordinary host memory. */

/* SYNC. Runs the model on the current device's default stream and waits for it (ACL_ERROR_RT_MODEL_EXECUTE if a node
 * failed; aclGetRecentErrMsg names it). */
ACL_FUNC_VISIBILITY aclError aclmdlExecute(uint32_t modelId, const aclmdlDataset* input, aclmdlDataset* output);
/* ASYNC. Enqueues the model on the stream and returns; a failure is reported by the stream's next synchronization. */
ACL_FUNC_VISIBILITY aclError aclmdlExecuteAsync(uint32_t modelId, const aclmdlDataset* input, aclmdlDataset* output,
                                                aclrtStream stream);

#ifdef __cplusplus
}
#endif

#endif /* INC_EXTERNAL_ACL_ACL_MODEL_H_ */
