// A C entry to conversion in memory, for Python (the ONNX backend of the node tests converts without files).
#include <cstdlib>
#include <cstring>

#include "model/model.h"

namespace {

char* copy_string(const std::string& s) {
  char* p = static_cast<char*>(std::malloc(s.size() + 1));
  std::memcpy(p, s.c_str(), s.size() + 1);
  return p;
}

}  // namespace

extern "C" {

// Converts ONNX bytes as `atc --framework=5 --soc_version=<this device> --precision_mode=<precision_mode>` would
// (NULL: atc's default). Returns 0 and the .om image in *om (free with softnpuOfflineFree), or ATC's failure: 1 and
// "<code>: <message>\nSolution: <solution>" in *error (free with softnpuOfflineFree).
__attribute__((visibility("default"))) int softnpuOfflineConvert(const void* onnx, size_t onnx_size,
                                                                 const char* precision_mode, void** om,
                                                                 size_t* om_size, char** error) {
  softnpu::offline::ConvertOptions options;
  options.soc_version = softnpu::offline::device_soc_version();
  if (precision_mode) options.precision_mode = precision_mode;
  options.command_line = "softnpuOfflineConvert";
  auto r = softnpu::offline::convert_onnx(std::string(static_cast<const char*>(onnx), onnx_size), options);
  if (!r.status.ok) {
    *error = copy_string(r.status.code + ": " + r.status.message + "\nSolution: " + r.status.solution);
    return 1;
  }
  *om = std::malloc(r.om.size());
  std::memcpy(*om, r.om.data(), r.om.size());
  *om_size = r.om.size();
  return 0;
}

__attribute__((visibility("default"))) void softnpuOfflineFree(void* p) { std::free(p); }

}
