#pragma once
// The trace-time check of what varies across processes (DESIGN contract 8): arguments vary
// over the axes CompileOptions declares; every result must vary over none unless declared, so
// a replicated parameter updated from a batch, or a metric read before its all_reduce, is an
// error naming the result, its leaf, the axis and the source lines, before anything runs.
#include <map>
#include <span>
#include <string>
#include <vector>

#include "ir/graph.h"
#include "ir/varying.h"

namespace keel {
struct CompileOptions;
}

namespace keel::detail {

struct LeafRange;

// Leaf paths of a Tree structure string ("{wte=T,wpe=T,}" -> "wte", "wpe").
std::vector<std::string> leaf_paths(const std::string& structure);

// What each leaf of each result varies over, checked against the declaration (keel::Error
// "[compile] ..." on the first result that varies over an undeclared axis, and on an all_reduce
// sum or all_gather of a value that does not vary over its axis).
// What may vary is `o`'s varying_arguments and varying_results, with their leaves' additions.
std::vector<AxisSet> check_varying(const Graph& g, const std::string& function,
                                   const std::vector<LeafRange>& arguments,
                                   const std::vector<LeafRange>& results, const CompileOptions& o);

// Refuses (keel::Error "[compile] ...", naming the lines) the first use of a partial sum
// (ir/partial.h) that needs the whole one, and a result that is still a partial sum; the
// arguments vary over the axes `o` declares.
void check_partial(const Graph& g, const std::string& function,
                   const std::vector<LeafRange>& arguments, const CompileOptions& o);

}  // namespace keel::detail
