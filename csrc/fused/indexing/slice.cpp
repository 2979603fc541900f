// npu_slice(x, offsets, size) -> the block of x starting at offsets with the given size (one entry per dimension), a
// new contiguous tensor: torch_npu's Slice. The .out form writes it into out (of that size), as torch_npu's.
#include <ATen/ATen.h>
#include <torch/library.h>

#include "fused/common.h"

// torch_npu's schemas (argument names, order, returns).
TORCH_LIBRARY_FRAGMENT(npu, m) {
  m.def("npu_slice(Tensor self, int[] offsets, int[] size) -> Tensor");
  m.def("npu_slice.out(Tensor self, int[] offsets, int[] size, *, Tensor(a!) out) -> Tensor(a!)");
}

namespace softnpu::fused {

namespace {

void check(const at::Tensor& x, at::IntArrayRef offsets, at::IntArrayRef size) {
  TORCH_CHECK(static_cast<int64_t>(offsets.size()) == x.dim() && static_cast<int64_t>(size.size()) == x.dim(),
              "npu_slice: offsets and size need one entry per dimension of self (", x.dim(), "), got ",
              offsets.size(), " and ", size.size());
  for (int64_t d = 0; d < x.dim(); ++d)
    TORCH_CHECK(offsets[d] >= 0 && size[d] >= 0 && offsets[d] + size[d] <= x.size(d), "npu_slice: dimension ", d,
                " of size ", x.size(d), " cannot hold ", size[d], " elements from offset ", offsets[d]);
}

// The block as a view of x.
at::Tensor block(const at::Tensor& x, at::IntArrayRef offsets, at::IntArrayRef size) {
  at::Tensor view = x;
  for (int64_t d = 0; d < x.dim(); ++d) view = view.narrow(d, offsets[d], size[d]);
  return view;
}

at::Tensor slice_meta(const at::Tensor& x, at::IntArrayRef offsets, at::IntArrayRef size) {
  check(x, offsets, size);
  return at::empty(size, x.options());
}

at::Tensor& slice_out(const at::Tensor& x, at::IntArrayRef offsets, at::IntArrayRef size, at::Tensor& out) {
  check(x, offsets, size);
  TORCH_CHECK(out.sizes() == size && out.scalar_type() == x.scalar_type(), "npu_slice.out: out must have size ", size,
              " and self's dtype ", x.scalar_type(), ", got ", out.sizes(), " ", out.scalar_type());
  return out.copy_(block(x, offsets, size));
}

at::Tensor slice_cpu(const at::Tensor& x, at::IntArrayRef offsets, at::IntArrayRef size) {
  check(x, offsets, size);
  return block(x, offsets, size).contiguous();
}

}  // namespace

TORCH_LIBRARY_IMPL(npu, Meta, m) {
  m.impl("npu_slice", slice_meta);
  m.impl("npu_slice.out", [](const at::Tensor& x, at::IntArrayRef offsets, at::IntArrayRef size,
                             at::Tensor& out) -> at::Tensor& {
    check(x, offsets, size);
    return out;
  });
}

TORCH_LIBRARY_IMPL(npu, CPU, m) {
  m.impl("npu_slice", slice_cpu);
  m.impl("npu_slice.out", slice_out);
}

}  // namespace softnpu::fused
