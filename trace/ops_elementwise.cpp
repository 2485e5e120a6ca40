// Leaf and elementwise op functions.
#include <fmt/format.h>

#include "ir/error.h"
#include "trace/emit.h"
#include "trace/ops.h"

namespace keel {

using detail::emit;

Tensor constant(const Array& value, SourceLoc loc) {
  auto ctx = detail::active_trace("constant", loc);
  return Tensor::symbol(ctx, ctx->graph.add_constant(value, std::move(loc)));
}

Tensor full(const Shape& shape, double value, DType dtype, SourceLoc loc) {
  Tensor c = constant(Array::scalar(value, dtype), loc);
  return shape.empty() ? c : broadcast_to(c, shape, std::move(loc));
}

Tensor zeros_like(const Tensor& x, SourceLoc loc) {
  return full(x.shape(), 0.0, x.dtype(), std::move(loc));
}

Tensor iota(const Shape& shape, int64_t dim, DType dtype, SourceLoc loc) {
  int64_t d = normalize_axis(dim, shape.size());
  return emit(Op::iota, {}, {{"shape", shape}, {"dim", d}, {"dtype", dtype}}, loc);
}

Tensor rng_uniform(const Tensor& seed, const Tensor& counter, const Shape& shape, DType dtype,
                   SourceLoc loc) {
  return emit(Op::rng_uniform, {seed, counter}, {{"shape", shape}, {"dtype", dtype}}, loc);
}

#define KEEL_UNARY(fn)                        \
  Tensor fn(const Tensor& x, SourceLoc loc) { \
    return emit(Op::fn, {x}, {}, loc);        \
  }
KEEL_UNARY(neg)
KEEL_UNARY(abs)
KEEL_UNARY(exp)
KEEL_UNARY(log)
KEEL_UNARY(tanh)
KEEL_UNARY(sqrt)
KEEL_UNARY(rsqrt)
KEEL_UNARY(sigmoid)
KEEL_UNARY(erf)
KEEL_UNARY(sin)
KEEL_UNARY(cos)
KEEL_UNARY(stop_gradient)
#undef KEEL_UNARY

#define KEEL_BINARY(fn, op)                                    \
  Tensor fn(const Tensor& a, const Tensor& b, SourceLoc loc) { \
    return emit(Op::op, {a, b}, {}, loc);                      \
  }
KEEL_BINARY(add, add)
KEEL_BINARY(sub, sub)
KEEL_BINARY(mul, mul)
KEEL_BINARY(div, div)
KEEL_BINARY(maximum, max)
KEEL_BINARY(minimum, min)
KEEL_BINARY(pow, pow)
#undef KEEL_BINARY

Tensor compare(const Tensor& a, const Tensor& b, CompareDir dir, SourceLoc loc) {
  return emit(Op::compare, {a, b}, {{"direction", std::string(compare_name(dir))}}, loc);
}
Tensor eq(const Tensor& a, const Tensor& b, SourceLoc loc) {
  return compare(a, b, CompareDir::eq, loc);
}
Tensor ne(const Tensor& a, const Tensor& b, SourceLoc loc) {
  return compare(a, b, CompareDir::ne, loc);
}
Tensor lt(const Tensor& a, const Tensor& b, SourceLoc loc) {
  return compare(a, b, CompareDir::lt, loc);
}
Tensor le(const Tensor& a, const Tensor& b, SourceLoc loc) {
  return compare(a, b, CompareDir::le, loc);
}
Tensor gt(const Tensor& a, const Tensor& b, SourceLoc loc) {
  return compare(a, b, CompareDir::gt, loc);
}
Tensor ge(const Tensor& a, const Tensor& b, SourceLoc loc) {
  return compare(a, b, CompareDir::ge, loc);
}

Tensor select(const Tensor& pred, const Tensor& a, const Tensor& b, SourceLoc loc) {
  return emit(Op::select, {pred, a, b}, {}, loc);
}

Tensor cast(const Tensor& x, DType dtype, SourceLoc loc) {
  if (x.dtype() == dtype) return x;
  return emit(Op::cast, {x}, {{"dtype", dtype}}, loc);
}

// A C++ number takes the dtype of the tensor it meets and keeps the line it was written on.
static Tensor number(const Num& n, const Tensor& like) {
  return constant(Array::scalar(n.v, like.dtype()), n.loc);
}

Tensor operator+(At a, At b) {
  return add(a.t, b.t, a.loc);
}
Tensor operator-(At a, At b) {
  return sub(a.t, b.t, a.loc);
}
Tensor operator*(At a, At b) {
  return mul(a.t, b.t, a.loc);
}
Tensor operator/(At a, At b) {
  return div(a.t, b.t, a.loc);
}
Tensor operator+(At a, Num b) {
  return add(a.t, number(b, a.t), a.loc);
}
Tensor operator-(At a, Num b) {
  return sub(a.t, number(b, a.t), a.loc);
}
Tensor operator*(At a, Num b) {
  return mul(a.t, number(b, a.t), a.loc);
}
Tensor operator/(At a, Num b) {
  return div(a.t, number(b, a.t), a.loc);
}
Tensor operator+(Num a, At b) {
  return add(number(a, b.t), b.t, b.loc);
}
Tensor operator-(Num a, At b) {
  return sub(number(a, b.t), b.t, b.loc);
}
Tensor operator*(Num a, At b) {
  return mul(number(a, b.t), b.t, b.loc);
}
Tensor operator/(Num a, At b) {
  return div(number(a, b.t), b.t, b.loc);
}
Tensor operator-(At a) {
  return neg(a.t, a.loc);
}

}  // namespace keel
