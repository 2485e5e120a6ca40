#pragma once
// The op functions users write programs with. Each records its call site; a plain C++ number
// becomes a constant that keeps its source line (use keel::Scalar for values that change).
#include <type_traits>
#include <utility>
#include <vector>

#include "ir/attention.h"
#include "trace/scalar.h"
#include "trace/tensor.h"

namespace keel {

using Axes = std::vector<int64_t>;
#define KEEL_HERE ::keel::SourceLoc::current()

// Operand wrappers that capture the call site of an operator expression.
struct At {
  const Tensor& t;
  SourceLoc loc;
  At(const Tensor& t, SourceLoc loc = SourceLoc::current()) : t(t), loc(std::move(loc)) {}
};
struct Num {
  double v;
  SourceLoc loc;
  template <class T>
  requires std::is_arithmetic_v<T> Num(T v, SourceLoc loc = SourceLoc::current())
      : v(static_cast<double>(v)), loc(std::move(loc)) {}
};

// Leaves.
Tensor constant(const Array& value, SourceLoc loc = KEEL_HERE);
Tensor full(const Shape& shape, double value, DType dtype = DType::f32, SourceLoc loc = KEEL_HERE);
Tensor zeros_like(const Tensor& x, SourceLoc loc = KEEL_HERE);
Tensor iota(const Shape& shape, int64_t dim, DType dtype = DType::i64, SourceLoc loc = KEEL_HERE);
// Uniform [0, 1) from a counter-based generator; seed and counter are i64 scalar tensors.
Tensor rng_uniform(const Tensor& seed, const Tensor& counter, const Shape& shape,
                   DType dtype = DType::f32, SourceLoc loc = KEEL_HERE);

// Elementwise.
Tensor neg(const Tensor& x, SourceLoc loc = KEEL_HERE);
Tensor abs(const Tensor& x, SourceLoc loc = KEEL_HERE);
Tensor exp(const Tensor& x, SourceLoc loc = KEEL_HERE);
Tensor log(const Tensor& x, SourceLoc loc = KEEL_HERE);
Tensor tanh(const Tensor& x, SourceLoc loc = KEEL_HERE);
Tensor sqrt(const Tensor& x, SourceLoc loc = KEEL_HERE);
Tensor rsqrt(const Tensor& x, SourceLoc loc = KEEL_HERE);
Tensor sigmoid(const Tensor& x, SourceLoc loc = KEEL_HERE);
Tensor erf(const Tensor& x, SourceLoc loc = KEEL_HERE);
Tensor sin(const Tensor& x, SourceLoc loc = KEEL_HERE);
Tensor cos(const Tensor& x, SourceLoc loc = KEEL_HERE);
Tensor stop_gradient(const Tensor& x, SourceLoc loc = KEEL_HERE);
Tensor add(const Tensor& a, const Tensor& b, SourceLoc loc = KEEL_HERE);
Tensor sub(const Tensor& a, const Tensor& b, SourceLoc loc = KEEL_HERE);
Tensor mul(const Tensor& a, const Tensor& b, SourceLoc loc = KEEL_HERE);
Tensor div(const Tensor& a, const Tensor& b, SourceLoc loc = KEEL_HERE);
Tensor maximum(const Tensor& a, const Tensor& b, SourceLoc loc = KEEL_HERE);
Tensor minimum(const Tensor& a, const Tensor& b, SourceLoc loc = KEEL_HERE);
Tensor pow(const Tensor& a, const Tensor& b, SourceLoc loc = KEEL_HERE);
Tensor compare(const Tensor& a, const Tensor& b, CompareDir dir, SourceLoc loc = KEEL_HERE);
Tensor eq(const Tensor& a, const Tensor& b, SourceLoc loc = KEEL_HERE);
Tensor ne(const Tensor& a, const Tensor& b, SourceLoc loc = KEEL_HERE);
Tensor lt(const Tensor& a, const Tensor& b, SourceLoc loc = KEEL_HERE);
Tensor le(const Tensor& a, const Tensor& b, SourceLoc loc = KEEL_HERE);
Tensor gt(const Tensor& a, const Tensor& b, SourceLoc loc = KEEL_HERE);
Tensor ge(const Tensor& a, const Tensor& b, SourceLoc loc = KEEL_HERE);
Tensor select(const Tensor& pred, const Tensor& a, const Tensor& b, SourceLoc loc = KEEL_HERE);
Tensor cast(const Tensor& x, DType dtype, SourceLoc loc = KEEL_HERE);

Tensor operator+(At a, At b);
Tensor operator-(At a, At b);
Tensor operator*(At a, At b);
Tensor operator/(At a, At b);
Tensor operator+(At a, Num b);
Tensor operator-(At a, Num b);
Tensor operator*(At a, Num b);
Tensor operator/(At a, Num b);
Tensor operator+(Num a, At b);
Tensor operator-(Num a, At b);
Tensor operator*(Num a, At b);
Tensor operator/(Num a, At b);
Tensor operator-(At a);

// Layout. Negative axes count from the end; reshape accepts one -1.
Tensor reshape(const Tensor& x, const Shape& shape, SourceLoc loc = KEEL_HERE);
Tensor transpose(const Tensor& x, const Axes& perm, SourceLoc loc = KEEL_HERE);
Tensor broadcast_to(const Tensor& x, const Shape& shape, SourceLoc loc = KEEL_HERE);
Tensor slice(const Tensor& x, const Axes& start, const Axes& limit, const Axes& stride = {},
             SourceLoc loc = KEEL_HERE);
Tensor concat(const std::vector<Tensor>& xs, int64_t axis, SourceLoc loc = KEEL_HERE);
Tensor pad(const Tensor& x, const Axes& low, const Axes& high, double value = 0.0,
           SourceLoc loc = KEEL_HERE);

// Indexing.
Tensor take(const Tensor& operand, const Tensor& indices, int64_t axis = 0,
            SourceLoc loc = KEEL_HERE);
Tensor scatter_add(const Tensor& operand, const Tensor& indices, const Tensor& updates,
                   int64_t axis = 0, SourceLoc loc = KEEL_HERE);
Tensor one_hot(const Tensor& indices, int64_t depth, DType dtype = DType::f32,
               SourceLoc loc = KEEL_HERE);

// Reductions; empty `axes` means all axes.
Tensor sum(const Tensor& x, const Axes& axes = {}, bool keepdims = false,
           SourceLoc loc = KEEL_HERE);
Tensor max(const Tensor& x, const Axes& axes = {}, bool keepdims = false,
           SourceLoc loc = KEEL_HERE);
Tensor mean(const Tensor& x, const Axes& axes = {}, bool keepdims = false,
            SourceLoc loc = KEEL_HERE);
Tensor argmax(const Tensor& x, int64_t axis, bool keepdims = false, SourceLoc loc = KEEL_HERE);
Tensor cumsum(const Tensor& x, int64_t axis, bool reverse = false, SourceLoc loc = KEEL_HERE);
// The k largest along the last axis, descending, and their i64 indices.
std::pair<Tensor, Tensor> top_k(const Tensor& x, int64_t k, SourceLoc loc = KEEL_HERE);

// Contractions.
struct DotDims {
  Axes lhs_batch, rhs_batch, lhs_contract, rhs_contract;
};
Tensor dot_general(const Tensor& a, const Tensor& b, const DotDims& dims,
                   SourceLoc loc = KEEL_HERE);
// a[..., m, k] @ b[..., k, n] with equal batch dims, or b[k, n] shared across a's batch.
Tensor matmul(const Tensor& a, const Tensor& b, SourceLoc loc = KEEL_HERE);

// Fused causal attention (ir/attention.h): q [B, H, T, D], k and v [B, KV, T, D] with H a
// multiple of KV, scores scale · q·k; with `doc_ids` [B, T] (i32/i64, or undefined for none) a
// query sees only keys of its own document. Returns [B, H, T, D]; never builds T x T. In layout
// bthd every operand and the result are [B, T, H, D] instead.
Tensor causal_attention(const Tensor& q, const Tensor& k, const Tensor& v, double scale,
                        const Tensor& doc_ids = Tensor(),
                        AttentionLayout layout = AttentionLayout::bhtd, SourceLoc loc = KEEL_HERE);

}  // namespace keel
