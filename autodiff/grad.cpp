// Reverse-mode traversal: walks the forward nodes from the loss back in SSA order, asks each
// node's VJP rule for its inputs' cotangents and sums them with `add`.
#include "autodiff/grad.h"

#include <fmt/format.h>

#include "autodiff/vjp.h"
#include "ir/error.h"
#include "ir/scan.h"

namespace keel::autodiff {
namespace {

using detail::Builder;
using detail::kNone;

std::string describe(const Graph& g, NodeId id) {
  const Node& n = g.node(id);
  return fmt::format("%{} ({} {} at {})", id, op_name(n.op), n.type.str(), n.loc.str());
}

void check_node(const Graph& g, NodeId id, std::string_view what) {
  if (id < 0 || size_t(id) >= g.size()) {
    throw Error(fmt::format("[autodiff] {} %{} is not a node of graph '{}' ({} nodes)", what, id,
                            g.name(), g.size()));
  }
}

// Nodes that carry a gradient: float, reachable from some wrt node through differentiable ops,
// and leading to the loss through differentiable ops. Everything else is pruned.
std::vector<bool> active_nodes(const Graph& g, NodeId loss, std::span<const NodeId> wrt) {
  const size_t n = size_t(loss) + 1;
  std::vector<bool> from_wrt(n, false), to_loss(n, false);
  for (NodeId w : wrt) {
    if (w <= loss && is_float(g.node(w).type.dtype)) from_wrt[size_t(w)] = true;
  }
  for (size_t i = 0; i < n; ++i) {
    const Node& node = g.nodes()[i];
    // A scan's token is not a float but carries its inputs' gradients to its results.
    const bool carries = is_float(node.type.dtype) || node.op == Op::scan;
    if (from_wrt[i] || !op_info(node.op).differentiable || !carries) continue;
    for (NodeId in : node.inputs) from_wrt[i] = from_wrt[i] || from_wrt[size_t(in)];
  }
  to_loss[size_t(loss)] = true;
  for (size_t i = n; i-- > 0;) {
    const Node& node = g.nodes()[i];
    if (!to_loss[i] || !op_info(node.op).differentiable) continue;
    for (NodeId in : node.inputs) to_loss[size_t(in)] = true;
  }
  std::vector<bool> active(n);
  for (size_t i = 0; i < n; ++i) active[i] = from_wrt[i] && to_loss[i];
  return active;
}

void check_type(const Graph& g, NodeId fwd, size_t input, NodeId ct) {
  const TensorType& want = g.node(g.node(fwd).inputs[input]).type;
  if (g.node(ct).type != want) {
    throw Error(fmt::format("[autodiff] internal: VJP of {} gave {} for input {}, expected {}",
                            describe(g, fwd), g.node(ct).type.str(), input, want.str()));
  }
}

void scan_cotangents(Graph& g, NodeId id, NodeId loss, const std::vector<bool>& active,
                     std::vector<NodeId>& ct) {
  const Node fwd = g.node(id);
  const int64_t results = scan_info(fwd.attrs, fwd.inputs.size()).results();
  std::vector<NodeId> cts;
  bool any_ct = false;
  for (int64_t k = 0; k < results; ++k) {
    const NodeId r = id + 1 + static_cast<NodeId>(k);
    cts.push_back(r <= loss ? ct[size_t(r)] : kNone);
    any_ct = any_ct || cts.back() != kNone;
  }
  std::vector<bool> need;
  bool any_need = false;
  for (NodeId in : fwd.inputs) {
    need.push_back(active[size_t(in)]);
    any_need = any_need || need.back();
  }
  if (!any_ct || !any_need) return;
  Builder b(g, fwd.loc);
  std::vector<NodeId> contrib = detail::vjp_scan(b, id, cts, need);
  for (size_t i = 0; i < contrib.size(); ++i) {
    if (contrib[i] == kNone || !need[i]) continue;
    check_type(g, id, i, contrib[i]);
    NodeId& acc = ct[size_t(fwd.inputs[i])];
    acc = acc == kNone ? contrib[i] : b.add(acc, contrib[i]);
  }
}

}  // namespace

std::vector<NodeId> append_gradients(Graph& g, NodeId loss, std::span<const NodeId> wrt) {
  check_node(g, loss, "loss");
  for (NodeId w : wrt) check_node(g, w, "wrt node");
  const TensorType loss_type = g.node(loss).type;
  if (!is_float(loss_type.dtype) || !loss_type.shape.empty()) {
    throw Error(
        fmt::format("[autodiff] loss {} must be a float scalar; reduce it first (e.g. "
                    "reduce_sum over all axes)",
                    describe(g, loss)));
  }
  const std::vector<bool> active = active_nodes(g, loss, wrt);
  std::vector<NodeId> ct(size_t(loss) + 1, kNone);
  if (active[size_t(loss)]) {
    ct[size_t(loss)] = g.add_constant(Array::scalar(1.0, loss_type.dtype), g.node(loss).loc);
  }
  for (NodeId id = loss; id >= 0; --id) {
    // A scan's results hold their cotangents until the walk reaches the scan itself.
    if (g.node(id).op == Op::scan_result) continue;
    if (g.node(id).op == Op::scan) {
      scan_cotangents(g, id, loss, active, ct);
      continue;
    }
    if (ct[size_t(id)] == kNone || !op_info(g.node(id).op).differentiable) continue;
    detail::VjpArgs args{g.node(id), {}, id, ct[size_t(id)], {}};
    bool any = false;
    for (NodeId in : args.fwd.inputs) {
      args.in.push_back(g.node(in).type);
      args.need.push_back(active[size_t(in)]);
      any = any || active[size_t(in)];
    }
    if (!any) continue;
    Builder b(g, args.fwd.loc);
    std::vector<NodeId> contrib = detail::vjp(b, args);
    for (size_t i = 0; i < contrib.size(); ++i) {
      if (contrib[i] == kNone || !args.need[i]) continue;
      check_type(g, id, i, contrib[i]);
      NodeId& acc = ct[size_t(args.fwd.inputs[i])];
      acc = acc == kNone ? contrib[i] : b.add(acc, contrib[i]);
    }
  }
  std::vector<NodeId> grads;
  for (NodeId w : wrt) {
    NodeId c = w <= loss ? ct[size_t(w)] : kNone;
    if (c == kNone) c = Builder(g, g.node(w).loc).zeros(g.node(w).type);
    grads.push_back(c);
  }
  return grads;
}

namespace {

Graph with_gradients(const Graph& fwd, size_t output, std::vector<size_t> wrt, bool value) {
  if (output >= fwd.outputs().size()) {
    throw Error(fmt::format("[autodiff] output {} does not exist; graph '{}' has {} outputs",
                            output, fwd.name(), fwd.outputs().size()));
  }
  if (wrt.empty()) {
    for (size_t i = 0; i < fwd.params().size(); ++i) wrt.push_back(i);
  }
  std::vector<NodeId> nodes;
  for (size_t p : wrt) {
    if (p >= fwd.params().size()) {
      throw Error(fmt::format("[autodiff] parameter {} does not exist; graph '{}' has {}", p,
                              fwd.name(), fwd.params().size()));
    }
    nodes.push_back(fwd.params()[p]);
  }
  Graph g = fwd;
  NodeId loss = fwd.outputs()[output];
  std::vector<NodeId> outs = append_gradients(g, loss, nodes);
  if (value) outs.insert(outs.begin(), loss);
  g.set_outputs(std::move(outs));
  return g;
}

}  // namespace

Graph grad(const Graph& g, size_t output, std::vector<size_t> wrt) {
  return with_gradients(g, output, std::move(wrt), false);
}

Graph value_and_grad(const Graph& g, size_t output, std::vector<size_t> wrt) {
  return with_gradients(g, output, std::move(wrt), true);
}

}  // namespace keel::autodiff
