// dce: drops every node that no output depends on. Parameters stay: they are the program's
// calling convention even when unused. A scan lives while any of its results is used; its
// unused ys are dropped from its body (carries stay: the loop needs them), and its body is
// cleaned the same way.
#include <vector>

#include "ir/scan.h"
#include "passes/pipeline.h"
#include "passes/rebuild.h"

namespace keel::passes {

namespace {

// Emits a live scan with only its used ys; returns how many result nodes it covered.
size_t copy_scan(Rebuilder& rb, NodeId id, const std::vector<char>& live) {
  const Node& n = rb.src().node(id);
  const ScanInfo s = scan_info(n.attrs, n.inputs.size());
  Graph body = *s.body;
  std::vector<NodeId> outs;
  std::vector<int64_t> kept;
  for (int64_t k = 0; k < s.results(); ++k) {
    if (k < s.carries || live[static_cast<size_t>(id + 1 + k)]) {
      outs.push_back(body.outputs()[static_cast<size_t>(k)]);
      kept.push_back(k);
    }
  }
  body.set_outputs(std::move(outs));
  Attrs a = n.attrs;
  a.set("body", std::make_shared<const Graph>(dce(body)));
  std::vector<NodeId> results =
      emit_scan(rb.dst_mut(), rb.mapped_inputs(id), std::move(a), n.loc, "passes");
  for (size_t j = 0; j < kept.size(); ++j)
    rb.map_to(id + 1 + static_cast<NodeId>(kept[j]), results[j]);
  return static_cast<size_t>(s.results());
}

}  // namespace

Graph dce(const Graph& g) {
  std::vector<char> live(g.size(), 0);
  for (NodeId o : g.outputs()) live.at(static_cast<size_t>(o)) = 1;
  for (NodeId p : g.params()) live.at(static_cast<size_t>(p)) = 1;
  // SSA order: every user follows its inputs, so one backward sweep reaches a fixed point.
  for (size_t i = g.size(); i-- > 0;) {
    if (!live[i]) continue;
    for (NodeId in : g.nodes()[i].inputs) live[static_cast<size_t>(in)] = 1;
  }
  Rebuilder rb(g);
  for (size_t i = 0; i < g.size(); ++i) {
    if (!live[i]) continue;
    if (g.nodes()[i].op == Op::scan) {
      i += copy_scan(rb, static_cast<NodeId>(i), live);
    } else {
      rb.copy(static_cast<NodeId>(i));
    }
  }
  return rb.finish();
}

}  // namespace keel::passes
