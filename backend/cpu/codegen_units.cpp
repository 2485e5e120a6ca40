// From fusion groups to units. A fused group becomes one loop nest per distinct shape of the
// values it must store (usually one); a group the loops cannot express runs node by node.
#include <algorithm>
#include <map>

#include "backend/cpu/codegen_internal.h"
#include "ir/attention.h"

namespace keel::cpu::gen {
namespace {

bool is_reduce(Op op) {
  return op == Op::reduce_sum || op == Op::reduce_max || op == Op::reduce_mean;
}

class Planner {
 public:
  Planner(const Graph& g, const passes::FusionPlan& f) : g_(g), f_(f), users_(g.size()) {
    for (const Node& n : g.nodes()) {
      const NodeId id = static_cast<NodeId>(&n - g.nodes().data());
      for (NodeId in : n.inputs) users_[in].push_back(id);
    }
    is_output_.assign(g.size(), 0);
    for (NodeId o : g.outputs()) is_output_[o] = 1;
  }

  std::vector<Unit> run() {
    check_coverage();
    for (size_t gi = 0; gi < f_.groups.size(); ++gi) plan_group(static_cast<int32_t>(gi));
    pair_attention();
    return std::move(units_);
  }

 private:
  void check_coverage() const {
    if (f_.group_of.size() != g_.size()) {
      fail(
          "internal: the fusion plan covers {} nodes but graph '{}' has {}; lower() must plan "
          "the graph it returns",
          f_.group_of.size(), g_.name(), g_.size());
    }
    std::vector<int> seen(g_.size(), 0);
    for (size_t gi = 0; gi < f_.groups.size(); ++gi) {
      for (NodeId id : f_.groups[gi].nodes) {
        if (id < 0 || static_cast<size_t>(id) >= g_.size() ||
            f_.group_of[id] != static_cast<int32_t>(gi) || seen[id]++) {
          fail("internal: fusion group {} lists %{}, whose group_of disagrees", gi, id);
        }
      }
    }
    for (size_t id = 0; id < g_.size(); ++id) {
      const Op op = g_.nodes()[id].op;
      if (!seen[id] && op != Op::parameter && op != Op::constant &&
          !f_.is_view(static_cast<NodeId>(id))) {
        fail("internal: fusion plan leaves {} outside every group", describe(g_, id));
      }
    }
  }

  // Used after the group ends: by a node of another group or as a program output.
  bool escapes(NodeId id, int32_t gi) const {
    if (is_output_[id]) return true;
    return std::any_of(users_[id].begin(), users_[id].end(),
                       [&](NodeId u) { return f_.group_of[u] != gi; });
  }

  bool inlinable(NodeId id, int32_t gi) const {
    const Node& n = g_.node(id);
    if (is_elementwise(n.op) || n.op == Op::broadcast) return true;
    return n.op == Op::reshape && f_.group_of[n.inputs[0]] != gi;  // a load with another shape
  }

  void plan_group(int32_t gi) {
    const passes::FusionGroup& grp = f_.groups[gi];
    if (grp.nodes.empty()) return;
    const NodeId root = grp.nodes.back();
    const size_t n = grp.nodes.size();
    if (g_.node(grp.nodes.front()).op == Op::scan) {
      Unit u;
      u.kind = UnitKind::Scan;
      u.group = gi;
      u.root = grp.nodes.front();
      u.stores.assign(grp.nodes.begin() + 1, grp.nodes.end());
      units_.push_back(std::move(u));
      return;
    }
    bool fused = grp.kind != passes::GroupKind::Single;
    for (size_t i = 0; i < n && fused; ++i) {
      const bool reduce_root = grp.kind == passes::GroupKind::Reduction && i + 1 == n;
      fused = reduce_root ? is_reduce(g_.node(root).op) : inlinable(grp.nodes[i], gi);
    }
    if (!fused) {
      for (NodeId id : grp.nodes) plan_single(id, gi);
    } else if (grp.kind == passes::GroupKind::Elementwise) {
      plan_loops(grp.nodes, gi, {});
    } else {
      plan_reduction(grp.nodes, gi);
    }
  }

  // One loop per distinct shape among the values to store; `skip` are stored elsewhere.
  void plan_loops(const std::vector<NodeId>& nodes, int32_t gi, const std::vector<NodeId>& skip) {
    std::map<Shape, std::vector<NodeId>> by_shape;
    std::vector<Shape> order;
    for (NodeId id : nodes) {
      if (!escapes(id, gi) || std::find(skip.begin(), skip.end(), id) != skip.end()) continue;
      const Shape& s = g_.node(id).type.shape;
      if (!by_shape.count(s)) order.push_back(s);
      by_shape[s].push_back(id);
    }
    for (const Shape& s : order) {
      Unit u;
      u.kind = UnitKind::Loop;
      u.group = gi;
      u.root = by_shape[s].front();
      u.stores = by_shape[s];
      close_over(u, u.stores, gi);
      units_.push_back(std::move(u));
    }
  }

