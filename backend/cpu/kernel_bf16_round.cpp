// Rounding f32 matmul operands to bf16 (matmul_precision = bf16). On AMX a product runs several
// times faster than this pass could feed it with a scalar-style loop, so where the CPU has
// AVX512-BF16 its conversion instruction does the work, giving the same bits.

#include "backend/cpu/kernel_dot.h"
#include "backend/cpu/kernel_util.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define KEEL_BF16_NATIVE 1
#endif

namespace keel::cpu::detail {
namespace {

KEEL_CPU_CLONES
void bf16_bits_portable(const float* src, int64_t n, uint16_t* dst) {
  for (int64_t i = 0; i < n; ++i) dst[i] = static_cast<uint16_t>(bf16_bits(src[i]));
}

#ifdef KEEL_BF16_NATIVE
// VCVTNE2PS2BF16 rounds to nearest even and quiets NaN as above, but reads subnormal inputs as
// zero: a block of 32 holding one goes the portable way, so the bits never depend on the CPU.
__attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16"))) void bf16_bits_native(
    const float* src, int64_t n, uint16_t* dst) {
  const __m512i exponent = _mm512_set1_epi32(0x7f800000), mantissa = _mm512_set1_epi32(0x007fffff);
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    const __m512 lo = _mm512_loadu_ps(src + i), hi = _mm512_loadu_ps(src + i + 16);
    const __m512i ulo = _mm512_castps_si512(lo), uhi = _mm512_castps_si512(hi);
    const __mmask16 sub_lo = _mm512_mask_test_epi32_mask(_mm512_testn_epi32_mask(ulo, exponent),
                                                         ulo, mantissa),
                    sub_hi = _mm512_mask_test_epi32_mask(_mm512_testn_epi32_mask(uhi, exponent),
                                                         uhi, mantissa);
    if ((sub_lo | sub_hi) != 0) {
      bf16_bits_portable(src + i, 32, dst + i);
      continue;
    }
    _mm512_storeu_si512(dst + i, reinterpret_cast<__m512i>(_mm512_cvtne2ps_pbh(hi, lo)));
  }
  bf16_bits_portable(src + i, n - i, dst + i);
}

bool cpu_has_bf16_convert() {
  static const bool has = __builtin_cpu_supports("avx512bf16");
  return has;
}
#endif

}  // namespace

void bf16_round_bits(const float* src, int64_t n, uint16_t* dst, bool allow_native) {
#ifdef KEEL_BF16_NATIVE
  if (allow_native && cpu_has_bf16_convert()) return bf16_bits_native(src, n, dst);
#endif
  (void)allow_native;
  bf16_bits_portable(src, n, dst);
}

bool bf16_round_is_native() {
#ifdef KEEL_BF16_NATIVE
  return cpu_has_bf16_convert();
#else
  return false;
#endif
}

}  // namespace keel::cpu::detail
