// Donation's one hazard: a program writing an output into its parameter's buffer while a later
// part of it still reads the parameter. Both code generators ask this before they do.
#include <algorithm>

#include "backend/c_source/units.h"

namespace keel::c_source {
namespace {

// The buffers a unit reads (a view's base for a view).
std::vector<NodeId> reads(const Graph& g, const passes::FusionPlan& f, const Unit& u) {
  std::vector<NodeId> ids;
  for (const Load& l : u.loads) ids.push_back(f.storage_of(l.storage));
  if (u.kind == UnitKind::Kernel || u.kind == UnitKind::Scan) {
    for (NodeId in : g.node(u.root).inputs) ids.push_back(f.storage_of(in));
  }
  for (NodeId also : u.also) {
    for (NodeId in : g.node(also).inputs) ids.push_back(f.storage_of(in));
  }
  return ids;
}

bool writes(const Unit& u, NodeId id) {
  if ((u.kind == UnitKind::Reduce || u.kind == UnitKind::Kernel) && u.root == id) return true;
  if (std::find(u.also.begin(), u.also.end(), id) != u.also.end()) return true;
  return std::find(u.stores.begin(), u.stores.end(), id) != u.stores.end();
}

// A loop reads `param` only at the element it writes: every load of it has the loop's shape
// and reads the buffer itself, not a view of it.
bool same_element(const Graph& g, const passes::FusionPlan& f, const Unit& u, NodeId param) {
  if (u.kind != UnitKind::Loop) return false;
  const Shape& shape = g.node(u.root).type.shape;
  return std::all_of(u.loads.begin(), u.loads.end(), [&](const Load& l) {
    if (f.storage_of(l.storage) != param) return true;
    return l.storage == param && g.node(l.node).type.shape == shape;
  });
}

}  // namespace

bool computable_in_place(const Graph& g, const passes::FusionPlan& fusion,
                         const std::vector<Unit>& units, NodeId node, NodeId param) {
  size_t writer = units.size();
  for (size_t i = 0; i < units.size() && writer == units.size(); ++i) {
    if (writes(units[i], node)) writer = i;
  }
  if (writer == units.size()) return false;
  for (size_t i = 0; i < units.size(); ++i) {
    const std::vector<NodeId> r = reads(g, fusion, units[i]);
    if (std::find(r.begin(), r.end(), param) == r.end()) continue;
    if (i > writer || (i == writer && !same_element(g, fusion, units[i], param))) return false;
  }
  return true;
}

}  // namespace keel::c_source
