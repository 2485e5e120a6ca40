#pragma once
// From a fusion plan to units of code, one per group (none for a dead one): a loop nest, a
// reduction loop, a kernel call (with the kernels sharing it) or a scan loop; what the CPU and
// CUDA code generators each write their own code for. Values are buffers named after nodes.
#include <cstdint>
#include <string>
#include <vector>

#include "ir/graph.h"
#include "passes/pipeline.h"

namespace keel::c_source {

// A value read inside a loop: `node`'s value from `storage`'s buffer (a reshape inlined into a
// loop reads its input's bytes with its own shape, so its storage is its input). A folded layout
// op (passes::View) is its own storage: its pointer points into its base's buffer.
struct Load {
  NodeId node = -1;
  NodeId storage = -1;
};

enum class UnitKind { Loop, Reduce, Kernel, Scan };

// The code of one fusion group: a loop nest, a reduction loop, a kernel call or a scan loop.
struct Unit {
  UnitKind kind = UnitKind::Kernel;
  int32_t group = -1;           // the fusion group it is the code of
  NodeId root = -1;             // Loop: a node whose shape is the loop's; Reduce: the reduction
  std::vector<NodeId> compute;  // values computed inline, in SSA order (not loads)
  std::vector<Load> loads;      // values read from buffers
  std::vector<NodeId> stores;   // values written to their buffers (Reduce: root not included)
  // Kernel: the rest of its group, computed by the same call (Target::shares_call).
  std::vector<NodeId> also;
};
// Scan: root is the scan node, stores its scan_result nodes; the loop calls the body's own
// generated function once per iteration.

// The fusion plan's groups as units, in its order; a group the loops cannot compute, or kernels
// in one call that `target` does not let share it, is an internal error.
std::vector<Unit> plan_units(const Graph& g, const passes::FusionPlan& fusion,
                             const passes::Target& target);

// Donation: whether `node` can be computed straight into parameter `param`'s buffer. No unit after
// the one that writes it reads the parameter, and that unit, if it reads it, is a loop reading
// it only at the element it writes (in_place.cpp).
bool computable_in_place(const Graph& g, const passes::FusionPlan& fusion,
                         const std::vector<Unit>& units, NodeId node, NodeId param);

// Short description for comments and errors: "%5 = exp(%4) f32[2,3]".
std::string describe(const Graph& g, NodeId id);

}  // namespace keel::c_source
