// Kernels that make values from shapes alone: iota and rng_uniform.
#include "backend/cpu/kernel_ops.h"
#include "backend/cpu/kernel_util.h"
#include "ir/rng.h"

namespace keel::cpu::detail {
namespace {

int64_t read_i64_scalar(const keel_view& v, const char* what) {
  check_view(v, "rng_uniform", what);
  if (v.dtype != static_cast<int32_t>(DType::i64) || numel(v) != 1) {
    fail("rng_uniform: {} {} must be an i64 scalar", what, view_str(v));
  }
  return *static_cast<const int64_t*>(v.data);
}

}  // namespace

// Output seen as [outer, n, inner] around `dim`: each row of `inner` holds its coordinate j.
void iota(keel_view* out, int32_t dim) {
  check_view(*out, "iota", "output");
  if (dim < 0 || dim >= out->rank) fail("iota: dim {} of {}", dim, view_str(*out));
  if (out->dtype == static_cast<int32_t>(DType::boolean)) fail("iota: cannot produce bool");
  int64_t n = out->shape[dim], inner = 1;
  for (int d = dim + 1; d < out->rank; ++d) inner *= out->shape[d];
  const int64_t total = numel(*out);
  if (total == 0) return;
  dispatch(out->dtype, [&](auto e) {
    using T = decltype(e);
    T* dst = static_cast<T*>(out->data);
    parallel_for(total / inner, total, [&](int64_t begin, int64_t end) {
      for (int64_t row = begin; row < end; ++row) {
        const int64_t j = row % n;
        T v;
        if constexpr (is_float_v<T>) {
          v = narrow_float<T>(static_cast<double>(j));
        } else {
          v = static_cast<T>(j);
        }
        std::fill(dst + row * inner, dst + (row + 1) * inner, v);
      }
    });
  });
}

// Element i is keel::rng_uniform01(seed, counter, i); bf16 rounds that f32 to nearest even.
void rng_uniform(const keel_view* seed, const keel_view* counter, keel_view* out) {
  const auto s = static_cast<uint64_t>(read_i64_scalar(*seed, "seed"));
  const auto c = static_cast<uint64_t>(read_i64_scalar(*counter, "counter"));
  check_view(*out, "rng_uniform", "output");
  const int64_t n = numel(*out);
  const bool bf16 = out->dtype == static_cast<int32_t>(DType::bf16);
  if (!bf16 && out->dtype != static_cast<int32_t>(DType::f32)) {
    fail("rng_uniform: output {} must be f32 or bf16", view_str(*out));
  }
  parallel_for(n, n * 8, [&](int64_t begin, int64_t end) {
    if (bf16) {
      auto* dst = static_cast<bf16_t*>(out->data);
      for (int64_t i = begin; i < end; ++i) {
        dst[i] = bf16_store(rng_uniform01(s, c, static_cast<uint64_t>(i)));
      }
    } else {
      auto* dst = static_cast<float*>(out->data);
      for (int64_t i = begin; i < end; ++i) dst[i] = rng_uniform01(s, c, static_cast<uint64_t>(i));
    }
  });
}

}  // namespace keel::cpu::detail
