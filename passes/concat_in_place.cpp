// concat_in_place: the producers of a concat's operands store straight into its buffer when
// they can write through strides (fused elementwise loops, kernels the target names), so the
// join moves no bytes: on the CPU the q, k and v gradients of a fused attention become one
// [B, T, 3C] gradient, rotary's two halves one head, with no copy. Joins nest: an operand that is
// itself a concat (rotary's halves inside the q/k/v join) is placed inside the outer buffer, and so
// on down.
#include <algorithm>

#include "passes/pipeline.h"

namespace keel::passes {
namespace {

struct Placement {
  NodeId producer;  // the kernel's result
  NodeId operand;   // the concat's input: the producer, or a reshape view of it
  View producer_view, operand_view;
};

class Placer {
 public:
  Placer(const Graph& g, FusionPlan& f, const Target& target)
      : g_(g), f_(f), target_(target), users_(g.size()), output_(g.size(), 0) {
    for (size_t i = 0; i < g.size(); ++i) {
      for (NodeId in : g.nodes()[i].inputs) users_[size_t(in)].push_back(NodeId(i));
    }
    for (NodeId o : g.outputs()) output_[size_t(o)] = 1;
  }

  int run() {
    int placed = 0;
    // Outermost first: a concat placed inside another is a view by the time it is reached.
    for (size_t c = g_.size(); c-- > 0;) {
      const Node& n = g_.nodes()[c];
      if (n.op != Op::concat || f_.group_of[c] < 0 || f_.is_view(NodeId(c)) || output_[c]) {
        continue;
      }
      const NodeId id = NodeId(c);
      std::optional<std::vector<Placement>> plan =
          place(id, id, 0, row_major_strides(n.type.shape));
      if (!plan || !each_producer_once(*plan)) continue;
      for (const Placement& p : *plan) {
        f_.views[size_t(p.producer)] = p.producer_view;
        if (p.operand != p.producer) f_.views[size_t(p.operand)] = p.operand_view;
      }
      ++placed;
    }
    return placed;
  }

 private:
  bool only_user(NodeId of, NodeId user) const {
    const auto& u = users_[size_t(of)];
    return !output_[size_t(of)] && u.size() == 1 && u[0] == user;
  }

  // Two operands cannot both own the same result's bytes.
  static bool each_producer_once(const std::vector<Placement>& plan) {
    for (size_t i = 0; i < plan.size(); ++i) {
      for (size_t j = 0; j < i; ++j) {
        if (plan[i].producer == plan[j].producer) return false;
      }
    }
    return true;
  }

  // Where concat `c`'s operands go when its result lies in `base`'s buffer from `offset` with
  // `strides` (its own buffer, or its block inside an outer concat's).
  std::optional<std::vector<Placement>> place(NodeId c, NodeId base, int64_t offset,
                                              const std::vector<int64_t>& st) const {
    const Node& n = g_.node(c);
    const size_t axis = size_t(n.attrs.i("axis"));
    std::vector<Placement> out;
    int64_t at = 0;
    for (NodeId operand : n.inputs) {
      Placement p{operand, operand, {}, {}};
      // A reshape that folded into a contiguous view of its input reads the same bytes.
      if (f_.is_view(operand)) {
        const View& v = f_.views[size_t(operand)];
        if (g_.node(operand).op != Op::reshape || !v.contiguous || v.offset != 0 ||
            g_.node(operand).inputs[0] != v.base || !only_user(operand, c)) {
          return std::nullopt;
        }
        p.producer = v.base;
        if (!only_user(p.producer, operand)) return std::nullopt;
      } else if (!only_user(operand, c)) {
        return std::nullopt;
      }
      const Node& producer = g_.node(p.producer);
      const int32_t group = f_.group_of[size_t(p.producer)];
      if (group < 0) return std::nullopt;
      const Shape& shape = g_.node(operand).type.shape;
      const int64_t start = offset + at * st[axis];
      p.operand_view = {base, start, st, false};
      std::optional<std::vector<int64_t>> inner = reshape_strides(shape, st, producer.type.shape);
      if (!inner) return std::nullopt;
      p.producer_view = {base, start, *inner, false};
      at += shape[axis];
      if (producer.op == Op::concat) {  // a join inside this join: its operands go here too
        std::optional<std::vector<Placement>> nested = place(p.producer, base, start, *inner);
        if (!nested) return std::nullopt;
        out.push_back(std::move(p));
        out.insert(out.end(), nested->begin(), nested->end());
        continue;
      }
      // A fused elementwise loop stores through any strides, as it loads.
      const bool by_loop =
          is_elementwise(producer.op) && f_.groups[size_t(group)].kind == GroupKind::Elementwise;
      if (!by_loop && !(target_.writes_view && target_.writes_view(producer, p.producer_view))) {
        return std::nullopt;
      }
      out.push_back(std::move(p));
    }
    return out;
  }

  const Graph& g_;
  FusionPlan& f_;
  const Target& target_;
  std::vector<std::vector<NodeId>> users_;
  std::vector<char> output_;
};

}  // namespace

int concat_in_place(const Graph& g, FusionPlan& f, const Target& target) {
  if (f.views.empty()) return 0;
  return Placer(g, f, target).run();
}

}  // namespace keel::passes
