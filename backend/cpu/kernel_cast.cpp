// cast between every pair of dtypes, elementwise, with docs/ops.md's rules: float -> int truncates
// toward zero and saturates (non-finite -> 0), -> bool is x != 0, int -> int wraps, int -> float
// rounds to f32 once (bf16 then rounds that f32).
#include "backend/cpu/kernel_ops.h"
#include "backend/cpu/kernel_util.h"

namespace keel::cpu::detail {
namespace {

template <class From, class To>
To convert(From x) {
  if constexpr (std::is_same_v<To, uint8_t>) {
    if constexpr (is_float_v<From>) {
      return widen(x) != 0.0 ? 1 : 0;  // NaN != 0, so NaN -> true
    } else {
      return x != 0 ? 1 : 0;
    }
  } else if constexpr (is_float_v<From> && is_float_v<To>) {
    if constexpr (std::is_same_v<From, To>) {
      return x;
    } else {
      return narrow_float<To>(widen(x));
    }
  } else if constexpr (is_float_v<From>) {
    return saturating_cast<To>(widen(x));
  } else if constexpr (is_float_v<To>) {
    return narrow_float<To>(static_cast<float>(widen(x)));
  } else {
    return static_cast<To>(widen(x));  // two's complement truncation to the target width
  }
}

template <class From, class To>
void cast_loop(const From* src, To* dst, int64_t n) {
  parallel_for(n, n, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) dst[i] = convert<From, To>(src[i]);
  });
}

}  // namespace

void cast(const keel_view* in, keel_view* out) {
  check_view(*in, "cast", "input");
  check_view(*out, "cast", "output");
  const int64_t n = numel(*in);
  if (n != numel(*out)) {
    fail("cast: input {} and output {} differ in element count", view_str(*in), view_str(*out));
  }
  if (n == 0) return;
  if (in->dtype == out->dtype && in->dtype != static_cast<int32_t>(DType::boolean)) {
    std::memcpy(out->data, in->data, static_cast<size_t>(n) * elem_size(*in));
    return;
  }
  dispatch(in->dtype, [&](auto from) {
    dispatch(out->dtype, [&](auto to) {
      using F = decltype(from);
      using T = decltype(to);
      cast_loop(static_cast<const F*>(in->data), static_cast<T*>(out->data), n);
    });
  });
}

}  // namespace keel::cpu::detail
