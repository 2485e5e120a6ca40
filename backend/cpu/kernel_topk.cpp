// top_k along the last axis: the k largest, descending, ties by lower index, NaN above every
// number. A partial sort per row (O(n log k)) with rows in parallel; values are copied bit for bit.
#include <algorithm>
#include <numeric>

#include "backend/cpu/kernel_ops.h"
#include "backend/cpu/kernel_util.h"

namespace keel::cpu::detail {
namespace {

template <class T>
void top_k_typed(const T* src, T* values, int64_t* indices, int64_t rows, int64_t n, int64_t k) {
  using V = std::conditional_t<is_float_v<T>, float, int64_t>;
  parallel_for(rows, rows * n * 4, [&](int64_t begin, int64_t end) {
    std::vector<V> key(static_cast<size_t>(n));
    std::vector<int64_t> order(static_cast<size_t>(n));
    // A strict total order: larger first, NaN largest, equal values by index.
    auto before = [&](int64_t a, int64_t b) {
      const V x = key[a], y = key[b];
      if constexpr (std::is_floating_point_v<V>) {
        const bool xn = x != x, yn = y != y;
        if (xn || yn) return xn != yn ? xn : a < b;
      }
      return x != y ? x > y : a < b;
    };
    for (int64_t r = begin; r < end; ++r) {
      const T* row = src + r * n;
      for (int64_t i = 0; i < n; ++i) key[i] = static_cast<V>(widen(row[i]));
      std::iota(order.begin(), order.end(), int64_t{0});
      std::partial_sort(order.begin(), order.begin() + k, order.end(), before);
      for (int64_t j = 0; j < k; ++j) {
        if (values) values[r * k + j] = row[order[j]];
        if (indices) indices[r * k + j] = order[j];
      }
    }
  });
}

void check_out(const keel_view& in, const keel_view& out, int64_t k, const char* what) {
  check_view(out, "top_k", what);
  bool ok = out.rank == in.rank;
  for (int d = 0; ok && d < in.rank; ++d) {
    ok = out.shape[d] == (d == in.rank - 1 ? k : in.shape[d]);
  }
  if (!ok) fail("top_k: {} of {} with k = {} cannot be {}", what, view_str(in), k, view_str(out));
}

}  // namespace

int64_t top_k_scratch(const keel_view* in) {
  const int64_t n = in->rank > 0 ? in->shape[in->rank - 1] : 0;
  const int64_t key = in->dtype == static_cast<int32_t>(DType::f32) ||
                              in->dtype == static_cast<int32_t>(DType::bf16)
                          ? 4
                          : 8;
  return (key + 8) * n * omp_get_num_procs();  // per thread, at most
}

void top_k(const keel_view* in, keel_view* values, keel_view* indices, int64_t k) {
  check_view(*in, "top_k", "input");
  if (in->rank < 1) fail("top_k: input {} needs rank >= 1", view_str(*in));
  if (in->dtype == static_cast<int32_t>(DType::boolean)) fail("top_k: bool is not a number");
  const int64_t n = in->shape[in->rank - 1];
  if (k < 1 || k > n) fail("top_k: k = {} must be in [1, {}] for {}", k, n, view_str(*in));
  if (values) {
    check_out(*in, *values, k, "values");
    check_same_dtype(*in, *values, "top_k");
  }
  if (indices) {
    check_out(*in, *indices, k, "indices");
    if (indices->dtype != static_cast<int32_t>(DType::i64)) {
      fail("top_k: indices {} must be i64", view_str(*indices));
    }
  }
  const int64_t rows = numel(*in) / n;
  if (rows == 0 || (!values && !indices)) return;
  dispatch(in->dtype, [&](auto e) {
    using T = decltype(e);
    if constexpr (!std::is_same_v<T, uint8_t>) {
      top_k_typed(static_cast<const T*>(in->data), values ? static_cast<T*>(values->data) : nullptr,
                  indices ? static_cast<int64_t*>(indices->data) : nullptr, rows, n, k);
    }
  });
}

}  // namespace keel::cpu::detail
