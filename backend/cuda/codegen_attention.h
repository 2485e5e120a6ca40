#pragma once
// Internal to the CUDA C generator: the attention family's two kernels, keel's warp-per-row f32
// kernel (codegen_attention.cpp) and the tensor-core one for bf16 products
// (codegen_attention_tc.cpp).
#include <string>

#include "backend/cuda/codegen_internal.h"
#include "ir/attention.h"

namespace keel::cuda::gen {

// The kernel's C names of an attention node's buffers (empty where the op has none).
struct AttentionPointers {
  std::string q, k, v, out, dout, lse, doc, result;
};

// Whether the tensor-core kernel takes these dims: head_dim a multiple of 16, at most 128.
bool tensor_core_attention_fits(const AttentionDims& d);
// The tensor-core kernel of attention node `id`; `scale` is the softmax scale as a C literal.
std::string emit_attention_tensor_cores(Kernel& k, NodeId id, const AttentionPointers& p,
                                        const AttentionDims& dims, const std::string& scale);

}  // namespace keel::cuda::gen
