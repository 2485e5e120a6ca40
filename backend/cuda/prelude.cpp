// The helpers every generated CUDA source starts with: the rules of docs/ops.md that are not a
// single operator (as backend/cpu's prelude states them for C++), in CUDA C that NVRTC compiles
// with -default-device and that the host shim compiles as C++.
#include "backend/cuda/codegen.h"

namespace keel::cuda {

const char* const kPrelude = R"KEEL(
#ifdef __CUDACC_RTC__
typedef signed char int8_t;
typedef unsigned char uint8_t;
typedef short int16_t;
typedef unsigned short uint16_t;
typedef int int32_t;
typedef unsigned int uint32_t;
typedef long long int64_t;
typedef unsigned long long uint64_t;
#endif

// The float maths of docs/ops.md, as CUDA's device library computes them.
#define KEEL_MATH(name)                                           \
  inline float keel_##name(float x) { return name##f(x); }      \
  inline double keel_##name(double x) { return name(x); }
KEEL_MATH(fabs)
KEEL_MATH(exp)
KEEL_MATH(log)
KEEL_MATH(tanh)
KEEL_MATH(sqrt)
KEEL_MATH(erf)
KEEL_MATH(sin)
KEEL_MATH(cos)
#undef KEEL_MATH
inline float keel_pow(float x, float y) { return powf(x, y); }
inline double keel_pow(double x, double y) { return pow(x, y); }

// bf16 is the top half of an f32; stores round to nearest even and keep NaN quiet.
inline float keel_bf2f(uint16_t b) { return __uint_as_float(static_cast<uint32_t>(b) << 16); }
inline uint16_t keel_f2bf(float f) {
  const uint32_t u = __float_as_uint(f);
  const uint16_t r = static_cast<uint16_t>((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
  return f != f ? static_cast<uint16_t>((u >> 16) | 0x40u) : r;
}
inline float keel_rbf(float f) { return keel_bf2f(keel_f2bf(f)); }

// The sum over a warp's 32 lanes, in a fixed butterfly; every lane gets it.
inline float keel_warp_sum(float v) {
  for (int m = 16; m > 0; m >>= 1) v += __shfl_xor_sync(0xffffffffu, v, m);
  return v;
}

// rng_uniform's counter-based generator (ir/rng.h): every backend computes exactly this.
inline uint64_t keel_splitmix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}
inline float keel_rng_uniform01(uint64_t seed, uint64_t counter, uint64_t i) {
  const uint64_t bits = keel_splitmix64(keel_splitmix64(seed ^ keel_splitmix64(counter)) + i);
  return static_cast<float>(bits >> 40) * (1.0f / 16777216.0f);
}

inline float keel_nanf() { return __uint_as_float(0x7fc00000u); }
inline bool keel_signbit(float x) { return (__float_as_uint(x) >> 31) != 0; }
// max/min propagate NaN and order -0 below +0.
inline float keel_fmax(float a, float b) {
  float m = a > b ? a : b;
  m = a == b ? (keel_signbit(a) ? b : a) : m;
  return (a != a || b != b) ? keel_nanf() : m;
}
inline float keel_fmin(float a, float b) {
  float m = a < b ? a : b;
  m = a == b ? (keel_signbit(a) ? a : b) : m;
  return (a != a || b != b) ? keel_nanf() : m;
}
)KEEL";

}  // namespace keel::cuda
