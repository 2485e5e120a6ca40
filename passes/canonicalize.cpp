// canonicalize: removes ops that do nothing and folds chains of layout ops into one. Float
// identities such as x+0 and x*1 are left alone: they are not exact for -0.0 and NaN.
#include <algorithm>
#include <optional>

#include "passes/pipeline.h"
#include "passes/rebuild.h"

namespace keel::passes {
namespace {

bool all_zero(const std::vector<int64_t>& v) {
  return std::all_of(v.begin(), v.end(), [](int64_t x) { return x == 0; });
}

bool is_identity_perm(const std::vector<int64_t>& perm) {
  for (size_t i = 0; i < perm.size(); ++i) {
    if (perm[i] != static_cast<int64_t>(i)) return false;
  }
  return true;
}

// Rewrites one node whose inputs are already rewritten. Returns the new id that replaces it, or
// nothing when no rule applies and the node is copied as it is.
std::optional<NodeId> simplify(Rebuilder& rb, NodeId old) {
  const Node& n = rb.src().node(old);
  if (n.op == Op::parameter || n.inputs.empty()) return std::nullopt;
  const NodeId x = rb.mapped(n.inputs[0]);
  const Node& in = rb.dst().node(x);
  const Shape& in_shape = in.type.shape;
  switch (n.op) {
    case Op::cast:
      if (n.attrs.dtype("dtype") == in.type.dtype) return x;
      break;
    case Op::reshape:
    case Op::broadcast: {
      const Shape& to = n.attrs.ints("shape");
      if (to == in_shape) return x;
      // reshape(reshape(y)) = reshape(y); broadcast(broadcast(y)) = broadcast(y): a shape
      // that broadcasts to an intermediate broadcasts to its target too.
      if (in.op == n.op) {
        const NodeId y = in.inputs[0];
        if (rb.dst().node(y).type.shape == to) return y;
        return rb.emit(n.op, {y}, n.attrs, n.loc);
      }
      break;
    }
    case Op::transpose: {
      const auto& perm = n.attrs.ints("perm");
      if (is_identity_perm(perm)) return x;
      if (in.op == Op::transpose) {
        // out dim i = mid dim perm[i] = y dim inner[perm[i]].
        const auto& inner = in.attrs.ints("perm");
        std::vector<int64_t> composed(perm.size());
        for (size_t i = 0; i < perm.size(); ++i) composed[i] = inner[perm[i]];
        const NodeId y = in.inputs[0];
        if (is_identity_perm(composed)) return y;
        return rb.emit(Op::transpose, {y}, Attrs{{"perm", composed}}, n.loc);
      }
      break;
    }
    case Op::slice:
      // Starting at 0 with an unchanged shape means every stride selects each element once.
      if (all_zero(n.attrs.ints("start")) && n.type.shape == in_shape) return x;
      break;
    case Op::concat:
      if (n.inputs.size() == 1) return x;
      break;
    case Op::pad:
      if (all_zero(n.attrs.ints("low")) && all_zero(n.attrs.ints("high"))) return x;
      break;
    default:
      break;
  }
  return std::nullopt;
}

}  // namespace

Graph canonicalize(const Graph& g) {
  Rebuilder rb(g);
  for (size_t i = 0; i < g.size(); ++i) {
    const NodeId id = static_cast<NodeId>(i);
    if (std::optional<NodeId> now = simplify(rb, id)) {
      rb.map_to(id, *now);
    } else {
      rb.copy(id);
    }
  }
  return rb.finish();
}

}  // namespace keel::passes
