// recompute_elementwise: a cheap elementwise value (add, sub, mul, neg of values that stay live
// anyway) that a far-away node reads — the backward reading what the forward computed — is
// recomputed next to that reader instead of being stored until then, as XLA's fusion duplicates
// cheap producers. The GELU backward read seven stored buffers per element; it now reads the
// pre-activation and the tanh. A clone repeats the stored value's operations on the same inputs;
// only FMA contraction, which may fuse them differently inside the reader's loop, can move a last
// bit.
#include <algorithm>
#include <vector>

#include "passes/pipeline.h"
#include "passes/rebuild.h"

namespace keel::passes {
namespace {

constexpr NodeId kFar = 64;   // a reader this many nodes later is far
constexpr int kMaxDepth = 4;  // clones recompute short chains only

bool cheap(Op op) {
  return op == Op::add || op == Op::sub || op == Op::mul || op == Op::neg;
}

class Remat {
 public:
  explicit Remat(const Graph& g)
      : g_(g), rb_(g), stays_(g.size(), 0), depth_(g.size(), kMaxDepth + 1) {
    // A value is read far away by a kernel (or is an output): it stays stored whatever happens.
    std::vector<char> kept(g.size(), 0), far_loop(g.size(), 0);
    for (size_t i = 0; i < g.size(); ++i) {
      const Node& n = g.nodes()[i];
      const bool loop = is_elementwise(n.op);
      for (NodeId in : n.inputs) {
        if (static_cast<NodeId>(i) - in >= kFar)
          (loop ? far_loop : kept)[static_cast<size_t>(in)] = 1;
      }
    }
    for (NodeId o : g.outputs()) kept[static_cast<size_t>(o)] = 1;
    // In SSA order: whether each value can be recomputed (and from how deep a chain), and
    // whether it stays live anyway (then a clone may read it).
    for (size_t i = 0; i < g.size(); ++i) {
      const Node& n = g.nodes()[i];
      if (cheap(n.op)) {
        int depth = 1;
        for (NodeId w : n.inputs) {
          if (!stays_[static_cast<size_t>(w)])
            depth = std::max(depth, depth_[static_cast<size_t>(w)] + 1);
        }
        depth_[i] = depth;
      }
      const bool leaf = n.op == Op::parameter || n.op == Op::constant || numel(n.type.shape) == 1;
      const bool layout = op_info(n.op).kind == OpKind::Layout;
      stays_[i] = leaf || (layout && stays_[static_cast<size_t>(n.inputs[0])]) || kept[i] ||
                  (far_loop[i] && !clonable(static_cast<NodeId>(i)));
    }
  }

  Graph run() {
    for (size_t i = 0; i < g_.size(); ++i) {
      const NodeId id = static_cast<NodeId>(i);
      const Node& n = g_.node(id);
      if (!is_elementwise(n.op)) {
        rb_.copy(id);  // kernels and scans read stored values
        continue;
      }
      bool changed = false;
      std::vector<NodeId> inputs = rb_.mapped_inputs(id);
      for (size_t k = 0; k < n.inputs.size(); ++k) {
        const NodeId v = n.inputs[k];
        if (id - v >= kFar && clonable(v)) {
          inputs[k] = clone(v, id);
          changed = true;
        }
      }
      if (changed) {
        rb_.map_to(id, rb_.emit(n.op, std::move(inputs), n.attrs, n.loc));
      } else {
        rb_.copy(id);
      }
    }
    return rb_.finish();
  }

 private:
  bool clonable(NodeId v) const {
    return !stays_[static_cast<size_t>(v)] && depth_[static_cast<size_t>(v)] <= kMaxDepth;
  }

  // v recomputed for the reader at `at`, reusing a clone made for a nearby reader; inputs that
  // do not stay live are recomputed too.
  NodeId clone(NodeId v, NodeId at) {
    return clones_.copy(v, at, [this](NodeId w) { return clonable(w); });
  }

  const Graph& g_;
  Rebuilder rb_;
  std::vector<char> stays_;  // live where a far reader runs, whether or not it is recomputed
  std::vector<int> depth_;   // the chain of cheap ops recomputing it takes (> kMaxDepth: never)
  ChainCopies clones_{rb_, kFar};
};

}  // namespace

Graph recompute_elementwise(const Graph& g) {
  return Remat(g).run();
}

}  // namespace keel::passes
