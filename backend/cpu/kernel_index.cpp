// Index kernels: gather (numpy take), scatter_add (its inverse) and one_hot. Indices are i32 or
// i64 and clamp to [0, n-1]. An operand is seen as [outer, n, inner] around `axis`, indices as a
// flat list of m, and gather's output / scatter's updates as [outer, m, inner].
#include <algorithm>

#include "backend/cpu/kernel_ops.h"
#include "backend/cpu/kernel_util.h"

namespace keel::cpu::detail {
namespace {

struct Take {
  int64_t outer = 1, n = 1, inner = 1, m = 1;
};

// Checks operand / indices / the indexed view (gather's output, scatter's updates) agree.
Take check_take(const keel_view& operand, const keel_view& indices, const keel_view& indexed,
                int32_t axis, const char* op) {
  check_view(operand, op, "operand");
  check_view(indices, op, "indices");
  check_view(indexed, op, "output");
  check_same_dtype(operand, indexed, op);
  if (indices.dtype != static_cast<int32_t>(DType::i32) &&
      indices.dtype != static_cast<int32_t>(DType::i64)) {
    fail("{}: indices {} must be i32 or i64", op, view_str(indices));
  }
  if (axis < 0 || axis >= operand.rank) fail("{}: axis {} of {}", op, axis, view_str(operand));
  Take t;
  t.m = numel(indices);
  bool ok = indexed.rank == operand.rank - 1 + indices.rank;
  for (int d = 0; ok && d < indexed.rank; ++d) {
    int64_t want = d < axis                  ? operand.shape[d]
                   : d < axis + indices.rank ? indices.shape[d - axis]
                                             : operand.shape[d - indices.rank + 1];
    ok = indexed.shape[d] == want;
  }
  if (!ok) {
    fail("{}: operand {} with indices {} along axis {} does not give {}", op, view_str(operand),
         view_str(indices), axis, view_str(indexed));
  }
  for (int d = 0; d < operand.rank; ++d) {
    if (d < axis) t.outer *= operand.shape[d];
    if (d > axis) t.inner *= operand.shape[d];
  }
  t.n = operand.shape[axis];
  return t;
}

// The clamped indices as int64, read once.
std::vector<int64_t> clamped(const keel_view& indices, int64_t n) {
  std::vector<int64_t> out(static_cast<size_t>(numel(indices)));
  for (size_t j = 0; j < out.size(); ++j) {
    const int64_t v = indices.dtype == static_cast<int32_t>(DType::i32)
                          ? static_cast<const int32_t*>(indices.data)[j]
                          : static_cast<const int64_t*>(indices.data)[j];
    out[j] = std::clamp<int64_t>(v, 0, n - 1);
  }
  return out;
}

template <class T>
void gather_rows(const T* src, T* dst, const Take& t, const std::vector<int64_t>& idx) {
  const int64_t inner = t.inner;
  parallel_for(t.outer * t.m, t.outer * t.m * inner, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const T* s = src + ((r / t.m) * t.n + idx[r % t.m]) * inner;
      T* d = dst + r * inner;
      for (int64_t k = 0; k < inner; ++k) d[k] = s[k];
    }
  });
}

// Every output row (o, p) is owned by one thread: it starts from the operand row and adds, in
// increasing j, the update rows whose index is p. Deterministic, and the same order as the
// reference. Floats accumulate in double and round once; ints wrap.
template <class T>
void scatter_rows(const T* operand, const T* updates, T* out, const Take& t,
                  const std::vector<int64_t>& idx) {
  std::vector<int64_t> first(static_cast<size_t>(t.n + 1), 0), order(idx.size());
  for (int64_t p : idx) ++first[p + 1];
  for (int64_t p = 0; p < t.n; ++p) first[p + 1] += first[p];
  std::vector<int64_t> fill(first.begin(), first.end() - 1);
  for (size_t j = 0; j < idx.size(); ++j) order[fill[idx[j]]++] = static_cast<int64_t>(j);

  constexpr int64_t kCols = 2048;  // a chunk's double accumulators stay in L1
  const int64_t chunks = (t.inner + kCols - 1) / kCols;
  const int64_t work = t.outer * (t.n + t.m) * t.inner;
  parallel_for(t.outer * t.n * chunks, work, [&](int64_t begin, int64_t end) {
    double acc[kCols];
    for (int64_t item = begin; item < end; ++item) {
      const int64_t row = item / chunks, k0 = (item % chunks) * kCols;
      const int64_t k1 = std::min(t.inner, k0 + kCols);
      const int64_t o = row / t.n, p = row % t.n;
      const T* base = operand + row * t.inner;
      T* dst = out + row * t.inner;
      if constexpr (is_float_v<T>) {
        for (int64_t k = k0; k < k1; ++k) acc[k - k0] = widen(base[k]);
      } else {
        for (int64_t k = k0; k < k1; ++k) dst[k] = base[k];
      }
      for (int64_t e = first[p]; e < first[p + 1]; ++e) {
        const T* u = updates + (o * t.m + order[e]) * t.inner;
        if constexpr (is_float_v<T>) {
          for (int64_t k = k0; k < k1; ++k) acc[k - k0] += widen(u[k]);
        } else {
          using U = std::make_unsigned_t<T>;
          for (int64_t k = k0; k < k1; ++k) dst[k] = static_cast<T>(U(dst[k]) + U(u[k]));
        }
      }
      if constexpr (is_float_v<T>) {
        for (int64_t k = k0; k < k1; ++k) dst[k] = narrow_float<T>(acc[k - k0]);
      }
    }
  });
}

}  // namespace

