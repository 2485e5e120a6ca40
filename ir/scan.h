#pragma once
// scan: a loop over a body graph, like jax.lax.scan.
//   inputs  = carries c[0..m), stacked xs[0..n) (leading dim L each), loop-invariant consts
//   body    = graph (c..., x slices without the leading dim..., consts...) -> (c'..., y...)
//   results = final carries, then each y stacked to [L, ...]
// Nodes have one output, so a scan node's own value is an empty token (bool[0]); it is followed
// immediately by one scan_result{index=k} node per result, k = 0..R-1 in order, and nothing else
// reads it. Attributes: body (graph), carries (m), xs (n), length (L >= 1), reverse (0 or 1:
// iterate i = L-1..0).
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "ir/graph.h"

namespace keel {

struct ScanInfo {
  const Graph* body = nullptr;
  int64_t carries = 0, xs = 0, consts = 0, ys = 0, length = 0;
  bool reverse = false;
  int64_t results() const { return carries + ys; }
};

// The scan node's attributes read back (throws keel::Error naming a missing attribute).
ScanInfo scan_info(const Attrs& a, size_t num_inputs);
// The token type of every scan node.
TensorType scan_token_type();
// The types of a scan's results (final carries, stacked ys); checks only that the body outputs
// exist.
std::vector<TensorType> scan_result_types(const Attrs& a, size_t num_inputs);
// Type rule of scan: the body's parameters match the inputs (xs without their leading dim),
// its first outputs match the carries. Throws keel::Error with the rule.
TensorType infer_scan(std::span<const TensorType> in, const Attrs& a);

// Attributes of a scan node.
Attrs scan_attrs(GraphRef body, int64_t carries, int64_t xs, int64_t length, bool reverse);

// Appends a scan node and its scan_result nodes; returns the results' ids. Errors as
// Graph::emit ("[api] scan at file:line: rule").
std::vector<NodeId> emit_scan(Graph& g, std::vector<NodeId> inputs, Attrs attrs,
                              const SourceLoc& loc, std::string_view api);

}  // namespace keel
