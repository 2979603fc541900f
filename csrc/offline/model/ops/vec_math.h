// Vector math of softnpu's own AVX-512F kernels (direct_conv.cpp's epilogue, softmax_attention.cpp, layer_norm.cpp).
// Compiled for AVX-512F whatever the including file's flags: callers run it only where winograd::available().
#pragma once

#include <immintrin.h>

#include <cstdint>

namespace softnpu::offline::vec {

#pragma GCC push_options
#pragma GCC target("avx512f,fma")

// The lanes of a 16-float vector that hold the `remaining` values of a row (none when remaining <= 0).
inline __mmask16 lanes(int64_t remaining) {
  return remaining >= 16 ? static_cast<__mmask16>(0xffff)
                         : remaining <= 0 ? 0 : static_cast<__mmask16>((1u << remaining) - 1);
}

// e^x to about two ulp (Cephes' expf: x = n ln2 + r, a polynomial in r, times 2^n); exactly 0 below -87.3 (e^-inf
// included), where the result would be denormal: products with denormals take the core's slow microcode path.
inline __m512 exp_ps(__m512 x) {
  const __mmask16 normal = _mm512_cmp_ps_mask(x, _mm512_set1_ps(-87.3f), _CMP_GE_OQ);
  x = _mm512_min_ps(_mm512_max_ps(x, _mm512_set1_ps(-87.3f)), _mm512_set1_ps(88.7f));
  const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504f)), _MM_FROUND_TO_NEAREST_INT);
  __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), x);
  r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
  __m512 p = _mm512_set1_ps(1.9875691500e-4f);
  for (float c : {1.3981999507e-3f, 8.3334519073e-3f, 4.1665795894e-2f, 1.6666665459e-1f, 5.0000001201e-1f})
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(c));
  p = _mm512_fmadd_ps(p, _mm512_mul_ps(r, r), _mm512_add_ps(r, _mm512_set1_ps(1.f)));
  return _mm512_maskz_mov_ps(normal, _mm512_scalef_ps(p, n));
}

// tanh: (1 - e^-2|x|) / (1 + e^-2|x|) with x's sign; below |x| = 1/8, where 1 - e^-2|x| cancels, its Taylor series to
// x^7 (the next term is under 1e-8 of x there). NaN stays NaN.
inline __m512 tanh_ps(__m512 x) {
  const __m512 one = _mm512_set1_ps(1.f), a = _mm512_abs_ps(x);
  const __m512 e = exp_ps(_mm512_mul_ps(a, _mm512_set1_ps(-2.f)));
  __m512 t = _mm512_div_ps(_mm512_sub_ps(one, e), _mm512_add_ps(one, e));
  t = _mm512_mask_sub_ps(t, _mm512_cmp_ps_mask(x, _mm512_setzero_ps(), _CMP_LT_OQ), _mm512_setzero_ps(), t);
  const __m512 x2 = _mm512_mul_ps(x, x);
  __m512 p = _mm512_set1_ps(-17.f / 315.f);
  for (float c : {2.f / 15.f, -1.f / 3.f, 1.f}) p = _mm512_fmadd_ps(p, x2, _mm512_set1_ps(c));
  t = _mm512_mask_mul_ps(t, _mm512_cmp_ps_mask(a, _mm512_set1_ps(0.125f), _CMP_LT_OQ), p, x);
  return _mm512_mask_mov_ps(t, _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q), x);
}

// GELU: x/2 (1 + erf(x / sqrt 2)), erf by Abramowitz and Stegun's 7.1.26 (absolute error below 1.5e-7); or its tanh
// approximation, x/2 (1 + tanh(u)).
inline __m512 gelu_ps(__m512 x, bool tanh_form) {
  const __m512 half = _mm512_set1_ps(0.5f), one = _mm512_set1_ps(1.f);
  if (tanh_form) {
    const __m512 x3 = _mm512_mul_ps(_mm512_mul_ps(x, x), x);
    const __m512 u = _mm512_mul_ps(_mm512_set1_ps(0.7978845608f), _mm512_fmadd_ps(_mm512_set1_ps(0.044715f), x3, x));
    return _mm512_mul_ps(_mm512_mul_ps(half, x), _mm512_add_ps(one, tanh_ps(u)));
  }
  const __m512 z = _mm512_mul_ps(x, _mm512_set1_ps(0.70710678f));
  const __m512 a = _mm512_abs_ps(z);
  const __m512 t = _mm512_div_ps(one, _mm512_fmadd_ps(_mm512_set1_ps(0.3275911f), a, one));
  __m512 p = _mm512_set1_ps(1.061405429f);
  for (float c : {-1.453152027f, 1.421413741f, -0.284496736f, 0.254829592f}) p = _mm512_fmadd_ps(p, t, _mm512_set1_ps(c));
  p = _mm512_mul_ps(p, t);
  const __m512 e = exp_ps(_mm512_mul_ps(_mm512_sub_ps(_mm512_setzero_ps(), a), a));
  __m512 erf = _mm512_fnmadd_ps(p, e, one);  // erf(|z|)
  erf = _mm512_mask_sub_ps(erf, _mm512_cmp_ps_mask(z, _mm512_setzero_ps(), _CMP_LT_OQ), _mm512_setzero_ps(), erf);
  return _mm512_mul_ps(_mm512_mul_ps(half, x), _mm512_add_ps(one, erf));
}

#pragma GCC pop_options

}  // namespace softnpu::offline::vec
