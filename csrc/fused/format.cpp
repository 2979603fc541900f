// Tensor formats (torch_npu's acl_format: ND, NCHW, FRACTAL_NZ, ...). The plain formats (ND, NCHW, NHWC, ...) lay
// out the same elements as ND with the same storage size, so here they are metadata: a c10::BackendMeta on the
// TensorImpl, which npu_format_cast sets, get_npu_format reads, shallow copies (detach, nn.Parameter) keep, and
// torch.save/torch.load carry through PyTorch's backend-meta serialization hooks (a "npu_format/<NAME>" key in the
// tensor's metadata). Fresh tensors, and views, are ND. The private formats (NC1HWC0, FRACTAL_Z, FRACTAL_NZ, ...) are
// padded, blocked layouts for Ascend's cube unit: storing them honestly would need every reader of device memory (the
// op path, copies, compiled kernels, collectives) to convert, so they are refused with an error saying what to do.
#include <ATen/ATen.h>
#include <c10/core/TensorImpl.h>
#include <torch/csrc/jit/serialization/pickler_helper.h>
#include <torch/library.h>

#include <string_view>

#include "backend/error_code.h"

// torch_npu's schemas (argument names, order, defaults, returns).
TORCH_LIBRARY_FRAGMENT(npu, m) {
  m.def("npu_format_cast(Tensor self, int acl_format) -> Tensor");
  m.def("npu_format_cast_.acl_format(Tensor(a!) self, int acl_format) -> Tensor(a!)");
  m.def("get_npu_format(Tensor self) -> int");
  m.def("empty_with_format(int[] size, *, ScalarType? dtype=None, Layout? layout=None, Device? device=None, "
        "bool? pin_memory=None, int acl_format=2) -> Tensor");
  m.def("get_storage_size(Tensor self) -> int");
}

namespace softnpu::fused {

namespace {

constexpr int64_t kND = 2;

struct FormatName {
  int64_t value;
  const char* name;
  bool is_private;  // padded and blocked (C0 = 16 channels, 16x16 fractals): not ND's storage
};

// aclFormat's values.
constexpr FormatName kFormats[] = {
    {0, "NCHW", false},          {1, "NHWC", false},         {2, "ND", false},         {3, "NC1HWC0", true},
    {4, "FRACTAL_Z", true},      {12, "NC1HWC0_C04", true},  {16, "HWCN", false},      {27, "NDHWC", false},
    {29, "FRACTAL_NZ", true},    {30, "NCDHW", false},       {32, "NDC1HWC0", true},   {33, "FRACTAL_Z_3D", true},
    {35, "NC", false},           {47, "NCL", false},         {50, "FRACTAL_NZ_C0_16", true},
    {51, "FRACTAL_NZ_C0_32", true}, {52, "FRACTAL_NZ_C0_2", true}, {53, "FRACTAL_NZ_C0_4", true},
    {54, "FRACTAL_NZ_C0_8", true},
};

const FormatName* find_format(int64_t value) {
  for (const auto& f : kFormats)
    if (f.value == value) return &f;
  return nullptr;
}

const char* format_name(int64_t value) {
  const FormatName* f = find_format(value);
  return f ? f->name : nullptr;
}

void check_format(int64_t value, const char* op) {
  const FormatName* f = find_format(value);
  if (!f) {
    std::string known;
    for (const auto& k : kFormats)
      known += (known.empty() ? "" : ", ") + std::string(k.name) + "=" + std::to_string(k.value);
    TORCH_CHECK(false, op, ": unknown acl_format ", value, " (known: ", known, ")",
                error_code(SubModule::OPS, ErrCode::PARAM));
  }
  TORCH_CHECK_NOT_IMPLEMENTED(!f->is_private, op, ": acl_format ", f->name, " (", value,
                              ") is a private format of Ascend's cube unit (a padded, blocked layout), which softnpu "
                              "does not store: keep the tensor in ND (2), or in NCHW (0) / NHWC (1); ops run on ND at "
                              "full speed here, so the cast is not needed",
                              error_code(SubModule::OPS, ErrCode::NOT_SUPPORT));
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

// An empty tensor in a format; without a device, on the current npu device (the format is an npu notion).
at::Tensor empty_with_format(at::IntArrayRef size, std::optional<at::ScalarType> dtype,
                             std::optional<at::Layout> layout, std::optional<at::Device> device,
                             std::optional<bool> pin_memory, int64_t acl_format) {
  check_format(acl_format, "empty_with_format");
  const at::Device where = device.value_or(at::Device(c10::DeviceType::PrivateUse1));
  at::Tensor out = at::empty(size, at::TensorOptions().dtype(dtype).layout(layout).device(where).pinned_memory(pin_memory));
  set_format(out, acl_format);
  return out;
}

// Elements the storage holds: with only plain formats stored, ND's count (torch_npu's padded count is the same for
// them).
int64_t get_storage_size(const at::Tensor& self) {
  return static_cast<int64_t>(self.storage().nbytes() / self.itemsize());
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
    // A private format saved by an older softnpu (which kept it as metadata over ND data) loads as ND: its data is.
    for (const auto& f : kFormats)
      if (name == f.name && !f.is_private) set_format(t, f.value);
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
  m.impl("get_storage_size", get_storage_size);
}

TORCH_LIBRARY_IMPL(npu, CompositeExplicitAutograd, m) { m.impl("empty_with_format", empty_with_format); }

}  // namespace softnpu::fused
