"""Boolean masks in npu kernels: AVX-512 conversions between float masks and bool buffers (ATen's ``vec_mask.h``).

Inductor's C++ kernels store a float comparison into a bool buffer with ``VecMask<float, 1>::store(bool*)`` (relu's
mask saved for the backward, ``x <= 0``, ...) and load one with ``VecMask<float, 1>::from(const bool*)`` (that mask,
dropout's). In torch 2.13 neither has an AVX-512 specialization: the generic templates go through 64-lane
``Vectorized<bool>`` buffers one lane at a time, and Inductor compiles with ``-fno-tree-loop-vectorize``. Measured on
the 2-core Xeon (avx512) with Inductor's flags, 262,144 floats: the store 5.9 ms (22 ns an element), the load of two
masks 0.6-1.0 ms; with the specializations below 43 us and 86 us. In the transformer training step of
benchmarks/models.py, the relu kernels of the forward and backward took 27 ms of a 66 ms compiled step, against
2 ms for eager npu's relu and threshold_backward.

``with_vec_mask`` inserts the specializations after the kernel's ``cpp_prefix.h``, before any use instantiates the
generic ones. They apply only where Inductor compiles for AVX-512 (``CPU_CAPABILITY_AVX512``: AVX512F, DQ, VL, BW);
other ISAs keep Inductor's templates.
"""

_PREFIX = "#include <torch/csrc/inductor/cpp_prefix.h>\n"

_SPECIALIZATIONS = r"""
#if defined(CPU_CAPABILITY_AVX512)
namespace at::vec {
inline namespace CPU_CAPABILITY {

// 16 float lanes (all ones or zero) to 16 bools (1 or 0) in the first lanes of a Vectorized<bool>.
template <>
struct VecMaskTo<bool, 1, float, 1> {
  static inline VecMask<bool, 1> apply(const VecMask<float, 1>& vec_mask) {
    const __mmask16 lanes = _mm512_movepi32_mask(_mm512_castps_si512(Vectorized<float>(vec_mask)));
    Vectorized<bool> bools(false);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(static_cast<bool*>(bools)), _mm_maskz_set1_epi8(lanes, 1));
    return VecMask<bool, 1>(bools);
  }
};

// count bools (any nonzero byte is true) to float lanes, the lanes past count false.
inline VecMask<float, 1> softnpu_float_mask_from_bools(const bool* b, int count) {
  const __mmask16 valid = count >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << count) - 1);
  const __m128i bytes = _mm_maskz_loadu_epi8(valid, b);
  return Vectorized<float>(_mm512_castsi512_ps(_mm512_movm_epi32(_mm_test_epi8_mask(bytes, bytes))));
}

template <> template <>
inline VecMask<float, 1> VecMask<float, 1>::from<const bool>(const bool* b) {
  return softnpu_float_mask_from_bools(b, 16);
}
template <> template <>
inline VecMask<float, 1> VecMask<float, 1>::from<bool>(bool* b) {
  return softnpu_float_mask_from_bools(b, 16);
}
template <> template <>
inline VecMask<float, 1> VecMask<float, 1>::from<const bool>(const bool* b, int count) {
  return softnpu_float_mask_from_bools(b, count);
}
template <> template <>
inline VecMask<float, 1> VecMask<float, 1>::from<bool>(bool* b, int count) {
  return softnpu_float_mask_from_bools(b, count);
}

}  // namespace CPU_CAPABILITY
}  // namespace at::vec
#endif
"""


def with_vec_mask(source: str) -> str:
    """The kernel's C++ source with the specializations after its cpp_prefix.h."""
    index = source.find(_PREFIX)
    if index < 0:
        raise RuntimeError("softnpu: an Inductor C++ kernel does not start with cpp_prefix.h; this torch's "
                           "CppScheduling is not the one softnpu supports")
    end = index + len(_PREFIX)
    return source[:end] + _SPECIALIZATIONS + source[end:]
