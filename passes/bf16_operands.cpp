// bf16_operands: with matmul_precision = bf16, every f32 dot_general multiplies bf16 copies of
// its operands (preferred_element_type f32), and each value is rounded once however many
// products read it: a weight by its forward and its input-gradient products, an activation by
// its forward and weight-gradient products, a cotangent by both of its gradient products. The
// cast is a loop of its own, which fusion merges into the loop that produces the value, so an
// activation only products read is stored as bf16 alone. Rounding is elementwise, so it moves
// across reshapes, transposes and broadcasts: the cast reads the value's own buffer and the
// layout ops are replayed on the copy, where they stay views.
#include <algorithm>
#include <map>
#include <vector>

#include "passes/bf16_rules.h"
#include "passes/pipeline.h"
#include "passes/rebuild.h"

namespace keel::passes {
namespace {

using bf16::moves_across;
using bf16::rounds_operands;

// Values whose copy waits for the first product: a parameter's or a constant's (which keeps it
// out of the arena longer) and a scan result's (a scan's results must follow it).
bool copied_late(Op op) {
  return op == Op::parameter || op == Op::constant || op == Op::scan_result;
}

class Bf16Operands {
 public:
  explicit Bf16Operands(const Graph& g) : g_(g), rb_(g), rounded_(g.size(), 0) {
    for (const Node& n : g.nodes()) {
      if (!rounds_operands(g, n)) continue;
      for (NodeId x : n.inputs) rounded_[static_cast<size_t>(base_of(x))] = 1;
    }
  }

  Graph run() {
    for (size_t i = 0; i < g_.size(); ++i) {
      const NodeId id = static_cast<NodeId>(i);
      const Node& n = g_.node(id);
      if (!rounds_operands(g_, n)) {
        rb_.copy(id);
        // The copy of a value is made where the value is, so the loop making it can make both.
        if (rounded_[i] && !copied_late(n.op) && n.op != Op::scan) cast_of(id);
        continue;
      }
      Attrs attrs = n.attrs;
      attrs.set("preferred_element_type", DType::f32);
      const NodeId lhs = rounded(n.inputs[0]), rhs = rounded(n.inputs[1]);
      rb_.map_to(id, rb_.emit(Op::dot_general, {lhs, rhs}, std::move(attrs), n.loc));
    }
    return rb_.finish();
  }

 private:
  NodeId base_of(NodeId x) const {
    while (moves_across(g_.node(x).op)) x = g_.node(x).inputs[0];
    return x;
  }

  // The bf16 copy of an old value (made on first use), as a new id. A value widened from bf16
  // (a scan body's bf16 parameter, bf16_scan_operands) is its own copy: the widening is exact.
  NodeId cast_of(NodeId base) {
    const Node& b = g_.node(base);
    if (b.op == Op::cast && g_.node(b.inputs[0]).type.dtype == DType::bf16) {
      return rb_.mapped(b.inputs[0]);
    }
    auto it = casts_.find(base);
    if (it != casts_.end()) return it->second;
    const NodeId c =
        rb_.emit(Op::cast, {rb_.mapped(base)}, {{"dtype", DType::bf16}}, g_.node(base).loc);
    casts_.emplace(base, c);
    return c;
  }

  // Operand x of a product, read from its base's bf16 copy through x's layout ops (cse merges
  // the layout ops two products replay alike).
  NodeId rounded(NodeId x) {
    const Node& n = g_.node(x);
    if (!moves_across(n.op)) return cast_of(x);
    return rb_.emit(n.op, {rounded(n.inputs[0])}, n.attrs, n.loc);
  }

  const Graph& g_;
  Rebuilder rb_;
  std::vector<char> rounded_;       // per old node: a product reads its bf16 copy
  std::map<NodeId, NodeId> casts_;  // old value -> its bf16 copy (new id)
};

}  // namespace

Graph bf16_operands(const Graph& g) {
  const bool scans = std::any_of(g.nodes().begin(), g.nodes().end(),
                                 [](const Node& n) { return n.op == Op::scan; });
  return scans ? Bf16Operands(bf16_scan_operands(g)).run() : Bf16Operands(g).run();
}

}  // namespace keel::passes
