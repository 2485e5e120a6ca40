#pragma once
// Internal: one entry point per op family. Each receives a node whose type infer_type has already
// confirmed for these inputs, so kernels may trust shapes and attributes.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <span>
#include <string>

#include "ir/array.h"
#include "ir/graph.h"

namespace keel::ref {

Array eval_leaf(const Node& node);  // constant, iota
Array eval_rng(const Node& node, std::span<const Array> in);
Array eval_unary(const Node& node, const Array& x);
Array eval_binary(const Node& node, const Array& a, const Array& b);
Array eval_compare(const Node& node, const Array& a, const Array& b);
Array eval_select(const Node& node, const Array& p, const Array& a, const Array& b);
Array eval_cast(const Node& node, const Array& x);
Array eval_layout(const Node& node, std::span<const Array> in);
Array eval_index(const Node& node, std::span<const Array> in);
Array eval_reduce(const Node& node, const Array& x);  // reduce_*, argmax
Array eval_cumsum(const Node& node, const Array& x);
Array eval_top_k(const Node& node, const Array& x);
Array eval_dot(const Node& node, const Array& lhs, const Array& rhs);
// attention, attention_lse, attention_dq / _dk / _dv (ir/attention.h).
Array eval_attention(const Node& node, std::span<const Array> in);
// sparse_attention and its gradient and weights ops (ir/sparse_attention.h).
Array eval_sparse_attention(const Node& node, std::span<const Array> in);

[[noreturn]] void fail(const Node& node, const std::string& msg);  // throws "[ref] op at loc: msg"

// Integer arithmetic wraps (two's complement) instead of overflowing into undefined behaviour.
inline int64_t wrap_add(int64_t a, int64_t b) {
  return static_cast<int64_t>(static_cast<uint64_t>(a) + static_cast<uint64_t>(b));
}
inline int64_t wrap_sub(int64_t a, int64_t b) {
  return static_cast<int64_t>(static_cast<uint64_t>(a) - static_cast<uint64_t>(b));
}
inline int64_t wrap_mul(int64_t a, int64_t b) {
  return static_cast<int64_t>(static_cast<uint64_t>(a) * static_cast<uint64_t>(b));
}

// max/min propagate NaN and order -0 below +0 (IEEE 754-2019 maximum/minimum).
inline double float_max(double x, double y) {
  if (std::isnan(x) || std::isnan(y)) return std::numeric_limits<double>::quiet_NaN();
  if (x == y) return std::signbit(x) ? y : x;
  return x > y ? x : y;
}
inline double float_min(double x, double y) {
  if (std::isnan(x) || std::isnan(y)) return std::numeric_limits<double>::quiet_NaN();
  if (x == y) return std::signbit(x) ? x : y;
  return x < y ? x : y;
}

// Copies element j of `src` to element i of `dst` (same dtype) bit for bit.
inline void copy_element(Array& dst, int64_t i, const Array& src, int64_t j) {
  const size_t n = dtype_size(dst.dtype());
  std::memcpy(dst.data() + i * n, src.data() + j * n, n);
}

}  // namespace keel::ref
