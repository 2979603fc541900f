// An offline model run from C++ over ACL, as an Ascend inference program does: load the .om, copy the inputs to
// device memory, execute on a stream, copy the outputs back, compare them with the expected ones.
//
//   run_om model.om --input in0.bin [--input in1.bin ...] --expect out0.bin [--expect ...] [--rtol R] [--atol A]
//
// Inputs and expected outputs are raw little-endian arrays of the model's types; outputs are compared as float32.
#include <acl/acl.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

namespace {

#define CHECK_ACL(call)                                                                   \
  do {                                                                                    \
    aclError err_ = (call);                                                               \
    if (err_ != ACL_SUCCESS) {                                                            \
      std::fprintf(stderr, "%s failed: error %d: %s\n", #call, err_, aclGetRecentErrMsg()); \
      std::exit(1);                                                                       \
    }                                                                                     \
  } while (0)

std::vector<char> read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) {
    std::fprintf(stderr, "cannot read %s\n", path.c_str());
    std::exit(1);
  }
  return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s model.om --input in.bin ... --expect out.bin ... [--rtol R] [--atol A]\n", argv[0]);
    return 2;
  }
  std::vector<std::string> inputs, expects;
  double rtol = 1e-4, atol = 1e-4;
  for (int i = 2; i + 1 < argc; i += 2) {
    std::string k = argv[i];
    if (k == "--input") inputs.push_back(argv[i + 1]);
    else if (k == "--expect") expects.push_back(argv[i + 1]);
    else if (k == "--rtol") rtol = std::atof(argv[i + 1]);
    else if (k == "--atol") atol = std::atof(argv[i + 1]);
  }

  CHECK_ACL(aclInit(nullptr));
  CHECK_ACL(aclrtSetDevice(0));
  aclrtStream stream = nullptr;
  CHECK_ACL(aclrtCreateStream(&stream));
  uint32_t model_id = 0;
  CHECK_ACL(aclmdlLoadFromFile(argv[1], &model_id));
  aclmdlDesc* desc = aclmdlCreateDesc();
  CHECK_ACL(aclmdlGetDesc(desc, model_id));
  if (aclmdlGetNumInputs(desc) != inputs.size() || aclmdlGetNumOutputs(desc) != expects.size()) {
    std::fprintf(stderr, "the model has %zu inputs and %zu outputs\n", aclmdlGetNumInputs(desc), aclmdlGetNumOutputs(desc));
    return 1;
  }

  std::vector<void*> device;
  aclmdlDataset* in = aclmdlCreateDataset();
  for (size_t i = 0; i < inputs.size(); ++i) {
    auto host = read_file(inputs[i]);
    size_t size = aclmdlGetInputSizeByIndex(desc, i);
    if (host.size() != size) {
      std::fprintf(stderr, "%s has %zu bytes, input %zu takes %zu\n", inputs[i].c_str(), host.size(), i, size);
      return 1;
    }
    void* p = nullptr;
    CHECK_ACL(aclrtMalloc(&p, size, ACL_MEM_MALLOC_HUGE_FIRST));
    CHECK_ACL(aclrtMemcpy(p, size, host.data(), size, ACL_MEMCPY_HOST_TO_DEVICE));
    CHECK_ACL(aclmdlAddDatasetBuffer(in, aclCreateDataBuffer(p, size)));
    device.push_back(p);
  }
  aclmdlDataset* out = aclmdlCreateDataset();
  for (size_t i = 0; i < expects.size(); ++i) {
    size_t size = aclmdlGetOutputSizeByIndex(desc, i);
    void* p = nullptr;
    CHECK_ACL(aclrtMalloc(&p, size, ACL_MEM_MALLOC_HUGE_FIRST));
    CHECK_ACL(aclmdlAddDatasetBuffer(out, aclCreateDataBuffer(p, size)));
    device.push_back(p);
  }

  CHECK_ACL(aclmdlExecuteAsync(model_id, in, out, stream));
  CHECK_ACL(aclrtSynchronizeStream(stream));

  int failures = 0;
  for (size_t i = 0; i < expects.size(); ++i) {
    auto want = read_file(expects[i]);
    size_t size = aclmdlGetOutputSizeByIndex(desc, i);
    if (want.size() != size || aclmdlGetOutputDataType(desc, i) != ACL_FLOAT) {
      std::fprintf(stderr, "output %zu: %zu bytes of type %d, expected %zu bytes of float32\n", i, size,
                   static_cast<int>(aclmdlGetOutputDataType(desc, i)), want.size());
      return 1;
    }
    std::vector<float> got(size / sizeof(float));
    CHECK_ACL(aclrtMemcpy(got.data(), size, aclGetDataBufferAddr(aclmdlGetDatasetBuffer(out, i)), size,
                          ACL_MEMCPY_DEVICE_TO_HOST));
    const float* ref = reinterpret_cast<const float*>(want.data());
    double worst = 0;
    size_t bad = 0;
    for (size_t k = 0; k < got.size(); ++k) {
      double err = std::fabs(got[k] - ref[k]);
      worst = std::max(worst, err);
      if (!(err <= atol + rtol * std::fabs(ref[k]))) ++bad;
    }
    std::printf("output %zu: %zu values, max abs error %.3g, %zu beyond tolerance\n", i, got.size(), worst, bad);
    failures += bad != 0;
  }

  for (size_t i = 0; i < aclmdlGetDatasetNumBuffers(in); ++i) aclDestroyDataBuffer(aclmdlGetDatasetBuffer(in, i));
  for (size_t i = 0; i < aclmdlGetDatasetNumBuffers(out); ++i) aclDestroyDataBuffer(aclmdlGetDatasetBuffer(out, i));
  aclmdlDestroyDataset(in);
  aclmdlDestroyDataset(out);
  for (void* p : device) aclrtFree(p);
  aclmdlDestroyDesc(desc);
  CHECK_ACL(aclmdlUnload(model_id));
  CHECK_ACL(aclrtDestroyStream(stream));
  CHECK_ACL(aclrtResetDevice(0));
  CHECK_ACL(aclFinalize());
  return failures ? 1 : 0;
}
