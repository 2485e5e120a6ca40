#pragma once
// What the CUDA backend's generated kernels can read, for the lowering passes (passes::Target),
// and lower() with it: the only lowering whose plans generate_program follows.
#include "passes/pipeline.h"

namespace keel::cuda {

// Elementwise and reduction kernels index any view (strides per dim); 256-byte buffers (what
// cuMemAlloc aligns to, whole 128-byte lines for coalesced loads); reductions run their
// elementwise producers inside their own kernel.
const passes::Target& lowering_target();
// passes::lower with the CUDA target in `options`.
passes::Lowered lower(const Graph& graph, passes::PassOptions options = {});

}  // namespace keel::cuda
