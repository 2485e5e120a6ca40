#pragma once
// Internal to autodiff: the emitter the VJP rules share and the per-family rule entry points.
#include <span>
#include <string>
#include <vector>

#include "ir/graph.h"

namespace keel::autodiff::detail {

inline constexpr NodeId kNone = -1;

// Appends nodes to the graph, all stamped with one source location (the forward node's).
class Builder {
 public:
  Builder(Graph& g, SourceLoc loc) : g_(g), loc_(std::move(loc)) {}

  Graph& graph() { return g_; }
  const TensorType& type(NodeId id) const { return g_.node(id).type; }
  const Shape& shape(NodeId id) const { return type(id).shape; }
  DType dtype(NodeId id) const { return type(id).dtype; }

  NodeId emit(Op op, std::vector<NodeId> inputs, Attrs attrs = {});
  NodeId scalar(double v, DType t);
  NodeId zeros(TensorType t);  // a broadcast of a scalar 0

  NodeId neg(NodeId x) { return emit(Op::neg, {x}); }
  NodeId add(NodeId a, NodeId b) { return emit(Op::add, {a, b}); }
  NodeId sub(NodeId a, NodeId b) { return emit(Op::sub, {a, b}); }
  NodeId mul(NodeId a, NodeId b) { return emit(Op::mul, {a, b}); }
  NodeId div(NodeId a, NodeId b) { return emit(Op::div, {a, b}); }
  NodeId unary(Op op, NodeId x) { return emit(op, {x}); }
  // Multiplies by a scalar constant of x's dtype.
  NodeId scale(NodeId x, double s) { return mul(x, scalar(s, dtype(x))); }
  NodeId compare(NodeId a, NodeId b, std::string dir);
  NodeId select(NodeId pred, NodeId a, NodeId b) { return emit(Op::select, {pred, a, b}); }
  NodeId cast(NodeId x, DType t);
  NodeId reshape(NodeId x, const Shape& s);  // no node when the shape already matches
  NodeId transpose(NodeId x, const std::vector<int64_t>& perm);  // none for the identity
  NodeId broadcast(NodeId x, const Shape& s);
  NodeId reduce_sum(NodeId x, std::vector<int64_t> axes, bool keepdims);
  NodeId slice(NodeId x, std::vector<int64_t> start, std::vector<int64_t> limit,
               std::vector<int64_t> stride);
  NodeId pad(NodeId x, std::vector<int64_t> low, std::vector<int64_t> high);
  // Shapes are taken by value or copied before emitting: emitting moves the node storage.
  // Undoes numpy broadcasting: sums x (shape broadcast from `to`) back down to shape `to`.
  NodeId sum_to(NodeId x, Shape to);

 private:
  Graph& g_;
  SourceLoc loc_;
};

// What a rule sees: copies of the forward node and its input types (emitting may move the
// graph's node storage), its id, its cotangent and which inputs need a cotangent. Rules return
// one id per input, kNone where no cotangent flows; each result has exactly that input's type.
struct VjpArgs {
  Node fwd;
  std::vector<TensorType> in;
  NodeId self;
  NodeId ct;
  std::vector<bool> need;
};

std::vector<NodeId> vjp(Builder& b, const VjpArgs& a);  // dispatches on the op's kind

// scan: `result_cts` has one entry per result (kNone where no cotangent flows); returns one
// cotangent per scan input, kNone where none flows or none is needed.
std::vector<NodeId> vjp_scan(Builder& b, NodeId scan, const std::vector<NodeId>& result_cts,
                             const std::vector<bool>& need);

std::vector<NodeId> vjp_unary(Builder& b, const VjpArgs& a);
std::vector<NodeId> vjp_binary(Builder& b, const VjpArgs& a);  // also select and cast
std::vector<NodeId> vjp_layout(Builder& b, const VjpArgs& a);
std::vector<NodeId> vjp_index(Builder& b, const VjpArgs& a);
std::vector<NodeId> vjp_reduce(Builder& b, const VjpArgs& a);  // also cumsum and top_k
std::vector<NodeId> vjp_contraction(Builder& b, const VjpArgs& a);
std::vector<NodeId> vjp_attention(Builder& b, const VjpArgs& a);
std::vector<NodeId> vjp_sparse_attention(Builder& b, const VjpArgs& a);
std::vector<NodeId> vjp_collective(Builder& b, const VjpArgs& a);

}  // namespace keel::autodiff::detail
