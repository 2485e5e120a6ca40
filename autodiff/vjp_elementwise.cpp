// VJP rules for unary, binary, select and cast: pointwise derivatives, with broadcast inputs
// getting their cotangent summed back down to their own shape.
#include <fmt/format.h>

#include <cmath>
#include <numbers>

#include "autodiff/vjp.h"
#include "ir/error.h"

namespace keel::autodiff::detail {
namespace {

[[noreturn]] void no_rule(Op op) {
  throw Error(fmt::format("[autodiff] internal: {} has no elementwise VJP rule", op_name(op)));
}

// d/dx of the unary op, times g. y is the forward output (reused where it is cheaper).
NodeId unary_ct(Builder& b, Op op, NodeId x, NodeId y, NodeId g) {
  DType t = b.dtype(x);
  switch (op) {
    case Op::neg:
      return b.neg(g);
    case Op::abs: {
      // sign(x)·g with sign(0) = 0: abs has no slope to prefer at its kink.
      NodeId zero = b.scalar(0.0, t);
      NodeId pos = b.select(b.compare(x, zero, "gt"), g, zero);
      NodeId negs = b.select(b.compare(x, zero, "lt"), g, zero);
      return b.sub(pos, negs);
    }
    case Op::exp:
      return b.mul(g, y);
    case Op::log:
      return b.div(g, x);
    case Op::tanh:
      return b.mul(g, b.sub(b.scalar(1.0, t), b.mul(y, y)));
    case Op::sqrt:
      return b.div(b.scale(g, 0.5), y);
    case Op::rsqrt:
      return b.mul(b.scale(g, -0.5), b.mul(y, b.mul(y, y)));  // −½·x^(−3/2)
    case Op::sigmoid:
      return b.mul(g, b.mul(y, b.sub(b.scalar(1.0, t), y)));
    case Op::erf: {
      NodeId gauss = b.unary(Op::exp, b.neg(b.mul(x, x)));
      return b.mul(b.scale(g, 2.0 / std::sqrt(std::numbers::pi)), gauss);
    }
    case Op::sin:
      return b.mul(g, b.unary(Op::cos, x));
    case Op::cos:
      return b.neg(b.mul(g, b.unary(Op::sin, x)));
    default:
      no_rule(op);
  }
}

// Fraction of the cotangent of max/min routed to the first input: 1 where it wins, 0 where it
// loses, ½ on ties (as JAX does), so the two shares always add up to g.
NodeId first_share(Builder& b, NodeId x, NodeId y, const char* wins, DType t) {
  NodeId one = b.scalar(1.0, t), half = b.scalar(0.5, t), zero = b.scalar(0.0, t);
  NodeId tie = b.select(b.compare(x, y, "eq"), half, zero);
  return b.select(b.compare(x, y, wins), one, tie);
}

}  // namespace

std::vector<NodeId> vjp_unary(Builder& b, const VjpArgs& a) {
  std::vector<NodeId> out(1, kNone);
  if (!a.need[0]) return out;
  if (a.fwd.op == Op::pvary) {  // every process's use is its own share of the cotangent
    out[0] = b.emit(Op::all_reduce, {a.ct},
                    {{"axis", a.fwd.attrs.s("axis")},
                     {"axis_size", a.fwd.attrs.i("axis_size")},
                     {"reduce", std::string("sum")}});
    return out;
  }
  out[0] = unary_ct(b, a.fwd.op, a.fwd.inputs[0], a.self, a.ct);
  return out;
}

std::vector<NodeId> vjp_binary(Builder& b, const VjpArgs& a) {
  const Op op = a.fwd.op;
  const std::vector<NodeId>& in = a.fwd.inputs;
  std::vector<NodeId> out(in.size(), kNone);
  const NodeId g = a.ct;
  const DType t = b.dtype(g);
  // Full-shape contributions, summed down to each input's shape at the end.
  NodeId ga = kNone, gb = kNone;
  switch (op) {
    case Op::cast:
      if (a.need[0]) out[0] = b.cast(g, a.in[0].dtype);
      return out;
    case Op::select: {
      NodeId zero = b.scalar(0.0, t);
      if (a.need[1]) out[1] = b.sum_to(b.select(in[0], g, zero), a.in[1].shape);
      if (a.need[2]) out[2] = b.sum_to(b.select(in[0], zero, g), a.in[2].shape);
      return out;
    }
    case Op::add:
      ga = g;
      gb = g;
      break;
    case Op::sub:
      ga = g;
      if (a.need[1]) gb = b.neg(g);
      break;
    case Op::mul:
      if (a.need[0]) ga = b.mul(g, in[1]);
      if (a.need[1]) gb = b.mul(g, in[0]);
      break;
    case Op::div:
      if (a.need[0]) ga = b.div(g, in[1]);
      if (a.need[1]) gb = b.neg(b.div(b.mul(g, a.self), in[1]));  // −g·a/b²
      break;
    case Op::max:
    case Op::min: {
      NodeId share = first_share(b, in[0], in[1], op == Op::max ? "gt" : "lt", t);
      ga = b.mul(g, share);
      if (a.need[1]) gb = b.sub(g, ga);
      break;
    }
    case Op::pow: {
      NodeId zero = b.scalar(0.0, t);
      if (a.need[0]) {
        // b·a^(b−1), taken as 0 where b = 0 so that 0^0 does not give 0·inf.
        NodeId e = in[1];
        NodeId d = b.mul(e, b.emit(Op::pow, {in[0], b.sub(e, b.scalar(1.0, t))}));
        ga = b.mul(g, b.select(b.compare(e, zero, "eq"), zero, d));
      }
      if (a.need[1]) {
        // y·log(a), with log(1) substituted at a = 0 so 0^b contributes 0 rather than NaN.
        NodeId base = b.select(b.compare(in[0], zero, "eq"), b.scalar(1.0, t), in[0]);
        gb = b.mul(g, b.mul(a.self, b.unary(Op::log, base)));
      }
      break;
    }
    default:
      no_rule(op);
  }
  // Every contribution involves g, so it already has the full broadcast shape.
  if (a.need[0]) out[0] = b.sum_to(ga, a.in[0].shape);
  if (a.need[1]) out[1] = b.sum_to(gb, a.in[1].shape);
  return out;
}

}  // namespace keel::autodiff::detail
