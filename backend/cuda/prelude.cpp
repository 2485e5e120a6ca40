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

// Tensor-core products of 16 x 16 tiles (wmma, m16n16k16): bf16 operands, f32 accumulation.
// Fragments are opaque (each lane holds part of the tile); a warp loads, multiplies and stores
// them together, after __syncwarp when its lanes wrote the tiles. Operand tiles are bf16 bits
// (uint16_t) 32-byte aligned, leading dimensions multiples of 8. The host shim has its own.
#ifndef KEEL_HOST_SHIM
struct keel_mma_a { uint32_t r[4]; };      // a row-major operand
struct keel_mma_b_col { uint32_t r[4]; };  // b, column-major: (k, n) at p[n * ldm + k]
struct keel_mma_b_row { uint32_t r[4]; };  // b, row-major: (k, n) at p[k * ldm + n]
struct keel_mma_acc { float r[8]; };
inline void keel_mma_zero(keel_mma_acc& c) {
  for (int i = 0; i < 8; ++i) c.r[i] = 0.0f;
}
inline void keel_mma_load(keel_mma_a& f, const uint16_t* p, int ldm) {
  asm volatile("wmma.load.a.sync.aligned.row.m16n16k16.bf16 {%0, %1, %2, %3}, [%4], %5;"
               : "=r"(f.r[0]), "=r"(f.r[1]), "=r"(f.r[2]), "=r"(f.r[3]) : "l"(p), "r"(ldm) : "memory");
}
inline void keel_mma_load(keel_mma_b_col& f, const uint16_t* p, int ldm) {
  asm volatile("wmma.load.b.sync.aligned.col.m16n16k16.bf16 {%0, %1, %2, %3}, [%4], %5;"
               : "=r"(f.r[0]), "=r"(f.r[1]), "=r"(f.r[2]), "=r"(f.r[3]) : "l"(p), "r"(ldm) : "memory");
}
inline void keel_mma_load(keel_mma_b_row& f, const uint16_t* p, int ldm) {
  asm volatile("wmma.load.b.sync.aligned.row.m16n16k16.bf16 {%0, %1, %2, %3}, [%4], %5;"
               : "=r"(f.r[0]), "=r"(f.r[1]), "=r"(f.r[2]), "=r"(f.r[3]) : "l"(p), "r"(ldm) : "memory");
}
#define KEEL_MMA(BLAYOUT, BTYPE)                                                            \
  inline void keel_mma(keel_mma_acc& d, const keel_mma_a& a, const BTYPE& b) {              \
    asm volatile("wmma.mma.sync.aligned.row." #BLAYOUT ".m16n16k16.f32.bf16.bf16.f32 "      \
                 "{%0, %1, %2, %3, %4, %5, %6, %7}, {%8, %9, %10, %11}, "                   \
                 "{%12, %13, %14, %15}, {%0, %1, %2, %3, %4, %5, %6, %7};"                  \
                 : "+f"(d.r[0]), "+f"(d.r[1]), "+f"(d.r[2]), "+f"(d.r[3]), "+f"(d.r[4]),    \
                   "+f"(d.r[5]), "+f"(d.r[6]), "+f"(d.r[7])                                 \
                 : "r"(a.r[0]), "r"(a.r[1]), "r"(a.r[2]), "r"(a.r[3]), "r"(b.r[0]),         \
                   "r"(b.r[1]), "r"(b.r[2]), "r"(b.r[3]));                                  \
  }
KEEL_MMA(col, keel_mma_b_col)
KEEL_MMA(row, keel_mma_b_row)
#undef KEEL_MMA
inline void keel_mma_store(float* p, const keel_mma_acc& c, int ldm) {
  asm volatile("wmma.store.d.sync.aligned.row.m16n16k16.f32 [%0], {%1, %2, %3, %4, %5, %6, %7, "
               "%8}, %9;"
               :: "l"(p), "f"(c.r[0]), "f"(c.r[1]), "f"(c.r[2]), "f"(c.r[3]), "f"(c.r[4]),
                  "f"(c.r[5]), "f"(c.r[6]), "f"(c.r[7]), "r"(ldm) : "memory");
}
#endif

// Rows [0, rows) of a row-major f32 operand (rows `stride` apart, d elements each) as a bf16 tile
// of 16 rows (ld d), rows past `rows` zero; the warp's 32 lanes share the copy.
inline void keel_tile_load(uint16_t* tile, const float* src, int64_t stride, int rows, int d,
                           int lane) {
  for (int i = lane; i < 16 * d; i += 32) {
    const int r = i / d, c = i % d;
    tile[i] = r < rows ? keel_f2bf(src[r * stride + c]) : static_cast<uint16_t>(0);
  }
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
