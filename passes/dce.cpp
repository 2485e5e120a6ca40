// dce: drops every node that no output depends on. Parameters stay: they are the program's
// calling convention even when unused.
#include <vector>

#include "passes/pipeline.h"
#include "passes/rebuild.h"

namespace keel::passes {

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
    if (live[i]) rb.copy(static_cast<NodeId>(i));
  }
  return rb.finish();
}

}  // namespace keel::passes
