#pragma once
// Which mesh axes each value of a program varies over (JAX shard_map's "vma"): a parameter
// varies over the axes its caller declares (a batch over "data"; a replicated weight over
// none); an op's result over the union of its inputs'; all_reduce and all_gather_invariant over
// an axis remove it; all_gather, reduce_scatter, all_to_all and axis_index add it. Loops are
// followed to a fixed point. The checks built on it (a replicated value must not vary) run at trace
// time, before anything runs.
#include <functional>
#include <set>
#include <string>
#include <vector>

#include "ir/graph.h"

namespace keel {

using AxisSet = std::set<std::string>;

// One set per node of `g`, given one per parameter (in g.params() order). With `counted_twice`,
// also collects the all_reduce sums and all_gathers (scan bodies included) whose input does
// not vary over their axis: every process would contribute the same value, counted N times;
// and the pvary nodes whose input already varies over theirs: its gradient would be summed
// again.
std::vector<AxisSet> varying_axes(const Graph& g, const std::vector<AxisSet>& params,
                                  std::vector<const Node*>* counted_twice = nullptr);

// A scan's sets grown to a fixed point: `walk` gives the body's node sets from its parameters'
// (`params`, one per scan input); each carry takes what the body's carry output adds. Returns the
// body outputs' sets of the last walk, each carry's replaced by its final set; `params` ends
// holding the final parameter sets.
std::vector<AxisSet> carry_fixed_point(
    const Graph& body, int64_t carries, std::vector<AxisSet>& params,
    const std::function<std::vector<AxisSet>(const std::vector<AxisSet>&)>& walk);

// The first node on a path from a varying parameter to `id` that brought in `axis` (the
// parameter itself, an axis_index or a reduce_scatter), for error messages; -1 if none.
NodeId variance_origin(const Graph& g, const std::vector<AxisSet>& varies, NodeId id,
                       const std::string& axis);

}  // namespace keel
