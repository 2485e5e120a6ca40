// One elementwise op as a C expression over its inputs' values. Semantics follow docs/ops.md
// and backend/ref: integers wrap (computed unsigned), division by zero gives 0, max/min
// propagate NaN, float -> int truncates and saturates, bf16 rounds after every op.
#include "backend/c_source/c_source.h"

namespace keel::c_source {
namespace {

std::string float_unary(Op op, const std::string& x) {
  switch (op) {
    case Op::neg:
      return "(-" + x + ")";
    case Op::abs:
      return "keel_fabs(" + x + ")";
    case Op::exp:
      return "keel_exp(" + x + ")";
    case Op::log:
      return "keel_log(" + x + ")";
    case Op::tanh:
      return "keel_tanh(" + x + ")";
    case Op::sqrt:
      return "keel_sqrt(" + x + ")";
    case Op::rsqrt:
      return "(1.0f / keel_sqrt(" + x + "))";
    case Op::sigmoid:
      return "(1.0f / (1.0f + keel_exp(-" + x + ")))";
    case Op::erf:
      return "keel_erf(" + x + ")";
    case Op::sin:
      return "keel_sin(" + x + ")";
    case Op::cos:
      return "keel_cos(" + x + ")";
    default:
      fail("internal: {} is not a float unary op", op_name(op));
  }
}

std::string float_binary(Op op, const std::string& x, const std::string& y) {
  switch (op) {
    case Op::add:
      return fmt::format("({} + {})", x, y);
    case Op::sub:
      return fmt::format("({} - {})", x, y);
    case Op::mul:
      return fmt::format("({} * {})", x, y);
    case Op::div:
      return fmt::format("({} / {})", x, y);
    case Op::max:
      return fmt::format("keel_fmax({}, {})", x, y);
    case Op::min:
      return fmt::format("keel_fmin({}, {})", x, y);
    case Op::pow:
      return fmt::format("keel_pow({}, {})", x, y);
    default:
      fail("internal: {} is not a float binary op", op_name(op));
  }
}

// Two's complement wrapping through the unsigned type of the same width.
std::string int_op(Op op, DType t, const std::vector<std::string>& a) {
  const std::string_view st = storage_type(t);
  const char* ut = t == DType::i32 ? "uint32_t" : "uint64_t";
  auto wrap = [&](const char* sym) {
    return fmt::format("{}({}({}) {} {}({}))", st, ut, a[0], sym, ut, a[1]);
  };
  switch (op) {
    case Op::neg:
      return fmt::format("{}({}(0) - {}({}))", st, ut, ut, a[0]);
    case Op::abs:
      return fmt::format("({0} < 0 ? {1}({2}(0) - {2}({0})) : {0})", a[0], st, ut);
    case Op::add:
      return wrap("+");
    case Op::sub:
      return wrap("-");
    case Op::mul:
      return wrap("*");
    case Op::div:
      return fmt::format("keel_idiv{}({}, {})", t == DType::i32 ? 32 : 64, a[0], a[1]);
    case Op::max:
      return fmt::format("({0} > {1} ? {0} : {1})", a[0], a[1]);
    case Op::min:
      return fmt::format("({0} < {1} ? {0} : {1})", a[0], a[1]);
    default:
      fail("internal: {} is not an integer op", op_name(op));
  }
}

std::string cast_expr(DType from, DType to, const std::string& x) {
  if (from == to) return x;
  if (to == DType::boolean) return "uint8_t(" + x + " != 0)";  // NaN != 0: true
  if (is_float(from) && is_int(to))
    return fmt::format("keel_f2i{}({})", to == DType::i32 ? 32 : 64, x);
  if (is_float(from) && is_float(to)) return to == DType::bf16 ? "keel_rbf(" + x + ")" : x;
  if (to == DType::f32) return "float(" + x + ")";
  if (to == DType::bf16) return "keel_rbf(float(" + x + "))";   // one f32 rounding, then bf16
  if (to == DType::i32) return "int32_t(uint32_t(" + x + "))";  // wraps to 32 bits
  return "int64_t(" + x + ")";
}

const char* compare_symbol(const std::string& dir) {
  switch (*parse_compare(dir)) {
    case CompareDir::eq:
      return "==";
    case CompareDir::ne:
      return "!=";
    case CompareDir::lt:
      return "<";
    case CompareDir::le:
      return "<=";
    case CompareDir::gt:
      return ">";
    case CompareDir::ge:
      return ">=";
  }
  return "==";
}

}  // namespace

std::string value_expr(const Graph& g, const Node& n, const std::vector<std::string>& a) {
  const DType out = n.type.dtype;
  const DType in = g.node(n.inputs.at(0)).type.dtype;
  auto rounded = [&](std::string e) { return out == DType::bf16 ? "keel_rbf(" + e + ")" : e; };
  switch (op_info(n.op).kind) {
    case OpKind::Unary:
      if (n.op == Op::stop_gradient || n.op == Op::pvary) return a[0];
      if (!is_float(out)) return int_op(n.op, out, a);
      if (n.op == Op::neg || n.op == Op::abs) return float_unary(n.op, a[0]);  // exact
      return rounded(float_unary(n.op, a[0]));
    case OpKind::Binary:
      if (!is_float(out)) return int_op(n.op, out, a);
      if (n.op == Op::max || n.op == Op::min) return float_binary(n.op, a[0], a[1]);
      return rounded(float_binary(n.op, a[0], a[1]));
    case OpKind::Compare:
      return fmt::format("uint8_t({} {} {})", a[0], compare_symbol(n.attrs.s("direction")), a[1]);
    case OpKind::Select:
      return fmt::format("({} ? {} : {})", a[0], a[1], a[2]);
    case OpKind::Cast:
      return cast_expr(in, out, a[0]);
    case OpKind::Layout:
      if (n.op == Op::broadcast) return a[0];  // loads already broadcast against the loop
      break;
    default:
      break;
  }
  fail("internal: {} cannot be computed inside a loop", op_name(n.op));
}

}  // namespace keel::c_source
