// Tensor formats (torch_npu's acl_format: ND, NCHW, FRACTAL_NZ, ...) as metadata over ND data. On Ascend the
// private formats (NC1HWC0, FRACTAL_Z, FRACTAL_NZ, NDC1HWC0, FRACTAL_Z_3D, ...) are padded, blocked layouts of the
// cube unit, but what a user sees of such a tensor is its logical shape and values: every op, copy, collective and
// torch.save reads it as ND. So here every format is a c10::BackendMeta on the TensorImpl over unchanged ND data: the
// format (what get_npu_format answers) and, for a private one, the storage shape torch_npu computes for it from the
// logical shape (FormatHelper's rules: C0 blocks of 16 channels, 16 x C0 fractals), which get_storage_size reports.
//
// npu_format_cast sets it on a copy, npu_format_cast_ in place; shallow copies (detach, nn.Parameter) and in-place
// ops keep it (the TensorImpl is the same), results of other ops and views are ND (torch_npu's ops return ND unless
// they write into a given tensor); torch.save/torch.load carry it through PyTorch's backend-meta serialization hooks
// (a "npu_format/<NAME>" key). With torch.npu.config.allow_internal_format False, a cast to a private format gives its
// base format instead (ND for the fractal NZ formats, NCHW for NC1HWC0 and FRACTAL_Z, NCDHW for the 3-D ones), as
// torch_npu does: "no tensor of a private format is created".
#include "backend/format.h"

#include <ATen/ATen.h>
#include <c10/core/TensorImpl.h>
#include <torch/csrc/jit/serialization/pickler_helper.h>
#include <torch/library.h>

#include <atomic>
#include <string_view>
#include <vector>

#include "backend/error_code.h"

// torch_npu's schemas (argument names, order, defaults, returns).
TORCH_LIBRARY_FRAGMENT(npu, m) {
  m.def("npu_format_cast(Tensor self, int acl_format) -> Tensor");
  m.def("npu_format_cast.Tensor(Tensor self, Tensor dst) -> Tensor");
  m.def("npu_format_cast_.acl_format(Tensor(a!) self, int acl_format) -> Tensor(a!)");
  m.def("npu_format_cast_(Tensor(a!) self, Tensor src) -> Tensor(a!)");
  m.def("get_npu_format(Tensor self) -> int");
  m.def("empty_with_format(int[] size, *, ScalarType? dtype=None, Layout? layout=None, Device? device=None, "
        "bool? pin_memory=None, int acl_format=2) -> Tensor");
  m.def("get_storage_size(Tensor self) -> int");
}

