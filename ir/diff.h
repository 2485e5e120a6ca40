#pragma once
// Names the first structural difference between two programs, for recompile explanations.
#include <string>
#include <vector>

#include "ir/graph.h"

namespace keel {

// "" when the graphs hash the same. Otherwise one line such as
// "constant at model.cpp:42 changed 0.5 -> 0.25", "input 1 shape f32[8,256] -> f32[4,256]",
// "op added at model.cpp:57: mul", "op removed at model.cpp:57: mul". `input_names` names
// `after`'s inputs where known ("input 1 (argument 1 leaf 'tokens') shape ...").
std::string explain_difference(const Graph& before, const Graph& after,
                               const std::vector<std::string>& input_names = {});

}  // namespace keel
