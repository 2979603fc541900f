// Tensor formats (torch_npu's acl_format: ND, NCHW, FRACTAL_NZ, ...). On Ascend a private format is a different
// physical layout chosen for the cube unit; here the data always stays ND (row-major, storage size as ND's) and the
// format is metadata: a c10::BackendMeta on the TensorImpl, which npu_format_cast sets, get_npu_format reads,
// shallow copies (detach, nn.Parameter) keep, and torch.save/torch.load carry through PyTorch's backend-meta
// serialization hooks (a "npu_format/<NAME>" key in the tensor's metadata). Fresh tensors, and views, are ND.
#include <ATen/ATen.h>
#include <c10/core/TensorImpl.h>
#include <torch/csrc/jit/serialization/pickler_helper.h>
#include <torch/library.h>

#include <string_view>

namespace softnpu::fused {

namespace {

constexpr int64_t kND = 2;

struct FormatName {
  int64_t value;
  const char* name;
};

// aclFormat's values.
constexpr FormatName kFormats[] = {
    {0, "NCHW"},           {1, "NHWC"},     {2, "ND"},           {3, "NC1HWC0"}, {4, "FRACTAL_Z"},
    {12, "NC1HWC0_C04"},   {16, "HWCN"},    {27, "NDHWC"},       {29, "FRACTAL_NZ"}, {30, "NCDHW"},
    {32, "NDC1HWC0"},      {33, "FRACTAL_Z_3D"}, {35, "NC"},     {47, "NCL"},
};

const char* format_name(int64_t value) {
  for (const auto& f : kFormats)
    if (f.value == value) return f.name;
  return nullptr;
}

void check_format(int64_t value, const char* op) {
  if (format_name(value)) return;
  std::string known;
  for (const auto& f : kFormats)
    known += (known.empty() ? "" : ", ") + std::string(f.name) + "=" + std::to_string(f.value);
  TORCH_CHECK(false, op, ": unknown acl_format ", value, " (known: ", known, ")");
}

struct FormatMeta final : c10::BackendMeta {
  explicit FormatMeta(int64_t f) : format(f) {}
  c10::intrusive_ptr<c10::BackendMeta> clone(const c10::intrusive_ptr<c10::BackendMeta>&) const override {
    return c10::make_intrusive<FormatMeta>(format);
  }
  int64_t format;
};

int64_t format_of(const at::Tensor& t) {
  const auto* meta = dynamic_cast<const FormatMeta*>(t.unsafeGetTensorImpl()->get_backend_meta());
  return meta ? meta->format : kND;
}

void set_format(const at::Tensor& t, int64_t format) {
  // ND is the absence of a format: such tensors serialize exactly as any other.
  t.unsafeGetTensorImpl()->set_backend_meta(format == kND ? nullptr : c10::make_intrusive<FormatMeta>(format));
}

int64_t get_npu_format(const at::Tensor& self) { return format_of(self); }

// A new tensor (the schema's promise: no alias of self) with the format; its data is self's, copied on the stream.
at::Tensor npu_format_cast(const at::Tensor& self, int64_t acl_format) {
  check_format(acl_format, "npu_format_cast");
  at::Tensor out = self.clone(at::MemoryFormat::Contiguous);
  set_format(out, acl_format);
  return out;
}

const at::Tensor& npu_format_cast_(const at::Tensor& self, int64_t acl_format) {
  check_format(acl_format, "npu_format_cast_");
  set_format(self, acl_format);
  return self;
}

constexpr std::string_view kKeyPrefix = "npu_format/";

void serialize_format(const at::Tensor& t, std::unordered_map<std::string, bool>& metadata) {
  const int64_t f = format_of(t);
  if (f != kND) metadata[std::string(kKeyPrefix) + format_name(f)] = true;
}

void deserialize_format(const at::Tensor& t, std::unordered_map<std::string, bool>& metadata) {
  for (const auto& [key, value] : metadata) {
    if (key.compare(0, kKeyPrefix.size(), kKeyPrefix) != 0) continue;
    const std::string name = key.substr(kKeyPrefix.size());
    for (const auto& f : kFormats)
      if (name == f.name) set_format(t, f.value);
  }
}

[[maybe_unused]] const bool g_registered = [] {
  torch::jit::TensorBackendMetaRegistry(c10::DeviceType::PrivateUse1, &serialize_format, &deserialize_format);
  return true;
}();

}  // namespace

// Composite: npu_format_cast is a clone (an op on the stream, with clone's autograd and Meta kernel) plus metadata;
// the other two only touch metadata.
TORCH_LIBRARY_IMPL(npu, CompositeImplicitAutograd, m) {
  m.impl("npu_format_cast", npu_format_cast);
  m.impl("npu_format_cast_.acl_format", npu_format_cast_);
  m.impl("get_npu_format", get_npu_format);
}

}  // namespace softnpu::fused
