#pragma once
// A scan's xs that is a broadcast of a scalar (a stack of one value: zeros, or the -0.0 handle a
// scanned stack's gradient is taken against) becomes that broadcast inside the body, per
// iteration, so the stack is never stored; nested scans the same. Part of canonicalize.
#include <functional>

#include "ir/graph.h"

namespace keel::passes {

// Emits scan node `old` of `src` into `dst` with each such xs moved into its body (the
// broadcast's scalar passed as a new last const); `mapped` gives the new id of an old input and
// `map_to` records the new id of each old result node. Returns how many result nodes follow the
// scan in `src`.
size_t emit_scan_with_constant_xs_inlined(const Graph& src, NodeId old, Graph& dst,
                                          const std::function<NodeId(NodeId)>& mapped,
                                          const std::function<void(NodeId, NodeId)>& map_to);

}  // namespace keel::passes
