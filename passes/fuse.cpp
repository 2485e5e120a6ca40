// fuse: groups nodes into loop nests. Groups are grown from the end of the program backwards;
// a producer joins a consumer's group only when every one of its users already has a group,
// which keeps the groups acyclic and makes reverse formation order a valid schedule.
#include <fmt/format.h>

#include <algorithm>
#include <vector>

#include "ir/error.h"
#include "passes/pipeline.h"

namespace keel::passes {
namespace {

bool is_data_leaf(Op op) {
  return op == Op::parameter || op == Op::constant;
}

bool is_fusible_reduction(Op op) {
  return op == Op::reduce_sum || op == Op::reduce_max || op == Op::reduce_mean;
}

// A scan and its results (which follow it) are one Single group whose outputs are the results:
// the loop writes every result at once.
FusionGroup scan_group(const Graph& g, NodeId scan) {
  FusionGroup grp;
  grp.kind = GroupKind::Single;
  grp.nodes.push_back(scan);
  for (size_t r = static_cast<size_t>(scan) + 1;
       r < g.size() && g.nodes()[r].op == Op::scan_result && g.nodes()[r].inputs[0] == scan; ++r) {
    grp.nodes.push_back(static_cast<NodeId>(r));
    grp.outputs.push_back(static_cast<NodeId>(r));
  }
  return grp;
}

// A Single group of kernels: not a scan, and no loop op (an unfused elementwise or reduction).
bool is_kernel_call(const Graph& g, const FusionGroup& grp) {
  return grp.kind == GroupKind::Single &&
         std::all_of(grp.nodes.begin(), grp.nodes.end(), [&](NodeId id) {
           const Op op = g.node(id).op;
           return op != Op::scan && !is_elementwise(op) && !is_fusible_reduction(op);
         });
}

// Whether `next` reads a result of the call (it could not be computed by the same call).
bool reads_any(const Graph& g, NodeId next, const std::vector<NodeId>& call) {
  const std::vector<NodeId>& in = g.node(next).inputs;
  return std::any_of(in.begin(), in.end(), [&](NodeId i) {
    return std::find(call.begin(), call.end(), i) != call.end();
  });
}

// Kernels the target runs in one call, adjacent in the schedule, become one group: the call
// writes them all, so each is an output. Fused or not, as that is how the backend computes them.
void join_shared_calls(const Graph& g, const Target& target, FusionPlan& plan) {
  if (!target.shares_call) return;
  std::vector<FusionGroup> joined;
  for (FusionGroup& grp : plan.groups) {
    if (!joined.empty() && is_kernel_call(g, joined.back()) && is_kernel_call(g, grp) &&
        grp.nodes.size() == 1 && grp.nodes.front() > joined.back().nodes.back() &&
        !reads_any(g, grp.nodes.front(), joined.back().nodes) &&
        target.shares_call(g, joined.back().nodes, grp.nodes.front())) {
      joined.back().nodes.push_back(grp.nodes.front());
      joined.back().outputs.push_back(grp.nodes.front());
      continue;
    }
    joined.push_back(std::move(grp));
  }
  plan.groups = std::move(joined);
  std::fill(plan.group_of.begin(), plan.group_of.end(), -1);
  for (size_t k = 0; k < plan.groups.size(); ++k) {
    for (NodeId id : plan.groups[k].nodes) plan.group_of[static_cast<size_t>(id)] = int32_t(k);
  }
}

class Fuser {
 public:
  Fuser(const Graph& g, const std::vector<View>& views, const Target& target)
      : g_(g), views_(views), target_(target), group_(g.size(), -1), is_output_(g.size(), 0) {
    users_.resize(g.size());
    for (size_t i = 0; i < g.size(); ++i) {
      for (NodeId in : g.nodes()[i].inputs) {
        auto& u = users_[static_cast<size_t>(in)];
        if (u.empty() || u.back() != static_cast<NodeId>(i)) u.push_back(static_cast<NodeId>(i));
      }
    }
    for (NodeId o : g.outputs()) is_output_.at(static_cast<size_t>(o)) = 1;
  }

  FusionPlan run() {
    std::vector<FusionGroup> formed;
    for (size_t i = g_.size(); i-- > 0;) {
      const NodeId id = static_cast<NodeId>(i);
      if (group_[i] >= 0 || is_data_leaf(g_.node(id).op) || is_view(i)) continue;
      const int32_t index = static_cast<int32_t>(formed.size());
      const Op op = g_.node(id).op;
      if (op == Op::scan || op == Op::scan_result) {
        formed.push_back(scan_group(g_, op == Op::scan ? id : g_.node(id).inputs[0]));
        for (NodeId n : formed.back().nodes) group_[static_cast<size_t>(n)] = index;
        continue;
      }
      formed.push_back(grow(id, index));
    }
    // Later-formed groups feed earlier-formed ones, so the schedule is the reverse.
    FusionPlan plan;
    const int32_t count = static_cast<int32_t>(formed.size());
    plan.group_of.assign(g_.size(), -1);
    for (size_t i = 0; i < g_.size(); ++i) {
      if (group_[i] >= 0) plan.group_of[i] = count - 1 - group_[i];
    }
    plan.groups.assign(formed.rbegin(), formed.rend());
    for (FusionGroup& grp : plan.groups) {
      if (g_.node(grp.nodes.front()).op != Op::scan) grp.outputs = outputs_of(grp, plan.group_of);
    }
    return plan;
  }

