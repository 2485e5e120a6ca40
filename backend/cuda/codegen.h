#pragma once
// CUDA C generation for the CUDA backend: one kernel per unit of the fusion plan (elementwise
// loops, reductions with their producers, copies of layout ops that do not fold), their launches
// and where each argument lives, following the lowering of cuda::lower.
#include "backend/cuda/program.h"
#include "passes/pipeline.h"

namespace keel::cuda {

// Threads per block of the elementwise and copy kernels, and of reductions over more than a warp.
constexpr int32_t kBlockThreads = 256;

// generate_program throws keel::Error "[backend.cuda] ..." for a unit no kernel is generated for
// yet (collectives across processes: the open part of issue 49), naming the op and its source
// line, and for plans made for another target than cuda::lowering_target().
struct GenerateOptions {
  // matmul_precision = bf16 on sm_80 or later: the attention family on tensor cores where its
  // head_dim allows.
  bool bf16_products = false;
  // A product read only by an add in the next unit adds the other operand itself
  // (cuda.product_addends).
  bool product_addends = true;
  // A product whose sum's only use is GELU (tanh form), or whose own only use is GELU's
  // gradient, applies it as cuBLASLt's epilogue (cuda.gelu_epilogues).
  bool gelu_epilogues = true;
};
CudaProgram generate_program(const passes::Lowered& lowered, const GenerateOptions& options = {});

// The helpers every generated source starts with.
extern const char* const kPrelude;

}  // namespace keel::cuda
