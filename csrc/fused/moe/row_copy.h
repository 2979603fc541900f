// Row copies of the MoE dispatch ops, whose outputs (tokens times top-k rows) are larger than the host's caches.
// A plain store first reads the destination's cache line (read for ownership), so a gather of B bytes moves 3B over
// the memory bus; non-temporal stores write the line without reading it, 2B. ATen's index_select copies each row with
// memcpy, which uses non-temporal stores only for copies larger than glibc's threshold (megabytes), never for rows of
// a few KiB, so this is what a fused dispatch saves over the composite besides its intermediate tensors.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

namespace softnpu::fused {

// Outputs from this size on are written with non-temporal stores: they cannot stay in this host's cache for the next
// op anyway (an AMD EPYC CCX's L3 is 32 MiB, shared by its cores), and below it a plain store leaves the rows cached.
constexpr size_t kStreamingOutputBytes = size_t{16} << 20;

// Copies one row, the 16-byte aligned part of dst with non-temporal stores. Call stream_fence() after the last row a
// thread writes, before another thread may read them.
inline void stream_row(char* dst, const char* src, size_t bytes) {
#if defined(__SSE2__)
  size_t head = (16 - reinterpret_cast<uintptr_t>(dst) % 16) % 16;
  if (head > bytes) head = bytes;
  std::memcpy(dst, src, head);
  size_t i = head;
  for (; i + 64 <= bytes; i += 64) {
    const __m128i a = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i));
    const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i + 16));
    const __m128i c = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i + 32));
    const __m128i d = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i + 48));
    _mm_stream_si128(reinterpret_cast<__m128i*>(dst + i), a);
    _mm_stream_si128(reinterpret_cast<__m128i*>(dst + i + 16), b);
    _mm_stream_si128(reinterpret_cast<__m128i*>(dst + i + 32), c);
    _mm_stream_si128(reinterpret_cast<__m128i*>(dst + i + 48), d);
  }
  for (; i + 16 <= bytes; i += 16)
    _mm_stream_si128(reinterpret_cast<__m128i*>(dst + i), _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i)));
  std::memcpy(dst + i, src + i, bytes - i);
#else
  std::memcpy(dst, src, bytes);
#endif
}

// Non-temporal stores are weakly ordered: this makes the thread's earlier ones visible before its later stores.
inline void stream_fence() {
#if defined(__SSE2__)
  _mm_sfence();
#endif
}

}  // namespace softnpu::fused
