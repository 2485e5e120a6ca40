#pragma once
// Re-emits a graph node by node with remapped ids: the common skeleton of the graph passes.
// Parameters keep their index, params() keeps its order, outputs keep theirs and their aliases.
#include <functional>
#include <map>
#include <vector>

#include "ir/graph.h"

namespace keel::passes {

class Rebuilder {
 public:
  explicit Rebuilder(const Graph& src);

  const Graph& src() const { return src_; }
  const Graph& dst() const { return dst_; }
  Graph& dst_mut() { return dst_; }  // for nodes emitted in groups (a scan and its results)
  // The new id of an old node; throws when the pass has not mapped it yet (a pass bug).
  NodeId mapped(NodeId old) const;
  void map_to(NodeId old, NodeId now) { map_.at(static_cast<size_t>(old)) = now; }
  // Copies an old node with its inputs remapped and maps it; returns its new id.
  NodeId copy(NodeId old);
  // Appends a new node whose inputs are new ids; its type is inferred and checked by emit.
  NodeId emit(Op op, std::vector<NodeId> inputs, Attrs attrs, const SourceLoc& loc);
  // The old node's inputs as new ids.
  std::vector<NodeId> mapped_inputs(NodeId old) const;
  // The finished graph: params() and outputs() remapped. Every parameter must have been mapped.
  Graph finish();

 private:
  const Graph& src_;
  Graph dst_;
  std::vector<NodeId> map_;
};

// Chains of nodes emitted again next to a far reader, each copy shared by the readers within
// `distance` nodes after the one it was made for: recompute_elementwise's clones of cheap values,
// place_collectives' repeated gathers.
class ChainCopies {
 public:
  ChainCopies(Rebuilder& rb, NodeId distance) : rb_(rb), distance_(distance) {}
  // Old node `v` emitted again (or a nearby copy) for the reader at old position `at`; its
  // inputs for which `repeat` holds are copied the same way, the others read as mapped.
  NodeId copy(NodeId v, NodeId at, const std::function<bool(NodeId)>& repeat);
  bool empty() const { return copies_.empty(); }

 private:
  struct Made {
    NodeId id, at;
  };
  Rebuilder& rb_;
  NodeId distance_;
  std::map<NodeId, Made> copies_;
};

}  // namespace keel::passes
