// VJP rules for reductions, cumsum and top_k_values: spread the cotangent back over the
// elements that produced each output.
#include <fmt/format.h>

#include "autodiff/vjp.h"
#include "ir/error.h"

namespace keel::autodiff::detail {
namespace {

// x's shape with the reduced axes kept as size 1, so results broadcast back against x.
Shape kept_shape(const Shape& x, const std::vector<int64_t>& axes) {
  Shape keep = x;
  for (int64_t ax : axes) keep[size_t(ax)] = 1;
  return keep;
}

int64_t reduced_count(const Shape& x, const std::vector<int64_t>& axes) {
  int64_t n = 1;
  for (int64_t ax : axes) n *= x[size_t(ax)];
  return n;
}

// The k selected positions get their cotangent back: one_hot(top_k_indices) [.., k, n] weighted
// by g [.., k, 1] and summed over k. Ties pick the lower index, as the forward op does.
NodeId top_k_ct(Builder& b, const VjpArgs& a) {
  const Shape x = a.in[0].shape;
  const DType t = a.in[0].dtype;
  const int64_t k = a.fwd.attrs.i("k");
  NodeId idx = b.emit(Op::top_k_indices, {a.fwd.inputs[0]}, {{"k", k}});
  NodeId hot = b.emit(Op::one_hot, {idx}, {{"depth", x.back()}, {"dtype", t}});
  Shape column = x;
  column.back() = k;
  column.push_back(1);
  NodeId weighted = b.mul(hot, b.reshape(a.ct, column));
  return b.reduce_sum(weighted, {int64_t(x.size()) - 1}, false);
}

}  // namespace

std::vector<NodeId> vjp_reduce(Builder& b, const VjpArgs& a) {
  const Node& f = a.fwd;
  const Shape x = a.in[0].shape;
  const DType t = a.in[0].dtype;
  std::vector<NodeId> out(1, kNone);
  if (f.op == Op::cumsum) {
    // Each input feeds every later prefix sum, so it collects a reverse cumulative sum.
    int64_t reverse = f.attrs.i("reverse") != 0 ? 0 : 1;
    out[0] = b.emit(Op::cumsum, {a.ct}, {{"axis", f.attrs.i("axis")}, {"reverse", reverse}});
    return out;
  }
  if (f.op == Op::top_k_values) {
    out[0] = top_k_ct(b, a);
    return out;
  }
  if (numel(x) == 0) {  // nothing to send a cotangent to
    out[0] = b.zeros({t, x});
    return out;
  }
  const auto& axes = f.attrs.ints("axes");
  const Shape keep = kept_shape(x, axes);
  NodeId g = b.reshape(a.ct, keep);
  switch (f.op) {
    case Op::reduce_sum:
      out[0] = b.broadcast(g, x);
      break;
    case Op::reduce_mean:
      out[0] = b.broadcast(b.scale(g, 1.0 / double(reduced_count(x, axes))), x);
      break;
    case Op::reduce_max: {
      // Every element equal to the max shares the cotangent evenly.
      NodeId hit = b.cast(b.compare(f.inputs[0], b.reshape(a.self, keep), "eq"), t);
      NodeId count = b.reduce_sum(hit, axes, true);
      out[0] = b.div(b.mul(hit, g), count);
      break;
    }
    default:
      throw Error(fmt::format("[autodiff] internal: {} has no reduction VJP rule", op_name(f.op)));
  }
  return out;
}

}  // namespace keel::autodiff::detail
