// aclmdlDesc: a copy of a loaded model's description (inputs, outputs, sizes, dims, names, data types, formats,
// dynamic profiles). A dynamic model gets the extra last input ACL_DYNAMIC_TENSOR_NAME, as CANN's do.
#include <cstring>

#include "internal.h"

namespace softnpu::acl {

aclDataType to_acl_dtype(int32_t onnx_dtype) {
  switch (onnx_dtype) {  // ONNX's TensorProto.DataType numbers (model.h)
    case 1: return ACL_FLOAT;
    case 2: return ACL_UINT8;
    case 3: return ACL_INT8;
    case 4: return ACL_UINT16;
    case 5: return ACL_INT16;
    case 6: return ACL_INT32;
    case 7: return ACL_INT64;
    case 8: return ACL_STRING;
    case 9: return ACL_BOOL;
    case 10: return ACL_FLOAT16;
    case 11: return ACL_DOUBLE;
    case 12: return ACL_UINT32;
    case 13: return ACL_UINT64;
    case 14: return ACL_COMPLEX64;
    case 15: return ACL_COMPLEX128;
    case 16: return ACL_BF16;
    case 17: return ACL_FLOAT8_E4M3FN;
    case 19: return ACL_FLOAT8_E5M2;
    case 24: return ACL_FLOAT8_E8M0;
    default: return ACL_DT_UNDEFINED;
  }
}

namespace {

aclFormat to_acl_format(const std::string& f) {
  if (f == "NCHW") return ACL_FORMAT_NCHW;
  if (f == "NHWC") return ACL_FORMAT_NHWC;
  if (f == "ND") return ACL_FORMAT_ND;
  return ACL_FORMAT_UNDEFINED;
}

aclError fill_dims(const std::string& name, const std::vector<int64_t>& d, aclmdlIODims* dims, const char* call) {
  if (d.size() > ACL_MAX_DIM_CNT)
    return fail(ACL_ERROR_INVALID_PARAM, std::string(call) + ": the tensor has more than ACL_MAX_DIM_CNT dims");
  std::memset(dims->name, 0, sizeof(dims->name));
  std::strncpy(dims->name, name.c_str(), ACL_MAX_TENSOR_NAME_LEN - 1);
  dims->dimCount = d.size();
  std::copy(d.begin(), d.end(), dims->dims);
  return ACL_SUCCESS;
}

const softnpu::offline::TensorDesc* tensor(const aclmdlDesc* desc, size_t index, bool input) {
  if (!desc) return nullptr;
  const auto& v = input ? desc->inputs : desc->outputs;
  return index < v.size() ? &v[index] : nullptr;
}

aclError get_dims(const aclmdlDesc* desc, size_t index, aclmdlIODims* dims, bool input, const char* call) {
  ACL_REQUIRE_INIT(call);
  const auto* t = tensor(desc, index, input);
  if (!t || !dims)
    return fail(ACL_ERROR_INVALID_PARAM, std::string(call) + ": the description or dims is null, or index " +
                                             std::to_string(index) + " is out of range");
  return fill_dims(t->name, t->dims, dims, call);
}

aclError index_by_name(const aclmdlDesc* desc, const char* name, size_t* index, bool input, const char* call) {
  ACL_REQUIRE_INIT(call);
  if (!desc || !name || !index)
    return fail(ACL_ERROR_INVALID_PARAM, std::string(call) + ": modelDesc, name and index must not be null");
  const auto& v = input ? desc->inputs : desc->outputs;
  for (size_t i = 0; i < v.size(); ++i)
    if (v[i].name == name) {
      *index = i;
      return ACL_SUCCESS;
    }
  return fail(ACL_ERROR_INVALID_PARAM, std::string(call) + ": the model has no " + (input ? "input" : "output") +
                                           " named " + name);
}

// The -1 dims of every input, in order, filled from one --dynamic_dims profile.
std::vector<int64_t> gear_dims(const aclmdlDesc* desc, const std::vector<int64_t>& profile) {
  std::vector<int64_t> out;
  size_t k = 0;
  for (size_t i = 0; i < desc->inputs.size() - 1; ++i)
    for (auto d : desc->inputs[i].dims) out.push_back(d < 0 && k < profile.size() ? profile[k++] : d);
  return out;
}

}  // namespace

}  // namespace softnpu::acl