 private:
  FusionGroup grow(NodeId root, int32_t index) {
    FusionGroup grp;
    const Op op = g_.node(root).op;
    const bool reduction = target_.fuse_reductions && is_fusible_reduction(op);
    grp.kind = is_elementwise(op) ? GroupKind::Elementwise
               : reduction        ? GroupKind::Reduction
                                  : GroupKind::Single;
    group_[static_cast<size_t>(root)] = index;
    grp.nodes.push_back(root);
    if (grp.kind == GroupKind::Single) return grp;
    // Elementwise: members share the root's shape. Reduction: producers share its input shape.
    const Shape& shape = grp.kind == GroupKind::Elementwise
                             ? g_.node(root).type.shape
                             : g_.node(g_.node(root).inputs[0]).type.shape;
    // A producer rejected now is looked at again whenever another of its users joins.
    for (size_t k = 0; k < grp.nodes.size(); ++k) {
      for (NodeId p : g_.node(grp.nodes[k]).inputs) {
        if (grp.kind == GroupKind::Reduction) absorb_casts_of(p, shape, index, grp);
        if (!can_join(p, grp.kind, shape, index)) continue;
        group_[static_cast<size_t>(p)] = index;
        grp.nodes.push_back(p);
      }
    }
    std::sort(grp.nodes.begin(), grp.nodes.end());
    return grp;
  }

  // A reduction's producer that a cast also reads (a bias gradient's input, whose bf16 copy
  // the products read): the cast joins the reduction, whose loop stores it, so the producer
  // itself need not be stored. Only when every reader of the cast is grouped already, so the
  // reduction's loop still runs before them.
  void absorb_casts_of(NodeId p, const Shape& shape, int32_t index, FusionGroup& grp) {
    const Node& n = g_.node(p);
    if (group_[static_cast<size_t>(p)] >= 0 || !is_elementwise(n.op) || n.type.shape != shape)
      return;
    std::vector<NodeId> casts;
    for (NodeId u : users_[static_cast<size_t>(p)]) {
      const int32_t ug = group_[static_cast<size_t>(u)];
      if (ug == index) continue;
      const Node& c = g_.node(u);
      // (A cast after the reduction would become the group's last node, which is its root.)
      if (ug >= 0 || c.op != Op::cast || c.type.shape != shape || u > grp.nodes.front()) return;
      for (NodeId w : users_[static_cast<size_t>(u)]) {
        if (group_[static_cast<size_t>(w)] < 0) return;
      }
      casts.push_back(u);
    }
    for (NodeId c : casts) {
      group_[static_cast<size_t>(c)] = index;
      grp.nodes.push_back(c);
    }
  }

  bool can_join(NodeId p, GroupKind kind, const Shape& shape, int32_t index) const {
    const Node& n = g_.node(p);
    const size_t i = static_cast<size_t>(p);
    if (group_[i] >= 0 || !is_elementwise(n.op) || n.type.shape != shape) return false;
    for (NodeId u : users_[i]) {
      const int32_t ug = group_[static_cast<size_t>(u)];
      // A user without a group yet would be scheduled before this group: a cycle.
      if (ug < 0) return false;
      // Values inside a reduction loop are never stored, so nobody else may read them.
      if (kind == GroupKind::Reduction && ug != index) return false;
    }
    return !(kind == GroupKind::Reduction && is_output_[i]);
  }

  std::vector<NodeId> outputs_of(const FusionGroup& grp, const std::vector<int32_t>& group_of) {
    const NodeId root = grp.nodes.back();
    if (grp.kind == GroupKind::Single) return {root};
    std::vector<NodeId> outs;
    for (NodeId id : grp.nodes) {
      const size_t i = static_cast<size_t>(id);
      bool used_outside = id == root || is_output_[i];
      for (NodeId u : users_[i]) {
        used_outside = used_outside || group_of[static_cast<size_t>(u)] != group_of[i];
      }
      if (used_outside) outs.push_back(id);
    }
    return outs;
  }

  bool is_view(size_t i) const { return !views_.empty() && views_[i].base >= 0; }

  const Graph& g_;
  const std::vector<View>& views_;
  const Target& target_;
  std::vector<int32_t> group_;  // formation index, -1 while unassigned (always, for a view)
  std::vector<char> is_output_;
  std::vector<std::vector<NodeId>> users_;  // distinct users, ascending
};

}  // namespace

FusionPlan fuse(const Graph& g, bool enabled, std::vector<View> views, const Target& target) {
  if (!views.empty() && views.size() != g.size()) {
    throw Error(
        fmt::format("[passes] fuse: {} views for a graph of {} nodes; run fold_layout on "
                    "this graph",
                    views.size(), g.size()));
  }
  if (enabled) {
    FusionPlan plan = Fuser(g, views, target).run();
    plan.views = std::move(views);
    join_shared_calls(g, target, plan);
    return plan;
  }
  FusionPlan plan;
  plan.views = std::move(views);
  plan.group_of.assign(g.size(), -1);
  for (size_t i = 0; i < g.size(); ++i) {
    if (is_data_leaf(g.nodes()[i].op) || plan.group_of[i] >= 0 ||
        plan.is_view(static_cast<NodeId>(i))) {
      continue;
    }
    const NodeId id = static_cast<NodeId>(i);
    const int32_t index = static_cast<int32_t>(plan.groups.size());
    plan.groups.push_back(g.nodes()[i].op == Op::scan ? scan_group(g, id)
                                                      : FusionGroup{GroupKind::Single, {id}, {id}});
    for (NodeId n : plan.groups.back().nodes) plan.group_of[static_cast<size_t>(n)] = index;
  }
  join_shared_calls(g, target, plan);
  return plan;
}

}  // namespace keel::passes
