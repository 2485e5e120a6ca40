// The helpers every generated program starts with. They restate, in plain C++ the system
// compiler can inline and vectorise, the rules of docs/ops.md that are not a single operator.
#include "backend/cpu/codegen_internal.h"

namespace keel::cpu::gen {

const char* const kPrelude = R"KEEL(
// No standard header beyond the ABI's <stdint.h>: the maths below are the compiler's builtins
// (what <cmath>'s float overloads call), and parsing <cmath> and <cstring> took a sixth of a
// small program's compile.

// glibc's vector math library (libmvec, within 4 ulp) has SIMD versions of these; declaring
// them lets g++ vectorise loops that call them (5-15x faster) without -ffast-math.
#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) && defined(__GLIBC__) && \
    (__GLIBC__ > 2 || __GLIBC_MINOR__ >= 35)
extern "C" {
#pragma omp declare simd notinbranch
float expf(float) noexcept;
#pragma omp declare simd notinbranch
float logf(float) noexcept;
#pragma omp declare simd notinbranch
float tanhf(float) noexcept;
#pragma omp declare simd notinbranch
float erff(float) noexcept;
#pragma omp declare simd notinbranch
float sinf(float) noexcept;
#pragma omp declare simd notinbranch
float cosf(float) noexcept;
#pragma omp declare simd notinbranch
float powf(float, float) noexcept;
}
#endif

namespace {

// The float maths of docs/ops.md, as <cmath>'s float overloads compute them; the double
// overloads make a call on integers alone ambiguous, a compile error rather than a conversion.
#define KEEL_MATH(name)                                                 \
  inline float keel_##name(float x) { return __builtin_##name##f(x); } \
  inline double keel_##name(double x) { return __builtin_##name(x); }
KEEL_MATH(fabs)
KEEL_MATH(exp)
KEEL_MATH(log)
KEEL_MATH(tanh)
KEEL_MATH(sqrt)
KEEL_MATH(erf)
KEEL_MATH(sin)
KEEL_MATH(cos)
#undef KEEL_MATH
inline float keel_pow(float x, float y) { return __builtin_powf(x, y); }
inline double keel_pow(double x, double y) { return __builtin_pow(x, y); }

// bf16 is the top half of an f32; stores round to nearest even and keep NaN quiet.
inline float keel_bf2f(uint16_t b) {
  const uint32_t u = static_cast<uint32_t>(b) << 16;
  float f;
  __builtin_memcpy(&f, &u, 4);
  return f;
}
inline uint16_t keel_f2bf(float f) {
  uint32_t u;
  __builtin_memcpy(&u, &f, 4);
  const uint16_t r = static_cast<uint16_t>((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
  return f != f ? static_cast<uint16_t>((u >> 16) | 0x40u) : r;
}
// A bf16 value held as float: every bf16 op rounds its result, as the reference does on store.
inline float keel_rbf(float f) { return keel_bf2f(keel_f2bf(f)); }

// max/min propagate NaN and order -0 below +0.
inline float keel_fmax(float a, float b) {
  float m = a > b ? a : b;
  m = a == b ? (__builtin_signbit(a) ? b : a) : m;
  return (a != a || b != b) ? __builtin_nanf("") : m;
}
inline float keel_fmin(float a, float b) {
  float m = a < b ? a : b;
  m = a == b ? (__builtin_signbit(a) ? a : b) : m;
  return (a != a || b != b) ? __builtin_nanf("") : m;
}

)KEEL";

}  // namespace keel::cpu::gen
