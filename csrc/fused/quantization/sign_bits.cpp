// npu_sign_bits_pack(x, size) / npu_sign_bits_unpack(x, size, dtype): torch_npu's 1-bit sign compression, as
// DeepSpeed's 1-bit optimizers (onebit Adam / LAMB, zero-one Adam, through its compressed allreduce) call it.
// Pack: each value's sign as a bit, 1 for x >= 0 and 0 for x < 0, eight to a uint8 in little-endian bit order (the
// first value in bit 0), the tail padded with 0 bits (the value -1), reshaped to [size, -1]. Unpack: each bit of a
// uint8 (bit 0 first) as +1 (1) or -1 (0), in dtype, reshaped to [size, -1].
#include <ATen/ATen.h>
#include <torch/library.h>

#include "fused/common.h"

TORCH_LIBRARY_FRAGMENT(npu, m) {
  m.def("npu_sign_bits_pack(Tensor self, int size) -> Tensor");
  m.def("npu_sign_bits_unpack(Tensor input, int size, ScalarType dtype) -> Tensor");
}

namespace softnpu::fused {

namespace {

int64_t packed_bytes(const at::Tensor& x, int64_t size) {
  constexpr const char* op = "npu_sign_bits_pack";
  TORCH_CHECK(x.dim() == 1, op, ": input must be one-dimensional, got shape ", x.sizes());
  TORCH_CHECK(x.scalar_type() == at::kHalf || x.scalar_type() == at::kFloat, op,
              ": only supports torch.float16 and torch.float32 dtypes, got ", x.scalar_type());
  const int64_t bytes = (x.numel() + 7) / 8;
  TORCH_CHECK(size > 0 && bytes % size == 0, op, ": the packed size ", bytes, " must be divisible by size, got ",
              size);
  return bytes;
}

at::Tensor pack_meta(const at::Tensor& x, int64_t size) {
  const int64_t bytes = packed_bytes(x, size);
  return at::empty({size, bytes / size}, x.options().dtype(at::kByte));
}

at::Tensor pack_cpu(const at::Tensor& x, int64_t size) {
  const int64_t bytes = packed_bytes(x, size);
  const at::Tensor bits = at::constant_pad_nd(x.ge(0).to(at::kByte), {0, bytes * 8 - x.numel()});
  // Bit j of each byte is value 8i + j: the bits shifted into place and summed (they do not overlap).
  const at::Tensor place = at::arange(8, x.options().dtype(at::kByte));
  return bits.view({bytes, 8}).bitwise_left_shift(place).sum(-1, /*keepdim=*/false, at::kByte).view({size, -1});
}

void check_unpack(const at::Tensor& x, int64_t size, c10::ScalarType dtype) {
  constexpr const char* op = "npu_sign_bits_unpack";
  TORCH_CHECK(x.dim() == 1, op, ": input must be one-dimensional, got shape ", x.sizes());
  TORCH_CHECK(x.scalar_type() == at::kByte, op, ": input must be uint8, got ", x.scalar_type());
  TORCH_CHECK(dtype == at::kHalf || dtype == at::kFloat, op, ": dtype must be torch.float16 or torch.float32, got ",
              dtype);
  TORCH_CHECK(size > 0 && (x.numel() * 8) % size == 0, op, ": the unpacked size ", x.numel() * 8,
              " must be divisible by size, got ", size);
}

at::Tensor unpack_meta(const at::Tensor& x, int64_t size, c10::ScalarType dtype) {
  check_unpack(x, size, dtype);
  return at::empty({size, x.numel() * 8 / size}, x.options().dtype(dtype));
}

at::Tensor unpack_cpu(const at::Tensor& x, int64_t size, c10::ScalarType dtype) {
  check_unpack(x, size, dtype);
  const at::Tensor bits = x.unsqueeze(-1).bitwise_right_shift(at::arange(8, x.options())).bitwise_and(1);
  return (bits.to(dtype) * 2 - 1).reshape({size, -1});
}

}  // namespace

TORCH_LIBRARY_IMPL(npu, Meta, m) {
  m.impl("npu_sign_bits_pack", pack_meta);
  m.impl("npu_sign_bits_unpack", unpack_meta);
}

TORCH_LIBRARY_IMPL(npu, CPU, m) {
  m.impl("npu_sign_bits_pack", pack_cpu);
  m.impl("npu_sign_bits_unpack", unpack_cpu);
}

}  // namespace softnpu::fused
