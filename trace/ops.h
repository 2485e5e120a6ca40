#pragma once
/// @file
/// The op functions users write programs with. Each records its call site; a plain C++ number
/// becomes a constant that keeps its source line (use keel::Scalar for values that change).
#include <type_traits>
#include <utility>
#include <vector>

#include "ir/attention.h"
#include "trace/scalar.h"
#include "trace/tensor.h"

namespace keel {

/// Axis indices, or per-axis sizes and offsets; negative axes count from the end.
using Axes = std::vector<int64_t>;
/// The call site: the default `loc` of every op function.
#define KEEL_HERE ::keel::SourceLoc::current()

/// Operand wrappers that capture the call site of an operator expression.
struct At {
  const Tensor& t;  ///< the operand
  SourceLoc loc;    ///< where the expression was written
  /// Wraps `t`; `loc` is the caller's line.
  At(const Tensor& t, SourceLoc loc = SourceLoc::current()) : t(t), loc(std::move(loc)) {}
};
/// A plain C++ number in an operator expression: it becomes a constant of the other operand's
/// dtype that keeps its source line.
struct Num {
  double v;       ///< the number
  SourceLoc loc;  ///< where it was written
  /// Wraps any arithmetic value; `loc` is the caller's line.
  template <class T>
  requires std::is_arithmetic_v<T> Num(T v, SourceLoc loc = SourceLoc::current())
      : v(static_cast<double>(v)), loc(std::move(loc)) {}
};

/// @name Leaves
///@{
/// A constant holding `value`.
Tensor constant(const Array& value, SourceLoc loc = KEEL_HERE);
/// A tensor of `shape` with every element `value` (a scalar constant, broadcast).
Tensor full(const Shape& shape, double value, DType dtype = DType::f32, SourceLoc loc = KEEL_HERE);
/// Zeros of `x`'s shape and dtype.
Tensor zeros_like(const Tensor& x, SourceLoc loc = KEEL_HERE);
/// A tensor of `shape` whose every element is its index along `dim`.
Tensor iota(const Shape& shape, int64_t dim, DType dtype = DType::i64, SourceLoc loc = KEEL_HERE);
/// Uniform [0, 1) from a counter-based generator; seed and counter are i64 scalar tensors.
Tensor rng_uniform(const Tensor& seed, const Tensor& counter, const Shape& shape,
                   DType dtype = DType::f32, SourceLoc loc = KEEL_HERE);
///@}

/// @name Elementwise
/// Binary, compare and select operands broadcast like NumPy.
///@{
/// Elementwise -x.
Tensor neg(const Tensor& x, SourceLoc loc = KEEL_HERE);
/// Elementwise |x|.
Tensor abs(const Tensor& x, SourceLoc loc = KEEL_HERE);
/// Elementwise e^x.
Tensor exp(const Tensor& x, SourceLoc loc = KEEL_HERE);
/// Elementwise natural logarithm.
Tensor log(const Tensor& x, SourceLoc loc = KEEL_HERE);
/// Elementwise hyperbolic tangent.
Tensor tanh(const Tensor& x, SourceLoc loc = KEEL_HERE);
/// Elementwise square root.
Tensor sqrt(const Tensor& x, SourceLoc loc = KEEL_HERE);
/// Elementwise 1 / sqrt(x).
Tensor rsqrt(const Tensor& x, SourceLoc loc = KEEL_HERE);
/// Elementwise 1 / (1 + e^-x).
Tensor sigmoid(const Tensor& x, SourceLoc loc = KEEL_HERE);
/// Elementwise error function.
Tensor erf(const Tensor& x, SourceLoc loc = KEEL_HERE);
/// Elementwise sine.
Tensor sin(const Tensor& x, SourceLoc loc = KEEL_HERE);
/// Elementwise cosine.
Tensor cos(const Tensor& x, SourceLoc loc = KEEL_HERE);
/// `x` itself, with a zero gradient.
Tensor stop_gradient(const Tensor& x, SourceLoc loc = KEEL_HERE);
/// a + b.
Tensor add(const Tensor& a, const Tensor& b, SourceLoc loc = KEEL_HERE);
/// a - b.
Tensor sub(const Tensor& a, const Tensor& b, SourceLoc loc = KEEL_HERE);
/// a * b.
Tensor mul(const Tensor& a, const Tensor& b, SourceLoc loc = KEEL_HERE);
/// a / b (integers: truncated toward zero, and 0 for division by zero).
Tensor div(const Tensor& a, const Tensor& b, SourceLoc loc = KEEL_HERE);
/// The larger of a and b (NaN propagates).
Tensor maximum(const Tensor& a, const Tensor& b, SourceLoc loc = KEEL_HERE);
/// The smaller of a and b (NaN propagates).
Tensor minimum(const Tensor& a, const Tensor& b, SourceLoc loc = KEEL_HERE);
/// a to the power b (floats).
Tensor pow(const Tensor& a, const Tensor& b, SourceLoc loc = KEEL_HERE);
/// Bool: a compared with b in direction `dir`.
Tensor compare(const Tensor& a, const Tensor& b, CompareDir dir, SourceLoc loc = KEEL_HERE);
/// Bool: a == b.
Tensor eq(const Tensor& a, const Tensor& b, SourceLoc loc = KEEL_HERE);
/// Bool: a != b.
Tensor ne(const Tensor& a, const Tensor& b, SourceLoc loc = KEEL_HERE);
/// Bool: a < b.
Tensor lt(const Tensor& a, const Tensor& b, SourceLoc loc = KEEL_HERE);
/// Bool: a <= b.
Tensor le(const Tensor& a, const Tensor& b, SourceLoc loc = KEEL_HERE);
/// Bool: a > b.
Tensor gt(const Tensor& a, const Tensor& b, SourceLoc loc = KEEL_HERE);
/// Bool: a >= b.
Tensor ge(const Tensor& a, const Tensor& b, SourceLoc loc = KEEL_HERE);
/// pred ? a : b, elementwise; `pred` is bool.
Tensor select(const Tensor& pred, const Tensor& a, const Tensor& b, SourceLoc loc = KEEL_HERE);
/// `x` converted to `dtype` (float to int truncates toward zero; to bool is x != 0); `x` itself
/// when it already has that dtype.
Tensor cast(const Tensor& x, DType dtype, SourceLoc loc = KEEL_HERE);
///@}

/// @name Operators
/// As add, sub, mul, div and neg, at the operator's line; a C++ number takes the tensor's dtype.
///@{
Tensor operator+(At a, At b);   ///< add(a, b)
Tensor operator-(At a, At b);   ///< sub(a, b)
Tensor operator*(At a, At b);   ///< mul(a, b)
Tensor operator/(At a, At b);   ///< div(a, b)
Tensor operator+(At a, Num b);  ///< add(a, b)
Tensor operator-(At a, Num b);  ///< sub(a, b)
Tensor operator*(At a, Num b);  ///< mul(a, b)
Tensor operator/(At a, Num b);  ///< div(a, b)
Tensor operator+(Num a, At b);  ///< add(a, b)
Tensor operator-(Num a, At b);  ///< sub(a, b)
Tensor operator*(Num a, At b);  ///< mul(a, b)
Tensor operator/(Num a, At b);  ///< div(a, b)
Tensor operator-(At a);         ///< neg(a)
///@}

/// @name Layout
/// Negative axes count from the end; reshape accepts one -1.
///@{
/// `x`'s elements, row-major, in `shape`.
Tensor reshape(const Tensor& x, const Shape& shape, SourceLoc loc = KEEL_HERE);
/// `x` with its dims permuted: output dim i is input dim perm[i].
Tensor transpose(const Tensor& x, const Axes& perm, SourceLoc loc = KEEL_HERE);
/// `x` broadcast to `shape` (NumPy's broadcast_to).
Tensor broadcast_to(const Tensor& x, const Shape& shape, SourceLoc loc = KEEL_HERE);
/// Per dim, the elements start, start + stride, ... below limit (`stride` empty: all 1).
Tensor slice(const Tensor& x, const Axes& start, const Axes& limit, const Axes& stride = {},
             SourceLoc loc = KEEL_HERE);
/// `xs` joined along `axis` (at least one input).
Tensor concat(const std::vector<Tensor>& xs, int64_t axis, SourceLoc loc = KEEL_HERE);
/// `x` with low[d] and high[d] elements of `value` before and after each dim d.
Tensor pad(const Tensor& x, const Axes& low, const Axes& high, double value = 0.0,
           SourceLoc loc = KEEL_HERE);
///@}

/// @name Indexing
///@{
/// Rows of `operand` selected by `indices` along `axis` (NumPy's take; indices are clamped).
Tensor take(const Tensor& operand, const Tensor& indices, int64_t axis = 0,
            SourceLoc loc = KEEL_HERE);
/// `operand` with `updates` added at the positions take() would read; repeated indices
/// accumulate.
Tensor scatter_add(const Tensor& operand, const Tensor& indices, const Tensor& updates,
                   int64_t axis = 0, SourceLoc loc = KEEL_HERE);
/// indices' shape + [depth]: element [..., j] is 1 where j equals the index, else 0 (an index
/// out of range: all 0).
Tensor one_hot(const Tensor& indices, int64_t depth, DType dtype = DType::f32,
               SourceLoc loc = KEEL_HERE);
///@}

/// @name Reductions
/// Empty `axes` means all axes.
///@{
/// Sum over `axes`.
Tensor sum(const Tensor& x, const Axes& axes = {}, bool keepdims = false,
           SourceLoc loc = KEEL_HERE);
/// Maximum over `axes` (NaN propagates).
Tensor max(const Tensor& x, const Axes& axes = {}, bool keepdims = false,
           SourceLoc loc = KEEL_HERE);
/// Mean over `axes`.
Tensor mean(const Tensor& x, const Axes& axes = {}, bool keepdims = false,
            SourceLoc loc = KEEL_HERE);
/// i64 index of the maximum along `axis`; ties take the lowest index.
Tensor argmax(const Tensor& x, int64_t axis, bool keepdims = false, SourceLoc loc = KEEL_HERE);
/// Inclusive prefix sum along `axis`, from the end when `reverse`.
Tensor cumsum(const Tensor& x, int64_t axis, bool reverse = false, SourceLoc loc = KEEL_HERE);
/// The k largest along the last axis, descending, and their i64 indices.
std::pair<Tensor, Tensor> top_k(const Tensor& x, int64_t k, SourceLoc loc = KEEL_HERE);
///@}

/// The dims of a dot_general: batch dims pair up, contracting dims are summed over.
struct DotDims {
  Axes lhs_batch;     ///< batch dims of the left operand
  Axes rhs_batch;     ///< batch dims of the right operand, paired with lhs_batch
  Axes lhs_contract;  ///< contracting dims of the left operand
  Axes rhs_contract;  ///< contracting dims of the right operand
};
/// @name Contractions
///@{
/// XLA's DotGeneral: output dims are the batch dims, then a's free dims, then b's; products are
/// summed over the contracting dims.
Tensor dot_general(const Tensor& a, const Tensor& b, const DotDims& dims,
                   SourceLoc loc = KEEL_HERE);
/// a[..., m, k] @ b[..., k, n] with equal batch dims, or b[k, n] shared across a's batch.
Tensor matmul(const Tensor& a, const Tensor& b, SourceLoc loc = KEEL_HERE);
/// The dims matmul contracts (keel::Error naming `loc` for ranks it does not take).
DotDims matmul_dims(const Tensor& a, const Tensor& b, const SourceLoc& loc);
///@}

/// Fused causal attention (ir/attention.h): q [B, H, T, D], k and v [B, KV, T, D] with H a
/// multiple of KV, scores scale · q·k; with `doc_ids` [B, T] (i32/i64, or undefined for none) a
/// query sees only keys of its own document. Returns [B, H, T, D]; never builds T x T. In layout
/// bthd every operand and the result are [B, T, H, D] instead.
Tensor causal_attention(const Tensor& q, const Tensor& k, const Tensor& v, double scale,
                        const Tensor& doc_ids = Tensor(),
                        AttentionLayout layout = AttentionLayout::bhtd, SourceLoc loc = KEEL_HERE);
/// Attention over listed keys (ir/sparse_attention.h): q [B, T, H, D], k and v [B, T, KV, D],
/// keys [B, T, S] i32/i64, the positions each query attends (outside [0, T): none). Returns
/// [B, T, H, D]; never builds T x T.
Tensor sparse_attention(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& keys,
                        double scale, SourceLoc loc = KEEL_HERE);
/// [B, T, S]: each listed key's softmax probability in sparse_attention, averaged over the
/// heads (0 where an entry selects nothing). It has no gradient.
Tensor sparse_attention_weights(const Tensor& q, const Tensor& k, const Tensor& keys, double scale,
                                SourceLoc loc = KEEL_HERE);

}  // namespace keel
