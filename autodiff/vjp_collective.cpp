// VJP rules for collectives, as JAX's shard_map types them: the cotangent of a value that varies
// over an axis is this process's own; of one that does not, the same on every process.
#include "autodiff/vjp.h"
#include "ir/collective.h"

namespace keel::autodiff::detail {
namespace {

Attrs axis_attrs(const Node& f) {
  return {{"axis", f.attrs.s("axis")}, {"axis_size", f.attrs.i("axis_size")}};
}

// This process's block of `ct` along `dim` (blocks of x's size, in axis order).
NodeId own_block(Builder& b, const VjpArgs& a, NodeId ct) {
  const auto dim = a.fwd.attrs.i("dim");
  const int64_t block = a.in[0].shape[static_cast<size_t>(dim)];
  NodeId index = b.emit(Op::axis_index, {}, axis_attrs(a.fwd));
  NodeId start = b.mul(index, b.scalar(static_cast<double>(block), DType::i32));
  NodeId iota =
      b.emit(Op::iota, {}, {{"shape", Shape{block}}, {"dim", int64_t{0}}, {"dtype", DType::i32}});
  NodeId rows = b.add(iota, b.broadcast(start, Shape{block}));
  return b.emit(Op::gather, {ct, rows}, {{"axis", dim}});
}

}  // namespace

std::vector<NodeId> vjp_collective(Builder& b, const VjpArgs& a) {
  const Node& f = a.fwd;
  std::vector<NodeId> out(f.inputs.size(), kNone);
  if (f.inputs.empty() || !a.need[0]) return out;
  switch (f.op) {
    case Op::all_reduce: {
      if (parse_reduce_kind(f.attrs.s("reduce")) == ReduceKind::sum) {
        // Every process's x counts once in the sum the objective holds. The sum is the same on
        // every process, so its cotangent must be too: typed back through pvary, whose check
        // refuses one that varies (the sum met per-process values with no pvary between, and
        // the other processes' uses of it would be missing from the gradient).
        // Over one process pvary is x itself (trace/collectives.h), so no check is asked there.
        if (f.attrs.i("axis_size") == 1) {
          out[0] = a.ct;
          break;
        }
        Attrs at = axis_attrs(f);
        at.set("gradient_of", std::string("all_reduce"));
        out[0] = b.emit(Op::pvary, {a.ct}, std::move(at));
        break;
      }
      // max / min: the cotangent goes where x attained the result.
      NodeId hit = b.compare(f.inputs[0], a.self, "eq");
      out[0] = b.select(hit, a.ct, b.zeros(a.in[0]));
      break;
    }
    case Op::all_gather: {
      if (gathers_invariant(f)) {  // every process holds the cotangent: its own block of it
        out[0] = own_block(b, a, a.ct);
        break;
      }
      // Each process's cotangent is its own use of every block: block r sums over processes.
      Attrs at = axis_attrs(f);
      at.set("dim", f.attrs.i("dim"));
      out[0] = b.emit(Op::reduce_scatter, {a.ct}, std::move(at));
      break;
    }
    case Op::reduce_scatter: {
      Attrs at = axis_attrs(f);
      at.set("dim", f.attrs.i("dim"));
      at.set("invariant", int64_t{0});
      out[0] = b.emit(Op::all_gather, {a.ct}, std::move(at));
      break;
    }
    case Op::all_to_all: {  // a permutation of blocks: its transpose sends each back
      Attrs at = axis_attrs(f);
      at.set("dim", f.attrs.i("dim"));
      out[0] = b.emit(Op::all_to_all, {a.ct}, std::move(at));
      break;
    }
    default:
      break;
  }
  return out;
}

}  // namespace keel::autodiff::detail
