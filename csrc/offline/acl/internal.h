// What the files of libascendcl share: the error record, initialization, the calling thread's context, the objects
// behind ACL's opaque handles (data buffers, datasets, model descriptions) and the registry of loaded models.
#pragma once

#include <acl/acl.h>
#include <softnpu/runtime.h>

#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "model/model.h"

struct aclDataBuffer {
  void* data = nullptr;
  size_t size = 0;
};

struct aclmdlDataset {
  std::vector<aclDataBuffer*> buffers;
  // The dynamic profile chosen for the next run (aclmdlSetDynamicBatchSize / aclmdlSetInputDynamicDims): a batch
  // size, or every input's shape concatenated. Neither: the model's own dims.
  int64_t batch = -1;
  std::vector<int64_t> dims;
};

namespace softnpu::acl {

struct ModelEntry;

}  // namespace softnpu::acl

struct aclmdlDesc {
  bool filled = false;
  std::vector<softnpu::offline::TensorDesc> inputs, outputs;  // a dynamic model's last input is the dynamic tensor
  std::vector<size_t> input_sizes, output_sizes;
  std::vector<int64_t> batch_profiles;
  std::vector<std::vector<int64_t>> dims_profiles;
  std::weak_ptr<softnpu::acl::ModelEntry> model;  // for the dims of its latest run
};

namespace softnpu::acl {

// error.cpp. Records message as the calling thread's recent error (aclGetRecentErrMsg) and returns code.
aclError fail(aclError code, const std::string& message);
// A failed runtime call as ACL's number (107xxx, 207xxx, 507xxx), with the runtime's message (and a failed kernel's).
aclError runtime_error(snpuError_t error, const char* call);

// init.cpp
bool initialized();
// ACL set up by a framework in the process (softnpu_acl_init_for_framework, torch_npu's): a thread without a current
// context works on the runtime's current device.
bool framework_owned();
aclError not_initialized(const char* call);

// device_context.cpp. ACL_SUCCESS when ACL is initialized and the calling thread has a current context (its device
// is then the runtime's current device); else the error, recorded.
aclError require_context(const char* call);
// Every context stops being current anywhere (aclFinalize).
void release_contexts();

// memory.cpp. ACL_SUCCESS when [ptr, ptr + size) lies in one allocation of device memory (or, when pinned_ok, of
// pinned host memory); else ACL_ERROR_INVALID_PARAM naming what, recorded.
aclError check_memory(const void* ptr, size_t size, bool pinned_ok, const std::string& what);

// model.cpp
struct ModelEntry {
  std::unique_ptr<offline::Model> model;
  int device = 0;
  bool dynamic() const { return !model->batch_profiles().empty() || !model->dims_profiles().empty(); }
  std::mutex mu;
  std::condition_variable idle;
  int pending = 0;                                  // runs enqueued and not yet completed
  std::vector<std::vector<int64_t>> output_dims;   // of the latest completed run
};
std::shared_ptr<ModelEntry> find_model(uint32_t id);
void unload_all();

aclDataType to_acl_dtype(int32_t onnx_dtype);

}  // namespace softnpu::acl

#define ACL_REQUIRE_INIT(call) \
  if (!::softnpu::acl::initialized()) return ::softnpu::acl::not_initialized(call)
#define ACL_REQUIRE_CONTEXT(call)                                              \
  if (aclError acl_context_error_ = ::softnpu::acl::require_context(call)) \
  return acl_context_error_