int64_t gather_scratch(const keel_view* indices) {
  return numel(*indices) * 8;
}

int64_t scatter_add_scratch(const keel_view* operand, const keel_view* indices, int32_t axis) {
  const int64_t n = axis >= 0 && axis < operand->rank ? operand->shape[axis] : 0;
  return (2 * numel(*indices) + 2 * n + 1) * 8;  // indices, order; first, fill
}

void gather(const keel_view* operand, const keel_view* indices, keel_view* out, int32_t axis) {
  const Take t = check_take(*operand, *indices, *out, axis, "gather");
  if (numel(*out) == 0) return;
  if (t.n == 0) {
    fail("gather: cannot take {} indices from empty axis {} of {}", t.m, axis, view_str(*operand));
  }
  const std::vector<int64_t> idx = clamped(*indices, t.n);
  dispatch(out->dtype, [&](auto e) {
    using T = decltype(e);
    gather_rows(static_cast<const T*>(operand->data), static_cast<T*>(out->data), t, idx);
  });
}

void scatter_add(const keel_view* operand, const keel_view* indices, const keel_view* updates,
                 keel_view* out, int32_t axis) {
  const Take t = check_take(*operand, *indices, *updates, axis, "scatter_add");
  check_view(*out, "scatter_add", "output");
  check_same_dtype(*operand, *out, "scatter_add");
  if (dims(*out) != dims(*operand)) {
    fail("scatter_add: output {} differs from operand {}", view_str(*out), view_str(*operand));
  }
  if (out->dtype == static_cast<int32_t>(DType::boolean)) fail("scatter_add: bool is not a number");
  if (numel(*out) == 0) return;  // an empty axis has no positions to add to
  const std::vector<int64_t> idx = clamped(*indices, t.n);
  dispatch(out->dtype, [&](auto e) {
    using T = decltype(e);
    if constexpr (!std::is_same_v<T, uint8_t>) {
      scatter_rows(static_cast<const T*>(operand->data), static_cast<const T*>(updates->data),
                   static_cast<T*>(out->data), t, idx);
    }
  });
}

void one_hot(const keel_view* indices, keel_view* out) {
  check_view(*indices, "one_hot", "indices");
  check_view(*out, "one_hot", "output");
  if (indices->dtype != static_cast<int32_t>(DType::i32) &&
      indices->dtype != static_cast<int32_t>(DType::i64)) {
    fail("one_hot: indices {} must be i32 or i64", view_str(*indices));
  }
  bool ok = out->rank == indices->rank + 1;
  for (int d = 0; ok && d < indices->rank; ++d) ok = out->shape[d] == indices->shape[d];
  if (!ok) fail("one_hot: indices {} do not give {}", view_str(*indices), view_str(*out));
  const int64_t depth = out->shape[out->rank - 1], m = numel(*indices);
  if (m * depth == 0) return;
  dispatch(out->dtype, [&](auto e) {
    using T = decltype(e);
    const T one = from_double<T>(1.0);
    T* dst = static_cast<T*>(out->data);
    const bool i32 = indices->dtype == static_cast<int32_t>(DType::i32);
    parallel_for(m, m * depth, [&](int64_t begin, int64_t end) {
      std::memset(static_cast<void*>(dst + begin * depth), 0,
                  static_cast<size_t>((end - begin) * depth) * sizeof(T));
      for (int64_t k = begin; k < end; ++k) {
        const int64_t v = i32 ? static_cast<const int32_t*>(indices->data)[k]
                              : static_cast<const int64_t*>(indices->data)[k];
        if (v >= 0 && v < depth) dst[k * depth + v] = one;
      }
    });
  });
}

}  // namespace keel::cpu::detail
