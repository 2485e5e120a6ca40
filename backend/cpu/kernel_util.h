#pragma once
// Internal helpers shared by the kernel files: views, dtype dispatch, bf16 rounding, errors and the
// size threshold below which loops stay serial.
#include <fmt/format.h>
#include <omp.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <memory>
#include <type_traits>
#include <vector>

#include "backend/cpu/abi.h"
#include "ir/convert.h"
#include "ir/dtype.h"
#include "ir/error.h"

namespace keel::cpu::detail {

// Below this many elements a loop runs serially: an OpenMP fork/join costs a few microseconds.
constexpr int64_t kParallelMin = 1 << 16;

// Runs f(begin, end) over [0, n) split evenly across the OpenMP team, or serially when `work`
// (elements touched) is small or we are already inside a parallel region.
template <class F>
void parallel_for(int64_t n, int64_t work, F&& f) {
  if (n <= 0) return;
  if (n == 1 || work < kParallelMin || omp_in_parallel() || omp_get_max_threads() == 1) {
    f(int64_t{0}, n);
    return;
  }
#pragma omp parallel
  {
    const int64_t t = omp_get_thread_num(), nt = omp_get_num_threads();
    const int64_t begin = n * t / nt, end = n * (t + 1) / nt;
    if (begin < end) f(begin, end);
  }
}

template <class... Args>
[[noreturn]] void fail(fmt::format_string<Args...> f, Args&&... args) {
  throw Error("[backend.cpu] " + fmt::format(f, std::forward<Args>(args)...));
}

// Hot loops compiled once per ISA level and picked at load time (libkeel itself is built for the
// baseline ISA); every clone computes the same values. The sanitizer tree builds one: it checks
// memory and UB, not ISA dispatch, and three clones took its attention sources 124 s to compile.
#if defined(__x86_64__) && !defined(KEEL_ONE_ISA_CLONE)
#define KEEL_CPU_CLONES \
  __attribute__((target_clones("default", "arch=x86-64-v3", "arch=x86-64-v4")))
#else
#define KEEL_CPU_CLONES
#endif

// Storage: f32 float, bf16 bf16_t (the top half of an f32), i32, i64, bool one byte of 0 / 1.
struct bf16_t {
  uint16_t bits;
};
inline float bf16_load(bf16_t b) {
  return std::bit_cast<float>(static_cast<uint32_t>(b.bits) << 16);
}
// Round to nearest even; NaN stays a quiet NaN (same bits as keel::f32_to_bf16). Branch-free,
// so loops over it vectorize; the bits in the low half of a 32-bit word, which is how the
// loops that pair two of them (AMX operands) want them.
inline uint32_t bf16_bits(float f) {
  const uint32_t u = std::bit_cast<uint32_t>(f);
  const uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
  return (u & 0x7fffffffu) > 0x7f800000u ? ((u >> 16) | 0x40u) : rounded;
}
inline bf16_t bf16_store(float f) {
  return {static_cast<uint16_t>(bf16_bits(f))};
}

// Calls f(T{}) with T the storage type of `dtype`.
template <class F>
decltype(auto) dispatch(int32_t dtype, F&& f) {
  switch (static_cast<DType>(dtype)) {
    case DType::f32:
      return f(float{});
    case DType::bf16:
      return f(bf16_t{});
    case DType::i32:
      return f(int32_t{});
    case DType::i64:
      return f(int64_t{});
    case DType::boolean:
      return f(uint8_t{});
  }
  fail("dtype code {} is not a keel dtype", dtype);
}

template <class T>
constexpr bool is_bf16_v = std::is_same_v<T, bf16_t>;
template <class T>
constexpr bool is_float_v = std::is_same_v<T, float> || is_bf16_v<T>;

// Element <-> the wide type computations use: double for floats, int64 for ints and bool.
template <class T>
inline auto widen(T v) {
  if constexpr (std::is_same_v<T, float>) {
    return static_cast<double>(v);
  } else if constexpr (is_bf16_v<T>) {
    return static_cast<double>(bf16_load(v));
  } else if constexpr (std::is_same_v<T, uint8_t>) {
    return static_cast<int64_t>(v != 0);
  } else {
    return static_cast<int64_t>(v);
  }
}
template <class T>
inline T narrow_float(double v) {
  if constexpr (is_bf16_v<T>) {
    return bf16_store(static_cast<float>(v));
  } else {
    return static_cast<float>(v);
  }
}

// A value given as a double (pad's fill) stored like Array::set_f64: floats round, ints truncate
// and saturate with non-finite giving 0, bool is v != 0.
template <class T>
T from_double(double v) {
  if constexpr (is_float_v<T>) {
    return narrow_float<T>(v);
  } else if constexpr (std::is_same_v<T, uint8_t>) {
    return v != 0.0 ? 1 : 0;
  } else {
    return saturating_cast<T>(v);
  }
}

// Two's complement wrapping without signed-overflow undefined behaviour.
inline int64_t wrap_add(int64_t a, int64_t b) {
  return static_cast<int64_t>(static_cast<uint64_t>(a) + static_cast<uint64_t>(b));
}

inline int64_t numel(const keel_view& v) {
  int64_t n = 1;
  for (int32_t d = 0; d < v.rank; ++d) n *= v.shape[d];
  return n;
}
inline size_t elem_size(const keel_view& v) {
  return dtype_size(static_cast<DType>(v.dtype));
}
inline std::vector<int64_t> dims(const keel_view& v) {
  return {v.shape, v.shape + v.rank};
}
std::string view_str(const keel_view& v);  // "f32[2,3]"

// Rejects a view the ABI cannot describe: unknown dtype, rank outside [0, 8], a negative dim,
// or strides where the kernel reads row-major only.
void check_view(const keel_view& v, const char* op, const char* what, bool strided_ok = false);
void check_same_dtype(const keel_view& a, const keel_view& b, const char* op);

// An uninitialised, 64-byte aligned scratch buffer (std::vector would zero-fill it first).
class Scratch {
 public:
  explicit Scratch(size_t bytes)
      : p_(static_cast<std::byte*>(std::aligned_alloc(64, (bytes + 64) / 64 * 64))) {
    if (!p_) fail("out of memory allocating {} bytes of scratch", bytes);
  }
  template <class T>
  T* as() const {
    return reinterpret_cast<T*>(p_.get());
  }

 private:
  struct Free {
    void operator()(std::byte* p) const { std::free(p); }
  };
  std::unique_ptr<std::byte, Free> p_;
};

}  // namespace keel::cpu::detail