using namespace softnpu::acl;

extern "C" {

aclmdlDesc* aclmdlCreateDesc(void) { return new aclmdlDesc; }

aclError aclmdlDestroyDesc(aclmdlDesc* modelDesc) {
  if (!modelDesc) return fail(ACL_ERROR_INVALID_PARAM, "aclmdlDestroyDesc: modelDesc is null");
  delete modelDesc;
  return ACL_SUCCESS;
}

aclError aclmdlGetDesc(aclmdlDesc* modelDesc, uint32_t modelId) {
  ACL_REQUIRE_INIT("aclmdlGetDesc");
  if (!modelDesc) return fail(ACL_ERROR_INVALID_PARAM, "aclmdlGetDesc: modelDesc is null");
  auto m = find_model(modelId);
  if (!m)
    return fail(ACL_ERROR_INVALID_MODEL_ID, "aclmdlGetDesc: model id " + std::to_string(modelId) + " is not loaded");
  const auto& model = *m->model;
  aclmdlDesc d;
  d.filled = true;
  d.inputs = model.inputs();
  d.outputs = model.outputs();
  for (size_t i = 0; i < d.inputs.size(); ++i) d.input_sizes.push_back(model.input_size(i));
  for (size_t i = 0; i < d.outputs.size(); ++i) d.output_sizes.push_back(model.output_size(i));
  d.batch_profiles = model.batch_profiles();
  d.dims_profiles = model.dims_profiles();
  if (m->dynamic()) {
    // One int64 per dynamic value of a profile (the batch size, or each -1 dim).
    int64_t n = d.batch_profiles.empty() ? static_cast<int64_t>(d.dims_profiles.front().size()) : 1;
    d.inputs.push_back({ACL_DYNAMIC_TENSOR_NAME, 7, {n}, "ND"});
    d.input_sizes.push_back(static_cast<size_t>(n) * sizeof(int64_t));
  }
  d.model = m;
  *modelDesc = std::move(d);
  return ACL_SUCCESS;
}

size_t aclmdlGetNumInputs(aclmdlDesc* modelDesc) { return modelDesc ? modelDesc->inputs.size() : 0; }
size_t aclmdlGetNumOutputs(aclmdlDesc* modelDesc) { return modelDesc ? modelDesc->outputs.size() : 0; }

size_t aclmdlGetInputSizeByIndex(aclmdlDesc* modelDesc, size_t index) {
  return modelDesc && index < modelDesc->input_sizes.size() ? modelDesc->input_sizes[index] : 0;
}

size_t aclmdlGetOutputSizeByIndex(aclmdlDesc* modelDesc, size_t index) {
  return modelDesc && index < modelDesc->output_sizes.size() ? modelDesc->output_sizes[index] : 0;
}

aclError aclmdlGetInputDims(const aclmdlDesc* modelDesc, size_t index, aclmdlIODims* dims) {
  return get_dims(modelDesc, index, dims, true, "aclmdlGetInputDims");
}

aclError aclmdlGetOutputDims(const aclmdlDesc* modelDesc, size_t index, aclmdlIODims* dims) {
  return get_dims(modelDesc, index, dims, false, "aclmdlGetOutputDims");
}

aclError aclmdlGetCurOutputDims(const aclmdlDesc* modelDesc, size_t index, aclmdlIODims* dims) {
  if (auto e = get_dims(modelDesc, index, dims, false, "aclmdlGetCurOutputDims")) return e;
  auto m = modelDesc->model.lock();
  if (!m) return ACL_SUCCESS;
  std::lock_guard<std::mutex> lock(m->mu);
  if (index < m->output_dims.size())
    return fill_dims(modelDesc->outputs[index].name, m->output_dims[index], dims, "aclmdlGetCurOutputDims");
  return ACL_SUCCESS;
}

const char* aclmdlGetInputNameByIndex(const aclmdlDesc* modelDesc, size_t index) {
  const auto* t = tensor(modelDesc, index, true);
  return t ? t->name.c_str() : nullptr;
}

const char* aclmdlGetOutputNameByIndex(const aclmdlDesc* modelDesc, size_t index) {
  const auto* t = tensor(modelDesc, index, false);
  return t ? t->name.c_str() : nullptr;
}

aclFormat aclmdlGetInputFormat(const aclmdlDesc* modelDesc, size_t index) {
  const auto* t = tensor(modelDesc, index, true);
  return t ? to_acl_format(t->format) : ACL_FORMAT_UNDEFINED;
}

aclFormat aclmdlGetOutputFormat(const aclmdlDesc* modelDesc, size_t index) {
  const auto* t = tensor(modelDesc, index, false);
  return t ? to_acl_format(t->format) : ACL_FORMAT_UNDEFINED;
}

aclDataType aclmdlGetInputDataType(const aclmdlDesc* modelDesc, size_t index) {
  const auto* t = tensor(modelDesc, index, true);
  return t ? to_acl_dtype(t->dtype) : ACL_DT_UNDEFINED;
}

aclDataType aclmdlGetOutputDataType(const aclmdlDesc* modelDesc, size_t index) {
  const auto* t = tensor(modelDesc, index, false);
  return t ? to_acl_dtype(t->dtype) : ACL_DT_UNDEFINED;
}

aclError aclmdlGetInputIndexByName(const aclmdlDesc* modelDesc, const char* name, size_t* index) {
  return index_by_name(modelDesc, name, index, true, "aclmdlGetInputIndexByName");
}

aclError aclmdlGetOutputIndexByName(const aclmdlDesc* modelDesc, const char* name, size_t* index) {
  return index_by_name(modelDesc, name, index, false, "aclmdlGetOutputIndexByName");
}

aclError aclmdlGetDynamicBatch(const aclmdlDesc* modelDesc, aclmdlBatch* batch) {
  ACL_REQUIRE_INIT("aclmdlGetDynamicBatch");
  if (!modelDesc || !batch) return fail(ACL_ERROR_INVALID_PARAM, "aclmdlGetDynamicBatch: modelDesc and batch must not be null");
  const auto& p = modelDesc->batch_profiles;
  if (p.size() > ACL_MAX_BATCH_NUM)
    return fail(ACL_ERROR_INVALID_PARAM, "aclmdlGetDynamicBatch: the model has more than ACL_MAX_BATCH_NUM profiles");
  batch->batchCount = p.size();
  for (size_t i = 0; i < p.size(); ++i) batch->batch[i] = static_cast<uint64_t>(p[i]);
  return ACL_SUCCESS;
}

aclError aclmdlGetInputDynamicGearCount(const aclmdlDesc* modelDesc, size_t index, size_t* gearCount) {
  ACL_REQUIRE_INIT("aclmdlGetInputDynamicGearCount");
  if (!modelDesc || !gearCount)
    return fail(ACL_ERROR_INVALID_PARAM, "aclmdlGetInputDynamicGearCount: modelDesc and gearCount must not be null");
  *gearCount = modelDesc->dims_profiles.size();
  return ACL_SUCCESS;
}

aclError aclmdlGetInputDynamicDims(const aclmdlDesc* modelDesc, size_t index, aclmdlIODims* dims, size_t gearCount) {
  ACL_REQUIRE_INIT("aclmdlGetInputDynamicDims");
  if (!modelDesc || !dims || gearCount != modelDesc->dims_profiles.size())
    return fail(ACL_ERROR_INVALID_PARAM, "aclmdlGetInputDynamicDims: modelDesc and dims must not be null, and "
                                         "gearCount must be aclmdlGetInputDynamicGearCount's");
  for (size_t g = 0; g < gearCount; ++g)
    if (auto e = fill_dims("", gear_dims(modelDesc, modelDesc->dims_profiles[g]), &dims[g], "aclmdlGetInputDynamicDims"))
      return e;
  return ACL_SUCCESS;
}

}
