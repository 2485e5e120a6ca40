// place_collectives: where a collective sits in the order decides what it keeps alive. A gather
// of a program input (ZeRO stage 3's parameter slices), with the layout ops and casts over it,
// is repeated next to each node that reads it 64 or more nodes later, so the whole
// tensor lives only where it is read, in the forward and again in the backward, as FSDP
// re-gathers; the original goes when nothing near reads it. A scan reads its operands as they
// are (a gathered stack stays gathered across it; train/ fetches a scanned stack's layers
// inside the scan instead). A reduce_scatter runs as soon
// as its operand exists, with the elementwise and layout ops (not broadcasts, which grow) that
// feed only it, so a whole gradient is scattered while the backward goes on instead of waiting,
// whole, for the end. Every process runs the same program, so the collectives keep one order
// across processes; no value changes.
#include <vector>

#include "passes/pipeline.h"
#include "passes/rebuild.h"

namespace keel::passes {
namespace {

constexpr NodeId kRegatherDistance = 64;  // a reader this many nodes after a gather gets its own

class Placement {
 public:
  explicit Placement(const Graph& g)
      : g_(g),
        rb_(g),
        readers_(g.size()),
        regather_(g.size(), 0),
        eager_(g.size(), 0),
        placed_(g.size(), 0) {
    for (size_t i = 0; i < g.size(); ++i) {
      const Node& n = g.nodes()[i];
      for (NodeId in : n.inputs)
        readers_[static_cast<size_t>(in)].push_back(static_cast<NodeId>(i));
      const bool gather = n.op == Op::all_gather && g.node(n.inputs[0]).op == Op::parameter;
      const bool over = (is_layout(n.op) || n.op == Op::cast) && !n.inputs.empty() &&
                        regather_[static_cast<size_t>(n.inputs[0])];
      regather_[i] = gather || over;
    }
    std::vector<char> output(g.size(), 0);
    for (NodeId o : g.outputs()) output[static_cast<size_t>(o)] = 1;
    for (size_t i = g.size(); i-- > 0;) {
      const Node& n = g.nodes()[i];
      const bool cheap = (is_elementwise(n.op) || is_layout(n.op)) && n.op != Op::broadcast;
      bool only_eager = !readers_[i].empty() && !output[i];
      for (NodeId r : readers_[i]) only_eager = only_eager && eager_[static_cast<size_t>(r)];
      eager_[i] = n.op == Op::reduce_scatter || (cheap && only_eager);
    }
  }

  Graph run() {
    for (size_t i = 0; i < g_.size(); ++i) {
      // An eager node has run already unless this is the first moment its inputs exist.
      if (!placed_[i]) place(static_cast<NodeId>(i));
    }
    Graph out = rb_.finish();
    return copies_.empty() ? out : dce(out);  // the gathers replaced by repeats go
  }

 private:
  void place(NodeId id) {
    const Node& n = g_.node(id);
    std::vector<NodeId> inputs;
    bool changed = false;
    if (n.op != Op::scan && n.op != Op::parameter && !eager_[static_cast<size_t>(id)]) {
      inputs = rb_.mapped_inputs(id);
      for (size_t k = 0; k < n.inputs.size(); ++k) {
        const NodeId v = n.inputs[k];
        if (regather_[static_cast<size_t>(v)] && id - v >= kRegatherDistance) {
          inputs[k] = regathered(v, id);
          changed = true;
        }
      }
    }
    if (changed) {
      rb_.map_to(id, rb_.emit(n.op, std::move(inputs), n.attrs, n.loc));
    } else {
      rb_.copy(id);
    }
    placed_[static_cast<size_t>(id)] = 1;
    // A scan's results follow it with nothing between: their readers wait for the last.
    held_.push_back(id);
    const size_t next = static_cast<size_t>(id) + 1;
    if (next < g_.size() && g_.nodes()[next].op == Op::scan_result) return;
    std::vector<NodeId> done;
    done.swap(held_);
    for (NodeId d : done) {
      for (NodeId r : readers_[static_cast<size_t>(d)]) {
        if (eager_[static_cast<size_t>(r)] && !placed_[static_cast<size_t>(r)] && ready(r)) {
          place(r);
        }
      }
    }
  }

  bool ready(NodeId id) const {
    for (NodeId in : g_.node(id).inputs) {
      if (!placed_[static_cast<size_t>(in)]) return false;
    }
    return true;
  }

  // The chain `v` emitted again for the reader at `at`, shared by readers near it.
  NodeId regathered(NodeId v, NodeId at) {
    return copies_.copy(v, at, [this](NodeId w) { return regather_[static_cast<size_t>(w)] != 0; });
  }

  const Graph& g_;
  Rebuilder rb_;
  std::vector<std::vector<NodeId>> readers_;
  std::vector<char> regather_;  // a program input's gather, or a layout op or cast of one
  std::vector<char> eager_;     // runs as soon as its inputs exist
  std::vector<char> placed_;    // in the new graph already
  std::vector<NodeId> held_;    // placed, their eager readers not yet released (a scan's results)
  ChainCopies copies_{rb_, kRegatherDistance};
};

}  // namespace

Graph place_collectives(const Graph& g) {
  return Placement(g).run();
}

}  // namespace keel::passes
