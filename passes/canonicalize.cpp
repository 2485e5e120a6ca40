// canonicalize: removes ops that do nothing and folds chains of layout ops into one. Float
// identities such as x+0 and x*1 are left alone: they are not exact for -0.0 and NaN. One
// exception: zero pads of adjacent ranges added together (the gradient of slices that split a
// tensor, e.g. q, k, v out of one projection) become one concat, exact but for the sign of a
// zero (-0 + 0 is +0). A scan's xs that is a broadcast of a scalar moves into its body
// (passes/scan_constant_xs.h).
#include <algorithm>
#include <optional>

#include "passes/pipeline.h"
#include "passes/rebuild.h"
#include "passes/scan_constant_xs.h"

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

// The one axis a zero pad pads, with the range [from, to) its input covers, when it pads
// exactly one axis with 0.
struct PadRange {
  int64_t axis = -1, from = 0, to = 0;
};
std::optional<PadRange> zero_pad_range(const Node& n) {
  if (n.op != Op::pad || n.attrs.f("value") != 0.0) return std::nullopt;
  const auto &low = n.attrs.ints("low"), &high = n.attrs.ints("high");
  PadRange r;
  for (size_t d = 0; d < low.size(); ++d) {
    if (low[d] == 0 && high[d] == 0) continue;
    if (r.axis >= 0) return std::nullopt;
    r.axis = static_cast<int64_t>(d);
    r.from = low[d];
    r.to = n.type.shape[d] - high[d];
  }
  if (r.axis < 0) return std::nullopt;
  return r;
}

// add(pad(a), pad(b)) over adjacent ranges of one axis = pad(concat(a, b)); nested concats
// along that axis flatten.
std::optional<NodeId> merge_pads(Rebuilder& rb, const Node& n) {
  const Node& a = rb.dst().node(rb.mapped(n.inputs[0]));
  const Node& b = rb.dst().node(rb.mapped(n.inputs[1]));
  if (a.type != n.type || b.type != n.type) return std::nullopt;
  std::optional<PadRange> ra = zero_pad_range(a), rbr = zero_pad_range(b);
  if (!ra || !rbr || ra->axis != rbr->axis) return std::nullopt;
  const Node* first = &a;
  const Node* second = &b;
  if (rbr->to == ra->from) {
    std::swap(first, second);
    std::swap(ra, rbr);
  }
  if (ra->to != rbr->from) return std::nullopt;
  const int64_t axis = ra->axis;
  std::vector<NodeId> parts;
  for (const Node* p : {first, second}) {
    const Node& in = rb.dst().node(p->inputs[0]);
    if (in.op == Op::concat && in.attrs.i("axis") == axis) {
      parts.insert(parts.end(), in.inputs.begin(), in.inputs.end());
    } else {
      parts.push_back(p->inputs[0]);
    }
  }
  const NodeId joined = rb.emit(Op::concat, std::move(parts), Attrs{{"axis", axis}}, n.loc);
  std::vector<int64_t> low(n.type.shape.size(), 0), high(n.type.shape.size(), 0);
  low[static_cast<size_t>(axis)] = ra->from;
  high[static_cast<size_t>(axis)] = n.type.shape[static_cast<size_t>(axis)] - rbr->to;
  if (all_zero(low) && all_zero(high)) return joined;
  return rb.emit(Op::pad, {joined}, Attrs{{"low", low}, {"high", high}, {"value", 0.0}}, n.loc);
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
    case Op::all_reduce:
    case Op::all_gather:
    case Op::reduce_scatter:
    case Op::all_to_all:
      // Over an axis of one process a collective hands its input back.
      if (n.attrs.i("axis_size") == 1) return x;
      break;
    case Op::pvary:  // a type for tracing and autodiff; the values are x's
      return x;
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
    case Op::add:
      return merge_pads(rb, n);
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
    if (g.nodes()[i].op == Op::scan) {
      i += emit_scan_with_constant_xs_inlined(
          g, id, rb.dst_mut(), [&rb](NodeId old) { return rb.mapped(old); },
          [&rb](NodeId old, NodeId now) { rb.map_to(old, now); });
      continue;
    }
    if (std::optional<NodeId> now = simplify(rb, id)) {
      rb.map_to(id, *now);
    } else {
      rb.copy(id);
    }
  }
  return rb.finish();
}

}  // namespace keel::passes