namespace softnpu {

namespace {

constexpr int64_t kNCHW = 0, kND = 2, kNCDHW = 30;
constexpr int64_t kBlock = 16;  // torch_npu's BLOCKSIZE: C0 of the 5-D formats, the fractals' rows

using Shape = std::vector<int64_t>;

enum class Layout {
  kPlain,      // the same elements as ND
  kNC1HWC0,    // (N, C1, H, W, C0) of an NCHW shape
  kFractalZ,   // (C1 * H * W, N1, 16, 16) of an NCHW shape
  kFractalNZ,  // (..., last1, second1, 16, C0) of an ND shape
  kNDC1HWC0,   // (N, D, C1, H, W, C0) of an NCDHW shape
  kFractalZ3D, // (D * C1 * H * W, N1, 16, 16) of an NCDHW shape
};

struct FormatInfo {
  int64_t value;
  const char* name;
  int64_t base;  // what a private format becomes when private formats are not allowed
  Layout layout;
  int64_t c0;    // the block of the last storage dimension; 0: FRACTAL_NZ's (32 bytes of at most 2-byte items)
};

// aclFormat's values.
constexpr FormatInfo kFormats[] = {
    {0, "NCHW", 0, Layout::kPlain, 0},
    {1, "NHWC", 1, Layout::kPlain, 0},
    {2, "ND", 2, Layout::kPlain, 0},
    {3, "NC1HWC0", kNCHW, Layout::kNC1HWC0, kBlock},
    {4, "FRACTAL_Z", kNCHW, Layout::kFractalZ, kBlock},
    {12, "NC1HWC0_C04", kNCHW, Layout::kNC1HWC0, 4},
    {16, "HWCN", 16, Layout::kPlain, 0},
    {27, "NDHWC", 27, Layout::kPlain, 0},
    {29, "FRACTAL_NZ", kND, Layout::kFractalNZ, 0},
    {30, "NCDHW", 30, Layout::kPlain, 0},
    {32, "NDC1HWC0", kNCDHW, Layout::kNDC1HWC0, kBlock},
    {33, "FRACTAL_Z_3D", kNCDHW, Layout::kFractalZ3D, kBlock},
    {35, "NC", 35, Layout::kPlain, 0},
    {47, "NCL", 47, Layout::kPlain, 0},
    {50, "FRACTAL_NZ_C0_16", kND, Layout::kFractalNZ, 16},
    {51, "FRACTAL_NZ_C0_32", kND, Layout::kFractalNZ, 32},
    {52, "FRACTAL_NZ_C0_2", kND, Layout::kFractalNZ, 2},
    {53, "FRACTAL_NZ_C0_4", kND, Layout::kFractalNZ, 4},
    {54, "FRACTAL_NZ_C0_8", kND, Layout::kFractalNZ, 8},
};

std::atomic<bool (*)()> g_internal_format_query{nullptr};

bool internal_formats_allowed() {
  bool (*query)() = g_internal_format_query.load(std::memory_order_acquire);
  return query ? query() : true;
}

const FormatInfo* find_format(int64_t value) {
  for (const auto& f : kFormats)
    if (f.value == value) return &f;
  return nullptr;
}

const FormatInfo& checked_format(int64_t value, const char* op) {
  const FormatInfo* f = find_format(value);
  if (!f) {
    std::string known;
    for (const auto& k : kFormats)
      known += (known.empty() ? "" : ", ") + std::string(k.name) + "=" + std::to_string(k.value);
    TORCH_CHECK(false, op, ": unknown acl_format ", value, " (known: ", known, ")",
                error_code(SubModule::OPS, ErrCode::PARAM));
  }
  return *f;
}

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// A shape of at most 4 dimensions as NCHW: C, CH, CHW fill from C (torch_npu's reshape types), 0-D is all ones.
Shape as_nchw(const Shape& dims, const FormatInfo& f) {
  TORCH_CHECK(dims.size() <= 4, "npu_format_cast: a tensor of ", dims.size(), " dimensions cannot be ", f.name,
              " (at most 4: N, C, H, W)", error_code(SubModule::OPS, ErrCode::PARAM));
  Shape nchw{1, 1, 1, 1};
  if (dims.size() == 4) return dims;
  for (size_t i = 0; i < dims.size(); ++i) nchw[1 + i] = dims[i];
  return nchw;
}

Shape as_ncdhw(const Shape& dims, const FormatInfo& f) {
  TORCH_CHECK(dims.size() == 5, "npu_format_cast: a tensor of ", dims.size(), " dimensions cannot be ", f.name,
              " (it needs 5: N, C, D, H, W)", error_code(SubModule::OPS, ErrCode::PARAM));
  return dims;
}

// The storage shape torch_npu gives a tensor of logical shape `dims` in format f (empty for the plain formats,
// whose storage is ND's). Fails, as torch_npu's cast does, for shapes the format cannot hold.
Shape storage_shape(const FormatInfo& f, const Shape& dims, int64_t itemsize) {
  switch (f.layout) {
    case Layout::kPlain:
      return {};
    case Layout::kNC1HWC0: {
      const Shape s = as_nchw(dims, f);
      return {s[0], ceil_div(s[1], f.c0), s[2], s[3], f.c0};
    }
    case Layout::kFractalZ: {
      const Shape s = as_nchw(dims, f);
      return {ceil_div(s[1], kBlock) * s[2] * s[3], ceil_div(s[0], kBlock), kBlock, kBlock};
    }
    case Layout::kFractalNZ: {
      Shape s = dims;
      if (s.empty()) s.push_back(1);
      if (s.size() == 1) s.push_back(1);  // a vector is one column of rows
      // float32 is blocked as float16 is (torch_npu: 32-byte blocks of at most 2-byte items).
      const int64_t c0 = f.c0 ? f.c0 : 32 / std::min<int64_t>(itemsize, 2);
      const int64_t rows = s[s.size() - 2], cols = s[s.size() - 1];
      Shape out(s.begin(), s.end() - 2);
      out.insert(out.end(), {ceil_div(cols, c0), ceil_div(rows, kBlock), kBlock, c0});
      return out;
    }
    case Layout::kNDC1HWC0: {
      const Shape s = as_ncdhw(dims, f);
      return {s[0], s[2], ceil_div(s[1], kBlock), s[3], s[4], kBlock};
    }
    case Layout::kFractalZ3D: {
      const Shape s = as_ncdhw(dims, f);
      return {s[2] * ceil_div(s[1], kBlock) * s[3] * s[4], ceil_div(s[0], kBlock), kBlock, kBlock};
    }
  }
  return {};
}

struct FormatMeta final : c10::BackendMeta {
  FormatMeta(int64_t f, Shape storage) : format(f), storage_sizes(std::move(storage)) {}
  c10::intrusive_ptr<c10::BackendMeta> clone(const c10::intrusive_ptr<c10::BackendMeta>&) const override {
    return c10::make_intrusive<FormatMeta>(format, storage_sizes);
  }
  int64_t format;
  Shape storage_sizes;  // a private format's (empty for the plain ones)
};

const FormatMeta* meta_of(const at::Tensor& t) {
  return dynamic_cast<const FormatMeta*>(t.unsafeGetTensorImpl()->get_backend_meta());
}

int64_t format_of(const at::Tensor& t) {
  const FormatMeta* meta = meta_of(t);
  return meta ? meta->format : kND;
}

// The format a cast to `value` gives (the base format when private formats are not allowed).
const FormatInfo& effective_format(int64_t value, const char* op) {
  const FormatInfo& f = checked_format(value, op);
  if (f.layout == Layout::kPlain || internal_formats_allowed()) return f;
  return checked_format(f.base, op);
}

void set_format(const at::Tensor& t, const FormatInfo& f) {
  Shape storage = storage_shape(f, t.sizes().vec(), static_cast<int64_t>(t.itemsize()));  // checks the shape first
  // ND is the absence of a format: such tensors serialize exactly as any other.
  t.unsafeGetTensorImpl()->set_backend_meta(
      f.value == kND ? nullptr : c10::make_intrusive<FormatMeta>(f.value, std::move(storage)));
}

int64_t get_npu_format(const at::Tensor& self) { return format_of(self); }

// A new tensor (the schema's promise: no alias of self) with the format; its data is self's, copied on the stream.
at::Tensor npu_format_cast(const at::Tensor& self, int64_t acl_format) {
  const FormatInfo& f = effective_format(acl_format, "npu_format_cast");
  storage_shape(f, self.sizes().vec(), static_cast<int64_t>(self.itemsize()));  // refuse before copying
  at::Tensor out = self.clone(at::MemoryFormat::Contiguous);
  set_format(out, f);
  return out;
}

at::Tensor npu_format_cast_like(const at::Tensor& self, const at::Tensor& dst) {
  return npu_format_cast(self, format_of(dst));
}

const at::Tensor& npu_format_cast_(const at::Tensor& self, int64_t acl_format) {
  set_format(self, effective_format(acl_format, "npu_format_cast_"));
  return self;
}

const at::Tensor& npu_format_cast_like_(const at::Tensor& self, const at::Tensor& src) {
  return npu_format_cast_(self, format_of(src));
}

// An empty tensor in a format; without a device, on the current npu device (the format is an npu notion).
at::Tensor empty_with_format(at::IntArrayRef size, std::optional<at::ScalarType> dtype,
                             std::optional<at::Layout> layout, std::optional<at::Device> device,
                             std::optional<bool> pin_memory, int64_t acl_format) {
  const FormatInfo& f = effective_format(acl_format, "empty_with_format");
  const at::Device where = device.value_or(at::Device(c10::DeviceType::PrivateUse1));
  at::Tensor out = at::empty(size, at::TensorOptions().dtype(dtype).layout(layout).device(where).pinned_memory(pin_memory));
  set_format(out, f);
  return out;
}

// Elements of the tensor's storage as torch_npu counts them: the private format's padded storage shape, else the
// elements the storage holds (a view's is its base's).
int64_t get_storage_size(const at::Tensor& self) {
  if (const FormatMeta* meta = meta_of(self); meta && !meta->storage_sizes.empty()) {
    int64_t n = 1;
    for (int64_t s : meta->storage_sizes) n *= s;
    return n;
  }
  return static_cast<int64_t>(self.storage().nbytes() / self.itemsize());
}

constexpr std::string_view kKeyPrefix = "npu_format/";

void serialize_format(const at::Tensor& t, std::unordered_map<std::string, bool>& metadata) {
  const int64_t f = format_of(t);
  if (f != kND) metadata[std::string(kKeyPrefix) + find_format(f)->name] = true;
}

// As torch_npu's load casts to the saved format: a private one becomes its base format where they are not allowed.
void deserialize_format(const at::Tensor& t, std::unordered_map<std::string, bool>& metadata) {
  for (const auto& [key, value] : metadata) {
    if (key.compare(0, kKeyPrefix.size(), kKeyPrefix) != 0) continue;
    const std::string name = key.substr(kKeyPrefix.size());
    for (const auto& f : kFormats)
      if (name == f.name) set_format(t, effective_format(f.value, "torch.load"));
  }
}

[[maybe_unused]] const bool g_registered = [] {
  torch::jit::TensorBackendMetaRegistry(c10::DeviceType::PrivateUse1, &serialize_format, &deserialize_format);
  return true;
}();

}  // namespace

void set_internal_format_query(bool (*query)()) { g_internal_format_query.store(query, std::memory_order_release); }

// Composite: npu_format_cast is a clone (an op on the stream, with clone's autograd and Meta kernel) plus metadata;
// the others only touch metadata.
TORCH_LIBRARY_IMPL(npu, CompositeImplicitAutograd, m) {
  m.impl("npu_format_cast", npu_format_cast);
  m.impl("npu_format_cast.Tensor", npu_format_cast_like);
  m.impl("npu_format_cast_.acl_format", npu_format_cast_);
  m.impl("npu_format_cast_", npu_format_cast_like_);
  m.impl("get_npu_format", get_npu_format);
  m.impl("get_storage_size", get_storage_size);
}

TORCH_LIBRARY_IMPL(npu, CompositeExplicitAutograd, m) { m.impl("empty_with_format", empty_with_format); }

}  // namespace softnpu
