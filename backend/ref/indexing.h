#pragma once
// Multi-index helpers shared by the reference kernels; plain loops, no cleverness.
#include <cstdint>
#include <vector>

#include "ir/shape.h"

namespace keel::ref {

using Index = std::vector<int64_t>;

// Steps `idx` to the next row-major index of `shape`; false once it wraps past the end.
inline bool next_index(Index& idx, const Shape& shape) {
  for (size_t d = shape.size(); d-- > 0;) {
    if (++idx[d] < shape[d]) return true;
    idx[d] = 0;
  }
  return false;
}

// Calls f(idx, flat) for every index of `shape` in row-major order (once for a scalar).
template <class F>
void for_each_index(const Shape& shape, F&& f) {
  if (numel(shape) == 0) return;
  Index idx(shape.size(), 0);
  int64_t flat = 0;
  do {
    f(static_cast<const Index&>(idx), flat++);
  } while (next_index(idx, shape));
}

// Row-major flat offset of `idx` in `shape`.
inline int64_t flat_offset(const Index& idx, const Shape& shape) {
  int64_t off = 0;
  for (size_t d = 0; d < shape.size(); ++d) off = off * shape[d] + idx[d];
  return off;
}

// Flat offset in `in` of the element that numpy broadcasting maps to `out_idx` of a larger
// shape: dims align right and size-1 dims of `in` always read index 0.
inline int64_t broadcast_offset(const Index& out_idx, const Shape& in) {
  size_t lead = out_idx.size() - in.size();
  int64_t off = 0;
  for (size_t d = 0; d < in.size(); ++d) off = off * in[d] + (in[d] == 1 ? 0 : out_idx[lead + d]);
  return off;
}

// A shape seen as [outer, n, inner] around one axis: element (o, j, k) sits at (o * n + j) * inner
// + k, and (o, k) is the flat offset of the same position once `axis` is removed or kept as 1.
struct AxisSplit {
  int64_t outer = 1, n = 1, inner = 1;
  int64_t at(int64_t o, int64_t j, int64_t k) const { return (o * n + j) * inner + k; }
};

inline AxisSplit split_at(const Shape& shape, int64_t axis) {
  AxisSplit s;
  for (int64_t d = 0; d < static_cast<int64_t>(shape.size()); ++d) {
    if (d < axis) s.outer *= shape[d];
    if (d == axis) s.n = shape[d];
    if (d > axis) s.inner *= shape[d];
  }
  return s;
}

}  // namespace keel::ref
