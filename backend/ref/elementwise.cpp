// Elementwise ops: unary, binary, compare, select and cast. Floats are computed in double and
// rounded once on store (set_f64); integers are computed in int64 with wrap-around.
#include <cmath>
#include <limits>

#include "backend/ref/indexing.h"
#include "backend/ref/kernels.h"

namespace keel::ref {
namespace {

double unary_float(const Node& node, double x) {
  switch (node.op) {
    case Op::neg:
      return -x;
    case Op::abs:
      return std::fabs(x);
    case Op::exp:
      return std::exp(x);
    case Op::log:
      return std::log(x);
    case Op::tanh:
      return std::tanh(x);
    case Op::sqrt:
      return std::sqrt(x);
    case Op::rsqrt:
      return 1.0 / std::sqrt(x);
    case Op::sigmoid:
      return 1.0 / (1.0 + std::exp(-x));
    case Op::erf:
      return std::erf(x);
    case Op::sin:
      return std::sin(x);
    case Op::cos:
      return std::cos(x);
    default:
      fail(node, "is not a float unary op");
  }
}

int64_t unary_int(const Node& node, int64_t x) {
  switch (node.op) {
    case Op::neg:
      return wrap_sub(0, x);
    case Op::abs:
      return x < 0 ? wrap_sub(0, x) : x;
    default:
      fail(node, "is not an integer unary op");
  }
}

double binary_float(const Node& node, double x, double y) {
  switch (node.op) {
    case Op::add:
      return x + y;
    case Op::sub:
      return x - y;
    case Op::mul:
      return x * y;
    case Op::div:
      return x / y;
    case Op::max:
      return float_max(x, y);
    case Op::min:
      return float_min(x, y);
    case Op::pow:
      return std::pow(x, y);
    default:
      fail(node, "is not a float binary op");
  }
}

int64_t int_div(int64_t x, int64_t y) {
  if (y == 0) return 0;                // docs/ops.md: integer division by zero gives 0
  if (y == -1) return wrap_sub(0, x);  // avoids the INT64_MIN / -1 trap; wraps instead
  return x / y;                        // C++ truncates toward zero
}

int64_t binary_int(const Node& node, int64_t x, int64_t y) {
  switch (node.op) {
    case Op::add:
      return wrap_add(x, y);
    case Op::sub:
      return wrap_sub(x, y);
    case Op::mul:
      return wrap_mul(x, y);
    case Op::div:
      return int_div(x, y);
    case Op::max:
      return x > y ? x : y;
    case Op::min:
      return x < y ? x : y;
    default:
      fail(node, "is not an integer binary op");
  }
}

template <class T>
bool compare(CompareDir dir, T x, T y) {
  switch (dir) {
    case CompareDir::eq:
      return x == y;
    case CompareDir::ne:
      return x != y;
    case CompareDir::lt:
      return x < y;
    case CompareDir::le:
      return x <= y;
    case CompareDir::gt:
      return x > y;
    case CompareDir::ge:
      return x >= y;
  }
  return false;
}

// Float to integer: truncate toward zero, non-finite gives 0, out-of-range saturates.
int64_t float_to_int(double v, DType to) {
  if (!std::isfinite(v)) return 0;
  v = std::trunc(v);
  if (to == DType::i32) {
    if (v <= std::numeric_limits<int32_t>::min()) return std::numeric_limits<int32_t>::min();
    if (v >= std::numeric_limits<int32_t>::max()) return std::numeric_limits<int32_t>::max();
    return static_cast<int64_t>(v);
  }
  if (v < -0x1p63) return std::numeric_limits<int64_t>::min();
  if (v >= 0x1p63) return std::numeric_limits<int64_t>::max();
  return static_cast<int64_t>(v);
}

}  // namespace

Array eval_unary(const Node& node, const Array& x) {
  if (node.op == Op::stop_gradient || node.op == Op::pvary) return x.clone();
  Array out(node.type.dtype, node.type.shape);
  const bool fl = is_float(out.dtype());
  for (int64_t i = 0; i < out.numel(); ++i) {
    if (fl) {
      out.set_f64(i, unary_float(node, x.get_f64(i)));
    } else {
      out.set_i64(i, unary_int(node, x.get_i64(i)));
    }
  }
  return out;
}

Array eval_binary(const Node& node, const Array& a, const Array& b) {
  Array out(node.type.dtype, node.type.shape);
  const bool fl = is_float(out.dtype());
  for_each_index(out.shape(), [&](const Index& idx, int64_t i) {
    int64_t ia = broadcast_offset(idx, a.shape());
    int64_t ib = broadcast_offset(idx, b.shape());
    if (fl) {
      out.set_f64(i, binary_float(node, a.get_f64(ia), b.get_f64(ib)));
    } else {
      out.set_i64(i, binary_int(node, a.get_i64(ia), b.get_i64(ib)));
    }
  });
  return out;
}

Array eval_compare(const Node& node, const Array& a, const Array& b) {
  const CompareDir dir = *parse_compare(node.attrs.s("direction"));
  const bool fl = is_float(a.dtype());
  Array out(node.type.dtype, node.type.shape);
  for_each_index(out.shape(), [&](const Index& idx, int64_t i) {
    int64_t ia = broadcast_offset(idx, a.shape());
    int64_t ib = broadcast_offset(idx, b.shape());
    // Floats compare as IEEE values (NaN is unordered); ints and bools compare exactly.
    bool r = fl ? compare(dir, a.get_f64(ia), b.get_f64(ib))
                : compare(dir, a.get_i64(ia), b.get_i64(ib));
    out.set_i64(i, r ? 1 : 0);
  });
  return out;
}

Array eval_select(const Node& node, const Array& p, const Array& a, const Array& b) {
  Array out(node.type.dtype, node.type.shape);
  for_each_index(out.shape(), [&](const Index& idx, int64_t i) {
    bool take_a = p.get_i64(broadcast_offset(idx, p.shape())) != 0;
    const Array& src = take_a ? a : b;
    copy_element(out, i, src, broadcast_offset(idx, src.shape()));
  });
  return out;
}

Array eval_cast(const Node& node, const Array& x) {
  const DType to = node.type.dtype;
  const DType from = x.dtype();
  Array out(to, node.type.shape);
  for (int64_t i = 0; i < out.numel(); ++i) {
    if (to == DType::boolean) {
      out.set_i64(i, is_float(from) ? (x.get_f64(i) != 0.0) : (x.get_i64(i) != 0));
    } else if (is_float(from) && is_int(to)) {
      out.set_i64(i, float_to_int(x.get_f64(i), to));
    } else if (is_float(from)) {
      out.set_f64(i, x.get_f64(i));  // f32 -> bf16 rounds to nearest even; the rest is exact
    } else if (is_float(to)) {
      // Round the integer to f32 once (bf16 then rounds from that f32, as for any bf16 store).
      out.set_f64(i, static_cast<float>(x.get_i64(i)));
    } else {
      out.set_i64(i, x.get_i64(i));  // int/bool -> int wraps modulo the target width
    }
  }
  return out;
}

}  // namespace keel::ref
