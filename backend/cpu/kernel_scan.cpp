// Kernels that walk one axis in order: cumsum and argmax. The input is seen as [outer, n, inner]
// around the axis; with inner > 1 a block of up to kScanLanes neighbouring columns advances
// together so the loads stay contiguous, otherwise each row is walked on its own.
#include <algorithm>

#include "backend/cpu/kernel_ops.h"
#include "backend/cpu/kernel_util.h"

namespace keel::cpu::detail {
namespace {

constexpr int64_t kScanLanes = 256;

struct Split {
  int64_t outer = 1, n = 1, inner = 1;
};

Split split_at(const keel_view& v, int32_t axis) {
  Split s;
  for (int d = 0; d < v.rank; ++d) {
    if (d < axis) s.outer *= v.shape[d];
    if (d == axis) s.n = v.shape[d];
    if (d > axis) s.inner *= v.shape[d];
  }
  return s;
}

// Calls f(o, c0, width) for every (outer row, block of columns), in parallel.
template <class F>
void for_blocks(const Split& s, F&& f) {
  const int64_t chunks = (s.inner + kScanLanes - 1) / kScanLanes;
  parallel_for(s.outer * chunks, s.outer * s.n * s.inner, [&](int64_t begin, int64_t end) {
    for (int64_t item = begin; item < end; ++item) {
      const int64_t c0 = (item % chunks) * kScanLanes;
      f(item / chunks, c0, std::min(kScanLanes, s.inner - c0));
    }
  });
}

// Running totals in double (floats) or wrapping int64; every output rounds once.
template <class T, class Acc>
T accumulate(Acc& acc, T x) {
  if constexpr (is_float_v<T>) {
    acc += widen(x);
    return narrow_float<T>(acc);
  } else {
    acc = wrap_add(acc, widen(x));
    return static_cast<T>(acc);
  }
}

template <class T>
void cumsum_typed(const T* src, T* dst, const Split& s, bool reverse) {
  using Acc = std::conditional_t<is_float_v<T>, double, int64_t>;
  if (s.inner == 1) {  // each row on its own: one running total
    parallel_for(s.outer, s.outer * s.n, [&](int64_t begin, int64_t end) {
      for (int64_t o = begin; o < end; ++o) {
        Acc acc = 0;
        for (int64_t step = 0; step < s.n; ++step) {
          const int64_t at = o * s.n + (reverse ? s.n - 1 - step : step);
          dst[at] = accumulate(acc, src[at]);
        }
      }
    });
    return;
  }
  for_blocks(s, [&](int64_t o, int64_t c0, int64_t width) {
    Acc acc[kScanLanes] = {};
    for (int64_t step = 0; step < s.n; ++step) {
      const int64_t at = (o * s.n + (reverse ? s.n - 1 - step : step)) * s.inner + c0;
      for (int64_t c = 0; c < width; ++c) dst[at + c] = accumulate(acc[c], src[at + c]);
    }
  });
}

// v replaces best when strictly larger; NaN is above everything, so the first NaN wins and ties
// keep the lowest index.
template <class V>
bool beats(V v, V best) {
  if constexpr (std::is_floating_point_v<V>) {
    return best == best && (v != v || v > best);
  } else {
    return v > best;
  }
}

// Two vectorisable passes over one row: the maximum (and whether a NaN occurs), then the first
// index holding it (or the first NaN). -0 == +0, so a zero maximum finds the first zero: a tie.
template <class T, class Load>
int64_t row_argmax(const T* row, int64_t n, Load load) {
  using V = decltype(load(row[0]));
  V m[8];
  std::fill(m, m + 8, load(row[0]));
  bool nan = false;
  int64_t j = 0;
  for (; j + 8 <= n; j += 8) {
    for (int l = 0; l < 8; ++l) {
      const V v = load(row[j + l]);
      m[l] = v > m[l] ? v : m[l];
      nan |= v != v;
    }
  }
  for (; j < n; ++j) {
    const V v = load(row[j]);
    m[0] = v > m[0] ? v : m[0];
    nan |= v != v;
  }
  for (int l = 1; l < 8; ++l) m[0] = m[l] > m[0] ? m[l] : m[0];
  for (j = 0; j < n; ++j) {
    const V v = load(row[j]);
    if (nan ? v != v : v == m[0]) return j;
  }
  return 0;
}

template <class T>
void argmax_typed(const T* src, int64_t* dst, const Split& s) {
  using V = std::conditional_t<is_float_v<T>, float, int64_t>;
  auto load = [](T x) { return static_cast<V>(widen(x)); };
  if (s.inner == 1) {  // each row on its own
    parallel_for(s.outer, s.outer * s.n, [&](int64_t begin, int64_t end) {
      for (int64_t o = begin; o < end; ++o) {
        dst[o] = row_argmax(src + o * s.n, s.n, load);
      }
    });
    return;
  }
  for_blocks(s, [&](int64_t o, int64_t c0, int64_t width) {
    V best[kScanLanes];
    int64_t at[kScanLanes] = {};
    const T* row = src + o * s.n * s.inner + c0;
    for (int64_t c = 0; c < width; ++c) best[c] = load(row[c]);
    for (int64_t j = 1; j < s.n; ++j) {
      const T* x = row + j * s.inner;
      for (int64_t c = 0; c < width; ++c) {
        const V v = load(x[c]);
        if (beats(v, best[c])) {
          best[c] = v;
          at[c] = j;
        }
      }
    }
    std::copy(at, at + width, dst + o * s.inner + c0);
  });
}

}  // namespace

void cumsum(const keel_view* in, keel_view* out, int32_t axis, int32_t reverse) {
  check_view(*in, "cumsum", "input");
  check_view(*out, "cumsum", "output");
  check_same_dtype(*in, *out, "cumsum");
  if (dims(*in) != dims(*out)) {
    fail("cumsum: output {} differs from input {}", view_str(*out), view_str(*in));
  }
  if (axis < 0 || axis >= in->rank) fail("cumsum: axis {} of {}", axis, view_str(*in));
  if (in->dtype == static_cast<int32_t>(DType::boolean)) fail("cumsum: bool is not a number");
  if (numel(*in) == 0) return;
  dispatch(in->dtype, [&](auto e) {
    using T = decltype(e);
    if constexpr (!std::is_same_v<T, uint8_t>) {
      cumsum_typed(static_cast<const T*>(in->data), static_cast<T*>(out->data), split_at(*in, axis),
                   reverse != 0);
    }
  });
}

void argmax(const keel_view* in, keel_view* out, int32_t axis) {
  check_view(*in, "argmax", "input");
  check_view(*out, "argmax", "output");
  if (axis < 0 || axis >= in->rank) fail("argmax: axis {} of {}", axis, view_str(*in));
  if (out->dtype != static_cast<int32_t>(DType::i64)) {
    fail("argmax: output {} must be i64", view_str(*out));
  }
  if (in->dtype == static_cast<int32_t>(DType::boolean)) fail("argmax: bool is not a number");
  const Split s = split_at(*in, axis);
  if (numel(*out) != s.outer * s.inner) {
    fail("argmax: input {} along axis {} does not give {}", view_str(*in), axis, view_str(*out));
  }
  if (numel(*out) == 0) return;
  if (s.n == 0) fail("argmax: axis {} of {} is empty", axis, view_str(*in));
  dispatch(in->dtype, [&](auto e) {
    using T = decltype(e);
    if constexpr (!std::is_same_v<T, uint8_t>) {
      argmax_typed(static_cast<const T*>(in->data), static_cast<int64_t*>(out->data), s);
    }
  });
}

}  // namespace keel::cpu::detail
