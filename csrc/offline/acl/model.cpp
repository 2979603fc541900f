// Loaded models: the registry of model ids, loading an .om through the model library (csrc/offline/model/model.h),
// the dynamic profiles a dataset carries, and execution. A run is the model's one kernel on the stream
// (Model::execute_async) followed by a small kernel that records the run's output dims for aclmdlGetCurOutputDims and
// marks the run complete, so aclmdlUnload can wait for the model's runs without synchronizing the device.
#include <algorithm>
#include <atomic>
#include <fstream>
#include <map>
#include <sstream>

#include "internal.h"

namespace softnpu::acl {

namespace {

std::mutex g_models_mu;
std::map<uint32_t, std::shared_ptr<ModelEntry>> g_models;
std::atomic<uint32_t> g_next_id{1};

std::string join(const std::vector<int64_t>& v) {
  std::string s;
  for (size_t i = 0; i < v.size(); ++i) s += (i ? "," : "") + std::to_string(v[i]);
  return s;
}

void wait_idle(ModelEntry& m) {
  std::unique_lock<std::mutex> lock(m.mu);
  m.idle.wait(lock, [&] { return m.pending == 0; });
}

aclError load(const void* data, size_t size, uint32_t* modelId, const char* call) {
  ACL_REQUIRE_CONTEXT(call);
  if (!data || !modelId) return fail(ACL_ERROR_INVALID_PARAM, std::string(call) + ": model and modelId must not be null");
  if (size == 0) return fail(ACL_ERROR_MODEL_SIZE_INVALID, std::string(call) + ": the model is empty");
  offline::Status status;
  auto model = offline::Model::load(data, size, &status);
  if (!model)
    return fail(ACL_ERROR_PARSE_MODEL, std::string(call) + ": " + status.code + ": " + status.message +
                                           (status.solution.empty() ? "" : " Solution: " + status.solution));
  auto entry = std::make_shared<ModelEntry>();
  entry->model = std::move(model);
  if (auto e = snpuGetDevice(&entry->device)) return runtime_error(e, call);
  uint32_t id = g_next_id.fetch_add(1);
  {
    std::lock_guard<std::mutex> lock(g_models_mu);
    g_models[id] = std::move(entry);
  }
  *modelId = id;
  return ACL_SUCCESS;
}

aclError no_model(uint32_t id, const char* call) {
  return fail(ACL_ERROR_INVALID_MODEL_ID, std::string(call) + ": model id " + std::to_string(id) + " is not loaded");
}

// Each real input's dims for the run the dataset describes.
aclError run_dims(const ModelEntry& m, const aclmdlDataset& in, std::vector<std::vector<int64_t>>* dims,
                  const char* call) {
  const auto& inputs = m.model->inputs();
  // The dataset may have been given its profile for another model: check it against this one.
  const auto& batches = m.model->batch_profiles();
  if (in.batch >= 0 && std::find(batches.begin(), batches.end(), in.batch) == batches.end())
    return fail(ACL_ERROR_INVALID_PARAM, std::string(call) + ": the dataset's batch size " + std::to_string(in.batch) +
                                             " is not one of this model's profiles");
  size_t total_rank = 0;
  for (const auto& t : inputs) total_rank += t.dims.size();
  if (!in.dims.empty() && (m.model->dims_profiles().empty() || in.dims.size() != total_rank))
    return fail(ACL_ERROR_INVALID_PARAM, std::string(call) + ": the dataset's dynamic dims (" + join(in.dims) +
                                             ") were not set for this model");
  if (in.batch >= 0) {
    for (const auto& t : inputs) {
      auto d = t.dims;
      for (auto& x : d)
        if (x < 0) x = in.batch;
      dims->push_back(std::move(d));
    }
    return ACL_SUCCESS;
  }
  if (!in.dims.empty()) {
    size_t k = 0;
    for (const auto& t : inputs) {
      dims->emplace_back(in.dims.begin() + k, in.dims.begin() + k + t.dims.size());
      k += t.dims.size();
    }
    return ACL_SUCCESS;
  }
  for (const auto& t : inputs) {
    if (std::any_of(t.dims.begin(), t.dims.end(), [](int64_t x) { return x < 0; }))
      return fail(ACL_ERROR_INVALID_PARAM,
                  std::string(call) + ": input " + t.name + " has dynamic dims (" + join(t.dims) +
                      "); choose a profile with aclmdlSetDynamicBatchSize or aclmdlSetInputDynamicDims first");
    dims->push_back(t.dims);
  }
  return ACL_SUCCESS;
}

struct Done {
  ModelEntry* model;  // alive: aclmdlUnload waits for pending to reach 0
  std::shared_ptr<std::vector<std::vector<int64_t>>> dims;
  // Outputs whose shape depends on input data, passed as empty buffers: the run allocates them, and their buffers
  // get the memory (the caller frees it with aclrtFree) and its size.
  std::shared_ptr<std::vector<void*>> allocated;
  std::vector<std::pair<size_t, aclDataBuffer*>> allocated_buffers;
  std::vector<size_t> element_sizes;
};

int record_done(void* arg) {
  auto* d = static_cast<Done*>(arg);
  for (auto [i, b] : d->allocated_buffers) {
    if (i >= d->allocated->size() || i >= d->dims->size()) continue;
    size_t n = d->element_sizes[i];
    for (auto x : (*d->dims)[i]) n *= static_cast<size_t>(x);
    b->data = (*d->allocated)[i];
    b->size = n;
  }
  std::lock_guard<std::mutex> lock(d->model->mu);
  if (!d->dims->empty()) d->model->output_dims = *d->dims;
  --d->model->pending;
  d->model->idle.notify_all();
  return 0;
}

aclError execute(uint32_t modelId, const aclmdlDataset* input, aclmdlDataset* output, snpuStream_t stream,
                 const char* call) {
  ACL_REQUIRE_CONTEXT(call);
  auto m = find_model(modelId);
  if (!m) return no_model(modelId, call);
  if (!input || !output) return fail(ACL_ERROR_INVALID_PARAM, std::string(call) + ": input and output must not be null");
  const auto& model = *m->model;
  size_t n_in = model.inputs().size(), n_out = model.outputs().size();
  size_t expected = n_in + (m->dynamic() ? 1 : 0);
  if (input->buffers.size() != expected)
    return fail(ACL_ERROR_MODEL_INPUT_NOT_MATCH,
                std::string(call) + ": the model takes " + std::to_string(expected) + " input buffers" +
                    (m->dynamic() ? " (its inputs and " ACL_DYNAMIC_TENSOR_NAME ")" : "") + ", the dataset has " +
                    std::to_string(input->buffers.size()));
  if (output->buffers.size() != n_out)
    return fail(ACL_ERROR_MODEL_OUTPUT_NOT_MATCH, std::string(call) + ": the model has " + std::to_string(n_out) +
                                                      " outputs, the dataset has " +
                                                      std::to_string(output->buffers.size()) + " buffers");
  int stream_device = 0;
  if (auto e = snpuStreamGetInfo(stream, &stream_device, nullptr, nullptr)) return runtime_error(e, call);
  if (stream_device != m->device)
    return fail(ACL_ERROR_RT_MODEL_CONTEXT, std::string(call) + ": the model is loaded on device " +
                                                std::to_string(m->device) + ", the stream is on device " +
                                                std::to_string(stream_device));
  std::vector<std::vector<int64_t>> dims;
  if (auto e = run_dims(*m, *input, &dims, call)) return e;
  std::vector<void*> ins(n_in), outs(n_out);
  for (size_t i = 0; i < n_in; ++i) {
    const auto& t = model.inputs()[i];
    int64_t n = static_cast<int64_t>(aclDataTypeSize(to_acl_dtype(t.dtype)));
    for (auto d : dims[i]) n *= d;
    const aclDataBuffer* b = input->buffers[i];
    std::string what = std::string(call) + ": input " + std::to_string(i) + " (" + t.name + ")";
    if (!b) return fail(ACL_ERROR_INVALID_PARAM, what + ": the data buffer is null");
    if (b->size < static_cast<size_t>(n))
      return fail(ACL_ERROR_INVALID_PARAM, what + " needs " + std::to_string(n) + " bytes (dims " + join(dims[i]) +
                                               "), its buffer has " + std::to_string(b->size));
    if (n > 0)
      if (auto e = check_memory(b->data, static_cast<size_t>(n), true, what)) return e;
    ins[i] = b->data;
  }
  if (m->dynamic() && !input->buffers[n_in])
    return fail(ACL_ERROR_INVALID_PARAM, std::string(call) + ": the " ACL_DYNAMIC_TENSOR_NAME " buffer is null");
  auto done = new Done{m.get(), std::make_shared<std::vector<std::vector<int64_t>>>(),
                       std::make_shared<std::vector<void*>>(), {}, {}};
  std::unique_ptr<Done> done_owner(done);
  for (size_t i = 0; i < n_out; ++i) {
    const auto& t = model.outputs()[i];
    size_t n = model.output_size(i);
    aclDataBuffer* b = output->buffers[i];
    std::string what = std::string(call) + ": output " + std::to_string(i) + " (" + t.name + ")";
    if (!b) return fail(ACL_ERROR_INVALID_PARAM, what + ": the data buffer is null");
    done->element_sizes.push_back(aclDataTypeSize(to_acl_dtype(t.dtype)));
    if (n == 0) {
      // The model library cannot bound a caller's buffer for such an output (execute_async takes no sizes).
      if (b->data)
        return fail(ACL_ERROR_INVALID_PARAM, what + " has a shape that depends on input data: give it an empty "
                                                    "data buffer (NULL, 0), which the run fills with memory it allocates");
      done->allocated_buffers.emplace_back(i, b);
      continue;
    }
    if (b->size < n)
      return fail(ACL_ERROR_INVALID_PARAM, what + " needs " + std::to_string(n) + " bytes (aclmdlGetOutputSizeByIndex), "
                                               "its buffer has " + std::to_string(b->size));
    if (auto e = check_memory(b->data, n, true, what)) return e;
    outs[i] = b->data;
  }
  {
    std::lock_guard<std::mutex> lock(m->mu);
    ++m->pending;
  }
  auto status = m->model->execute_async(stream, ins, outs, dims, done->dims, done->allocated);
  if (!status.ok) {
    done->allocated_buffers.clear();
    record_done(done);
    return fail(ACL_ERROR_GE_FAILURE, std::string(call) + ": " + status.code + ": " + status.message);
  }
  if (auto e = snpuLaunchKernel(stream, "om_model_done", record_done, done_owner.release(),
                                [](void* p) { delete static_cast<Done*>(p); })) {
    // The run is queued but its completion cannot be; wait for it here instead.
    aclError error = runtime_error(e, call);
    snpuStreamSynchronize(stream);
    std::lock_guard<std::mutex> lock(m->mu);
    --m->pending;
    m->idle.notify_all();
    return error;
  }
  return ACL_SUCCESS;
}

aclError dynamic_target(uint32_t modelId, aclmdlDataset* dataset, size_t index, bool batch, const char* call,
                        std::shared_ptr<ModelEntry>* out) {
  ACL_REQUIRE_INIT(call);
  auto m = find_model(modelId);
  if (!m) return no_model(modelId, call);
  if (!dataset) return fail(ACL_ERROR_INVALID_PARAM, std::string(call) + ": dataset is null");
  bool has = batch ? !m->model->batch_profiles().empty() : !m->model->dims_profiles().empty();
  if (!has)
    return fail(ACL_ERROR_MODEL_NOT_DYNAMIC, std::string(call) + ": the model was not converted with " +
                                                 (batch ? "--dynamic_batch_size" : "--dynamic_dims"));
  size_t dynamic_index = m->model->inputs().size();
  if (index != dynamic_index)
    return fail(ACL_ERROR_INVALID_PARAM, std::string(call) + ": index " + std::to_string(index) + " is not the index of " +
                                             ACL_DYNAMIC_TENSOR_NAME + " (" + std::to_string(dynamic_index) + ")");
  *out = std::move(m);
  return ACL_SUCCESS;
}

}  // namespace

std::shared_ptr<ModelEntry> find_model(uint32_t id) {
  std::lock_guard<std::mutex> lock(g_models_mu);
  auto it = g_models.find(id);
  return it == g_models.end() ? nullptr : it->second;
}

void unload_all() {
  std::map<uint32_t, std::shared_ptr<ModelEntry>> models;
  {
    std::lock_guard<std::mutex> lock(g_models_mu);
    models.swap(g_models);
  }
  for (auto& [id, m] : models) wait_idle(*m);
}

}  // namespace softnpu::acl

