// From fusion groups to units, one per group (none for a dead one): its loop nest, its reduction
// loop, its kernel call (with the kernels sharing it) or its scan loop. The fusion pass decides
// what runs together; this only names what each unit loads, computes and stores.
#include <algorithm>

#include "backend/c_source/units.h"

#include "backend/c_source/c_source.h"

namespace keel::c_source {
namespace {

bool is_reduce(Op op) {
  return op == Op::reduce_sum || op == Op::reduce_max || op == Op::reduce_mean;
}

class Planner {
 public:
  Planner(const Graph& g, const passes::FusionPlan& f, const passes::Target& t)
      : g_(g), f_(f), t_(t), users_(g.size()) {
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
    const NodeId front = grp.nodes.front();
    if (grp.kind == passes::GroupKind::Single) {
      if (g_.node(front).op == Op::scan) {
        Unit u;
        u.kind = UnitKind::Scan;
        u.group = gi;
        u.root = front;
        u.stores.assign(grp.nodes.begin() + 1, grp.nodes.end());
        units_.push_back(std::move(u));
      } else if (grp.nodes.size() == 1) {
        plan_single(front, gi);
      } else {
        plan_shared_call(grp, gi);
      }
      return;
    }
    const size_t n = grp.nodes.size();
    for (size_t i = 0; i < n; ++i) {
      const bool reduce_root = grp.kind == passes::GroupKind::Reduction && i + 1 == n;
      if (reduce_root ? !is_reduce(g_.node(grp.nodes[i]).op) : !inlinable(grp.nodes[i], gi)) {
        fail("internal: fusion group {} holds {}, which a {} loop cannot compute", gi,
             describe(g_, grp.nodes[i]), passes::group_kind_name(grp.kind));
      }
    }
    if (grp.kind == passes::GroupKind::Elementwise) {
      plan_loop(grp.nodes, gi);
    } else {
      plan_reduction(grp.nodes, gi);
    }
  }

  // One loop over the group's shape that stores every value read after it.
  void plan_loop(const std::vector<NodeId>& nodes, int32_t gi) {
    Unit u;
    u.kind = UnitKind::Loop;
    u.group = gi;
    for (NodeId id : nodes) {
      if (escapes(id, gi)) u.stores.push_back(id);
    }
    if (u.stores.empty()) return;  // dead: nothing reads it
    u.root = u.stores.front();
    for (NodeId id : u.stores) {
      if (g_.node(id).type.shape != g_.node(u.root).type.shape) {
        fail("internal: fusion group {} stores {} and {}, of two shapes; one loop cannot", gi,
             describe(g_, u.root), describe(g_, id));
      }
    }
    close_over(u, u.stores, gi);
    units_.push_back(std::move(u));
  }

  // Producers of the reduced input's shape that are read after the group (casts fuse absorbed)
  // are stored from inside the reduction loop.
  void plan_reduction(const std::vector<NodeId>& nodes, int32_t gi) {
    const NodeId root = nodes.back();
    std::vector<NodeId> producers(nodes.begin(), nodes.end() - 1);
    if (!escapes(root, gi)) {  // a dead reduction (dce disabled): only its producers' loop
      plan_loop(producers, gi);
      return;
    }
    Unit u;
    u.kind = UnitKind::Reduce;
    u.group = gi;
    u.root = root;
    const Shape& in_shape = g_.node(g_.node(root).inputs[0]).type.shape;
    for (NodeId id : producers) {
      if (!escapes(id, gi)) continue;
      if (g_.node(id).type.shape != in_shape) {
        fail("internal: fusion group {} stores {}, not of its reduction's input shape", gi,
             describe(g_, id));
      }
      u.stores.push_back(id);
    }
    std::vector<NodeId> targets = u.stores;
    targets.push_back(g_.node(root).inputs[0]);
    close_over(u, targets, gi);
    units_.push_back(std::move(u));
  }

  // Kernels that share one call (the target's shares_call): the first is the call's root; the
  // backend writes the others only in the pairs shares_call allows.
  void plan_shared_call(const passes::FusionGroup& grp, int32_t gi) {
    for (size_t k = 1; k < grp.nodes.size(); ++k) {
      const std::vector<NodeId> call(grp.nodes.begin(), grp.nodes.begin() + std::ptrdiff_t(k));
      if (!t_.shares_call || !t_.shares_call(g_, call, grp.nodes[k])) {
        fail("internal: fusion group {} puts {} in the call of {}, which cannot compute it", gi,
             describe(g_, grp.nodes[k]), describe(g_, grp.nodes.front()));
      }
    }
    if (std::none_of(grp.nodes.begin(), grp.nodes.end(),
                     [&](NodeId id) { return escapes(id, gi); }))
      return;  // dead: nothing reads any of them
    Unit u;
    u.kind = UnitKind::Kernel;
    u.group = gi;
    u.root = grp.nodes.front();
    u.also.assign(grp.nodes.begin() + 1, grp.nodes.end());
    units_.push_back(std::move(u));
  }

  void plan_single(NodeId id, int32_t gi) {
    if (!escapes(id, gi)) return;  // dead: nothing reads it
    const Node& n = g_.node(id);
    Unit u;
    u.group = gi;
    u.root = id;
    if (is_elementwise(n.op)) {
      u.kind = UnitKind::Loop;
      u.stores = {id};
      close_over(u, {id}, gi);
    } else if (is_reduce(n.op)) {
      u.kind = UnitKind::Reduce;
      close_over(u, {n.inputs[0]}, gi);
    } else {
      u.kind = UnitKind::Kernel;
    }
    units_.push_back(std::move(u));
  }

  // Fills compute and loads with everything `targets` need from inside the group, in SSA order.
  void close_over(Unit& u, const std::vector<NodeId>& targets, int32_t gi) {
    std::vector<char> seen(g_.size(), 0);
    std::vector<NodeId> stack(targets.begin(), targets.end());
    while (!stack.empty()) {
      const NodeId id = stack.back();
      stack.pop_back();
      if (seen[id]) continue;
      seen[id] = 1;
      const Node& n = g_.node(id);
      const bool inside = f_.group_of[id] == gi;
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

  const Graph& g_;
  const passes::FusionPlan& f_;
  const passes::Target& t_;
  std::vector<std::vector<NodeId>> users_;
  std::vector<char> is_output_;
  std::vector<Unit> units_;
};

}  // namespace

std::vector<Unit> plan_units(const Graph& g, const passes::FusionPlan& fusion,
                             const passes::Target& target) {
  return Planner(g, fusion, target).run();
}

std::string describe(const Graph& g, NodeId id) {
  const Node& n = g.node(id);
  std::string args;
  for (NodeId in : n.inputs) args += fmt::format("{}%{}", args.empty() ? "" : ", ", in);
  return fmt::format("%{} = {}({}) {}", id, op_name(n.op), args, n.type.str());
}

}  // namespace keel::c_source
