#pragma once
/// @file
/// Why a program was needed: the difference against the nearest earlier program of the same
/// function, in user terms (input shapes, constants with their lines, ops, bundle, codegen).
#include <optional>
#include <string>
#include <vector>

#include "ir/graph.h"
#include "policy/bundle.h"

namespace keel::diag {

/// What distinguishes one program from another of the same function, for explain_miss.
struct ProgramFacts {
  Graph graph;            ///< the traced graph
  policy::Bundle bundle;  ///< the compatibility bundle it was compiled under
  std::string codegen;    ///< CompileOptions::fingerprint()
  /// The graph's inputs in the caller's terms ("argument 1 leaf 'tokens'"), where known: not
  /// part of the program (renaming a field compiles nothing), only of its explanation.
  std::vector<std::string> input_names = {};
};

/// "first compile" when there is no earlier program. Otherwise every difference, joined by
/// "; ", in this order: bundle fields ("bundle field compiler.version changed: gcc 12 -> gcc
/// 13"), codegen options ("codegen option flags changed: -O2 -> -O3"), then ir/diff's first
/// graph difference ("input 0 (argument 1 leaf 'tokens') shape f32[8,256] -> f32[4,256]",
/// with `now`'s input names where it has them; "constant at f.cpp:3 changed
/// 2 -> 3", "op added at f.cpp:9: mul"). All equal: "same program (recompiled after eviction
/// or a cache miss)".
std::string explain_miss(const ProgramFacts& now, const std::optional<ProgramFacts>& before);

/// The codegen part alone: one "codegen option K changed: A -> B" per differing option when
/// both fingerprints are `key=value` items (separated by newlines or ';'), else one
/// "codegen options changed: A -> B". Empty when equal.
std::vector<std::string> codegen_differences(const std::string& before, const std::string& now);

/// Facts rebuilt from what a cache entry stores (canonical graph text, bundle JSON, codegen
/// fingerprint), so disk misses are explained across restarts. `source` names the entry in
/// errors; a bad graph or bundle is an InputError.
ProgramFacts facts_from_text(const std::string& graph_text, const std::string& bundle_json,
                             const std::string& codegen, const std::string& source);

}  // namespace keel::diag
