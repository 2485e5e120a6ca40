// The shared emitter and the dispatch from an op to its family of VJP rules.
#include "autodiff/vjp.h"

#include <fmt/format.h>

#include "ir/error.h"

namespace keel::autodiff::detail {

NodeId Builder::emit(Op op, std::vector<NodeId> inputs, Attrs attrs) {
  return g_.emit(op, std::move(inputs), std::move(attrs), loc_, "autodiff");
}

NodeId Builder::scalar(double v, DType t) {
  return g_.add_constant(Array::scalar(v, t), loc_);
}

NodeId Builder::zeros(TensorType t) {
  return broadcast(scalar(0.0, t.dtype), t.shape);
}

NodeId Builder::compare(NodeId a, NodeId b, std::string dir) {
  return emit(Op::compare, {a, b}, {{"direction", std::move(dir)}});
}

NodeId Builder::cast(NodeId x, DType t) {
  if (dtype(x) == t) return x;
  return emit(Op::cast, {x}, {{"dtype", t}});
}

NodeId Builder::reshape(NodeId x, const Shape& s) {
  if (shape(x) == s) return x;
  return emit(Op::reshape, {x}, {{"shape", s}});
}

NodeId Builder::transpose(NodeId x, const std::vector<int64_t>& perm) {
  bool identity = true;
  for (size_t i = 0; i < perm.size(); ++i) identity = identity && perm[i] == int64_t(i);
  if (identity) return x;
  return emit(Op::transpose, {x}, {{"perm", perm}});
}

NodeId Builder::broadcast(NodeId x, const Shape& s) {
  if (shape(x) == s) return x;
  return emit(Op::broadcast, {x}, {{"shape", s}});
}

NodeId Builder::reduce_sum(NodeId x, std::vector<int64_t> axes, bool keepdims) {
  return emit(Op::reduce_sum, {x},
              {{"axes", std::move(axes)}, {"keepdims", int64_t{keepdims ? 1 : 0}}});
}

NodeId Builder::slice(NodeId x, std::vector<int64_t> start, std::vector<int64_t> limit,
                      std::vector<int64_t> stride) {
  return emit(
      Op::slice, {x},
      {{"start", std::move(start)}, {"limit", std::move(limit)}, {"stride", std::move(stride)}});
}

NodeId Builder::pad(NodeId x, std::vector<int64_t> low, std::vector<int64_t> high) {
  return emit(Op::pad, {x}, {{"low", std::move(low)}, {"high", std::move(high)}, {"value", 0.0}});
}

NodeId Builder::sum_to(NodeId x, Shape to) {
  const Shape from = shape(x);
  if (from == to) return x;
  if (to.size() > from.size()) {
    throw Error(fmt::format("[autodiff] internal: cannot sum {} down to {}", shape_str(from),
                            shape_str(to)));
  }
  // Leading axes numpy added, plus axes where `to` has 1 but the broadcast result does not.
  size_t lead = from.size() - to.size();
  std::vector<int64_t> axes;
  for (size_t i = 0; i < from.size(); ++i) {
    if (i < lead || (to[i - lead] == 1 && from[i] != 1)) axes.push_back(int64_t(i));
  }
  if (axes.empty()) return reshape(x, to);
  return reshape(reduce_sum(x, std::move(axes), false), to);
}

std::vector<NodeId> vjp(Builder& b, const VjpArgs& a) {
  switch (op_info(a.fwd.op).kind) {
    case OpKind::Unary:
      return vjp_unary(b, a);
    case OpKind::Binary:
    case OpKind::Select:
    case OpKind::Cast:
      return vjp_binary(b, a);
    case OpKind::Layout:
      return vjp_layout(b, a);
    case OpKind::Index:
      return vjp_index(b, a);
    case OpKind::Reduce:
    case OpKind::Cumulative:
    case OpKind::TopK:
      return vjp_reduce(b, a);
    case OpKind::Contraction:
      return vjp_contraction(b, a);
    case OpKind::Attention:
      return vjp_attention(b, a);
    case OpKind::SparseAttention:
      return vjp_sparse_attention(b, a);
    case OpKind::Collective:
      return vjp_collective(b, a);
    default:
      break;
  }
  throw Error(fmt::format("[autodiff] internal: no VJP rule for {}", op_name(a.fwd.op)));
}

}  // namespace keel::autodiff::detail
