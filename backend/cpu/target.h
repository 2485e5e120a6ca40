#pragma once
// What the CPU backend's generated loops and kernels can read and write, for the lowering passes
// (passes::Target), and lower() with it: the only lowering whose plans generate_source follows.
#include <cstddef>
#include <vector>

#include "passes/pipeline.h"

namespace keel::cpu {

// Readers that take a view with any strides: loops, dot_general (BLAS leading dimensions), the
// copy kernels of layout ops that cannot fold, and concat; the attention family's q, k, v, out
// and dout too, when each row of head_dim elements is contiguous.
bool reads_view(const Node& reader, size_t index, const passes::View& v);
// The attention family stores its results through a view whose head_dim rows are contiguous.
bool writes_view(const Node& writer, const passes::View& v);
// One pass over the attention tiles: an attention_lse and the attention of its q, k and doc ids;
// attention_dq, _dk and _dv of the same inputs. Same inputs, so nothing dies inside the call.
bool shares_call(const Graph& g, const std::vector<NodeId>& call, NodeId next);
// The CPU's target: the rules above, 64-byte buffers (a cache line, AVX-512's width), fused
// reductions, and scan loops that ping-pong each carry through a spare buffer.
const passes::Target& lowering_target();
// passes::lower with the CPU's target in `options`.
passes::Lowered lower(const Graph& graph, passes::PassOptions options = {});

}  // namespace keel::cpu