  // Producers of the reduced input's shape are stored from inside the reduction loop.
  void plan_reduction(const std::vector<NodeId>& nodes, int32_t gi) {
    const NodeId root = nodes.back();
    const Shape& in_shape = g_.node(g_.node(root).inputs[0]).type.shape;
    std::vector<NodeId> inside;
    const bool reduce_used = escapes(root, gi);
    for (size_t i = 0; i + 1 < nodes.size() && reduce_used; ++i) {
      if (escapes(nodes[i], gi) && g_.node(nodes[i]).type.shape == in_shape) {
        inside.push_back(nodes[i]);
      }
    }
    std::vector<NodeId> producers(nodes.begin(), nodes.end() - 1);
    plan_loops(producers, gi, inside);
    if (!reduce_used) return;
    Unit u;
    u.kind = UnitKind::Reduce;
    u.group = gi;
    u.root = root;
    u.stores = inside;
    std::vector<NodeId> targets = inside;
    targets.push_back(g_.node(root).inputs[0]);
    close_over(u, targets, gi);
    units_.push_back(std::move(u));
  }

  void plan_single(NodeId id, int32_t gi) {
    if (!escapes(id, gi) && std::none_of(users_[id].begin(), users_[id].end(),
                                         [&](NodeId u) { return f_.group_of[u] == gi; })) {
      return;  // dead: nothing reads it
    }
    const Node& n = g_.node(id);
    Unit u;
    u.group = gi;
    u.root = id;
    if (is_elementwise(n.op)) {
      u.kind = UnitKind::Loop;
      u.stores = {id};
      close_over(u, {id}, gi, /*only=*/id);
    } else if (is_reduce(n.op)) {
      u.kind = UnitKind::Reduce;
      close_over(u, {n.inputs[0]}, gi, id);
    } else {
      u.kind = UnitKind::Kernel;
    }
    units_.push_back(std::move(u));
  }

  // Fills compute and loads with everything `targets` need from inside the group (or only the
  // node `only`, for node-by-node units), in SSA order.
  void close_over(Unit& u, const std::vector<NodeId>& targets, int32_t gi, NodeId only = -1) {
    std::vector<char> seen(g_.size(), 0);
    std::vector<NodeId> stack(targets.begin(), targets.end());
    while (!stack.empty()) {
      const NodeId id = stack.back();
      stack.pop_back();
      if (seen[id]) continue;
      seen[id] = 1;
      const Node& n = g_.node(id);
      const bool inside = only >= 0 ? id == only : f_.group_of[id] == gi;
      if (!inside) {
        u.loads.push_back({id, id});
      } else if (n.op == Op::reshape) {
        u.loads.push_back({id, n.inputs[0]});
      } else {
        u.compute.push_back(id);
        for (NodeId in : n.inputs) stack.push_back(in);
      }
    }
    std::sort(u.compute.begin(), u.compute.end());
    std::sort(u.loads.begin(), u.loads.end(),
              [](const Load& a, const Load& b) { return a.node < b.node; });
  }

  // Kernel calls that share one pass over the attention tiles: an attention_lse right before
  // the attention over the same q, k and doc ids (cse puts it there), and attention_dq, _dk and
  // _dv of the same inputs (the VJP emits them in a row). Adjacent with the same inputs, so
  // nothing dies between them and the later ones' buffers are free when the call runs.
  static bool is_attention_grad(Op op) {
    return op == Op::attention_dq || op == Op::attention_dk || op == Op::attention_dv;
  }
  bool shares_pass(const Unit& u, const Node& second) const {
    const Node& first = g_.node(u.root);
    if (is_attention_grad(first.op) && is_attention_grad(second.op)) {
      for (NodeId a : u.also) {
        if (g_.node(a).op == second.op) return false;
      }
      return first.op != second.op && first.inputs == second.inputs &&
             first.attrs.f("scale") == second.attrs.f("scale") &&
             attention_layout(first.attrs) == attention_layout(second.attrs);
    }
    if (first.op != Op::attention_lse || second.op != Op::attention || !u.also.empty()) {
      return false;
    }
    const bool docs = first.inputs.size() == 3;
    return second.inputs.size() == (docs ? 4u : 3u) && second.inputs[0] == first.inputs[0] &&
           second.inputs[1] == first.inputs[1] && (!docs || second.inputs[3] == first.inputs[2]) &&
           second.attrs.f("scale") == first.attrs.f("scale") &&
           attention_layout(second.attrs) == attention_layout(first.attrs);
  }

  void pair_attention() {
    std::vector<Unit> out;
    for (size_t i = 0; i < units_.size(); ++i) {
      Unit& u = units_[i];
      while (u.kind == UnitKind::Kernel && i + 1 < units_.size() &&
             units_[i + 1].kind == UnitKind::Kernel &&
             shares_pass(u, g_.node(units_[i + 1].root))) {
        u.also.push_back(units_[i + 1].root);
        ++i;
      }
      out.push_back(std::move(u));
    }
    units_ = std::move(out);
  }

  const Graph& g_;
  const passes::FusionPlan& f_;
  std::vector<std::vector<NodeId>> users_;
  std::vector<char> is_output_;
  std::vector<Unit> units_;
};

}  // namespace

std::vector<Unit> plan_units(const Graph& g, const passes::FusionPlan& fusion) {
  return Planner(g, fusion).run();
}

std::string describe(const Graph& g, NodeId id) {
  const Node& n = g.node(id);
  std::string args;
  for (NodeId in : n.inputs) args += fmt::format("{}%{}", args.empty() ? "" : ", ", in);
  return fmt::format("%{} = {}({}) {}", id, op_name(n.op), args, n.type.str());
}

}  // namespace keel::cpu::gen