using namespace softnpu::acl;

extern "C" {

aclError aclmdlLoadFromFile(const char* modelPath, uint32_t* modelId) {
  ACL_REQUIRE_CONTEXT("aclmdlLoadFromFile");
  if (!modelPath || !modelId)
    return fail(ACL_ERROR_INVALID_PARAM, "aclmdlLoadFromFile: modelPath and modelId must not be null");
  std::ifstream f(modelPath, std::ios::binary);
  std::ostringstream bytes;
  if (!f || !(bytes << f.rdbuf()))
    return fail(ACL_ERROR_READ_MODEL_FAILURE, std::string("aclmdlLoadFromFile: cannot read ") + modelPath);
  auto s = bytes.str();
  return load(s.data(), s.size(), modelId, "aclmdlLoadFromFile");
}

aclError aclmdlLoadFromMem(const void* model, size_t modelSize, uint32_t* modelId) {
  return load(model, modelSize, modelId, "aclmdlLoadFromMem");
}

aclError aclmdlUnload(uint32_t modelId) {
  ACL_REQUIRE_INIT("aclmdlUnload");
  std::shared_ptr<ModelEntry> m;
  {
    std::lock_guard<std::mutex> lock(g_models_mu);
    auto it = g_models.find(modelId);
    if (it == g_models.end()) return no_model(modelId, "aclmdlUnload");
    m = std::move(it->second);
    g_models.erase(it);
  }
  wait_idle(*m);
  return ACL_SUCCESS;
}

aclError aclmdlExecute(uint32_t modelId, const aclmdlDataset* input, aclmdlDataset* output) {
  if (auto e = execute(modelId, input, output, nullptr, "aclmdlExecute")) return e;
  if (auto e = snpuStreamSynchronize(nullptr)) return runtime_error(e, "aclmdlExecute");
  return ACL_SUCCESS;
}

aclError aclmdlExecuteAsync(uint32_t modelId, const aclmdlDataset* input, aclmdlDataset* output, aclrtStream stream) {
  return execute(modelId, input, output, static_cast<snpuStream_t>(stream), "aclmdlExecuteAsync");
}

aclError aclmdlSetDynamicBatchSize(uint32_t modelId, aclmdlDataset* dataset, size_t index, uint64_t batchSize) {
  std::shared_ptr<ModelEntry> m;
  if (auto e = dynamic_target(modelId, dataset, index, true, "aclmdlSetDynamicBatchSize", &m)) return e;
  const auto& profiles = m->model->batch_profiles();
  if (std::find(profiles.begin(), profiles.end(), static_cast<int64_t>(batchSize)) == profiles.end())
    return fail(ACL_ERROR_INVALID_PARAM, "aclmdlSetDynamicBatchSize: batch size " + std::to_string(batchSize) +
                                             " is not one of the model's (" + join(profiles) + ")");
  dataset->batch = static_cast<int64_t>(batchSize);
  dataset->dims.clear();
  return ACL_SUCCESS;
}

aclError aclmdlSetInputDynamicDims(uint32_t modelId, aclmdlDataset* dataset, size_t index, const aclmdlIODims* dims) {
  std::shared_ptr<ModelEntry> m;
  if (auto e = dynamic_target(modelId, dataset, index, false, "aclmdlSetInputDynamicDims", &m)) return e;
  if (!dims) return fail(ACL_ERROR_INVALID_PARAM, "aclmdlSetInputDynamicDims: dims is null");
  std::vector<int64_t> model_dims, free_values;
  for (const auto& t : m->model->inputs()) model_dims.insert(model_dims.end(), t.dims.begin(), t.dims.end());
  if (dims->dimCount > ACL_MAX_DIM_CNT || dims->dimCount != model_dims.size())
    return fail(ACL_ERROR_INVALID_PARAM, "aclmdlSetInputDynamicDims: dimCount is " + std::to_string(dims->dimCount) +
                                             "; the model's inputs have " + std::to_string(model_dims.size()) +
                                             " dims together (" + join(model_dims) + ")");
  std::vector<int64_t> given(dims->dims, dims->dims + dims->dimCount);
  for (size_t k = 0; k < model_dims.size(); ++k) {
    if (model_dims[k] < 0)
      free_values.push_back(given[k]);
    else if (given[k] != model_dims[k])
      return fail(ACL_ERROR_INVALID_PARAM, "aclmdlSetInputDynamicDims: dims " + join(given) +
                                               " do not match the model's fixed dims (" + join(model_dims) + ")");
  }
  const auto& profiles = m->model->dims_profiles();
  if (std::find(profiles.begin(), profiles.end(), free_values) == profiles.end()) {
    std::string list;
    for (const auto& p : profiles) list += (list.empty() ? "" : ";") + join(p);
    return fail(ACL_ERROR_INVALID_PARAM, "aclmdlSetInputDynamicDims: dynamic dims " + join(free_values) +
                                             " are not one of the model's profiles (" + list + ")");
  }
  dataset->dims = std::move(given);
  dataset->batch = -1;
  return ACL_SUCCESS;
}

}
