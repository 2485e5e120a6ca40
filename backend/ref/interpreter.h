#pragma once
// The reference interpreter: runs any verified graph op by op in plain loops. It is the
// oracle every other backend is checked against, so it stays simple and obviously correct.
#include <span>
#include <vector>

#include "ir/array.h"
#include "ir/graph.h"

namespace keel::ref {

// Runs `g` on `inputs` (one per parameter, matching its type) and returns one Array per output.
// Throws keel::Error "[ref] ..." when an input does not match its parameter.
std::vector<Array> interpret(const Graph& g, std::span<const Array> inputs);

// Evaluates a single node given its input values (used by interpret and by tests).
Array eval_node(const Node& node, std::span<const Array> inputs);

}  // namespace keel::ref
