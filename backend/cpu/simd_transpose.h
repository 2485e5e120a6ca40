#pragma once
// AVX-512 transposes of 16 x 16 32-bit words in registers, for the kernels that turn a block
// around (the attention backward's dk and dv, bf16 weight-gradient operands). Callers check the
// CPU first: these are compiled for AVX-512 whatever the file's own flags.
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>

// g++ 12 takes the undefined pass-through operand inside the AVX-512 intrinsics for a read.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif

namespace keel::cpu::detail {

#define KEEL_AVX512_TARGET __attribute__((target("avx512f,avx512bw")))

KEEL_AVX512_TARGET inline __m512 pairs_lo(__m512 a, __m512 b) {
  return _mm512_castpd_ps(_mm512_unpacklo_pd(_mm512_castps_pd(a), _mm512_castps_pd(b)));
}
KEEL_AVX512_TARGET inline __m512 pairs_hi(__m512 a, __m512 b) {
  return _mm512_castpd_ps(_mm512_unpackhi_pd(_mm512_castps_pd(a), _mm512_castps_pd(b)));
}

// r[i][j] becomes r[j][i]: pairs of words, then of pairs, then 128- and 256-bit lanes.
KEEL_AVX512_TARGET inline void transpose16(__m512* r) {
  __m512 t[16];
  for (int i = 0; i < 16; i += 2) {
    t[i] = _mm512_unpacklo_ps(r[i], r[i + 1]);
    t[i + 1] = _mm512_unpackhi_ps(r[i], r[i + 1]);
  }
  for (int i = 0; i < 16; i += 4) {
    r[i] = pairs_lo(t[i], t[i + 2]);
    r[i + 1] = pairs_hi(t[i], t[i + 2]);
    r[i + 2] = pairs_lo(t[i + 1], t[i + 3]);
    r[i + 3] = pairs_hi(t[i + 1], t[i + 3]);
  }
  for (int h = 0; h < 16; h += 8) {
    for (int i = 0; i < 4; ++i) {
      t[h + i] = _mm512_shuffle_f32x4(r[h + i], r[h + i + 4], 0x88);
      t[h + i + 4] = _mm512_shuffle_f32x4(r[h + i], r[h + i + 4], 0xdd);
    }
  }
  for (int i = 0; i < 8; ++i) {
    r[i] = _mm512_shuffle_f32x4(t[i], t[i + 8], 0x88);
    r[i + 8] = _mm512_shuffle_f32x4(t[i], t[i + 8], 0xdd);
  }
}
}  // namespace keel::cpu::detail

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif
#endif
