#pragma once
// Internal to the CUDA C generator: the attention family's two kernels, keel's warp-per-row f32
// kernel (codegen_attention.cpp) and the tensor-core one for bf16 products
// (codegen_attention_tc.cpp), and the row helpers the sparse attention kernels share
// (codegen_sparse_attention.cpp).
#include <cstdint>
#include <string>

#include "backend/cuda/codegen_internal.h"
#include "ir/attention.h"

namespace keel::cuda::gen {

// Warps in a block of the warp-per-row kernels.
inline constexpr int64_t kRowKernelWarps = kBlockThreads / 32;

// A head_dim-long row held in a warp's registers: lane l holds elements l, l + 32, ... (nj each).
struct RowRegisters {
  int64_t head_dim = 0;
  int64_t nj = 1;
};
// Code (each line starting with `indent`) that loads r[nj] from ptr[at + d].
std::string load_row(const RowRegisters& s, const std::string& reg, const std::string& ptr,
                     const std::string& at, const std::string& indent);
// Code declaring float `name`: the warp's sum of reg[j] * ptr[at + d] over the row.
std::string dot_row(const RowRegisters& s, const std::string& name, const std::string& reg,
                    const std::string& ptr, const std::string& at, const std::string& indent);
// Code adding factor * ptr[at + d] to registers reg[j].
std::string add_row(const RowRegisters& s, const std::string& reg, const std::string& factor,
                    const std::string& ptr, const std::string& at, const std::string& indent);
// Code storing `value` (an expression of j) at ptr[at + d].
std::string store_row(const RowRegisters& s, const std::string& ptr, const std::string& at,
                      const std::string& value, const std::string& indent);
// Code declaring registers reg[nj], zeroed.
std::string zero_row(const RowRegisters& s, const std::string& reg, const std::string& indent);

// Sets a warp-per-row kernel's launch (block, synchronizes, what) for node `id`; false, with no
// grid (no kernel), when there are no rows or they are empty.
bool begin_row_kernel(Kernel& k, NodeId id, int64_t rows, int64_t head_dim);
// The kernel of warp-per-row `body` (C code over `row`, `lane` given) for rows 0..rows-1: each
// warp takes rows grid-stride; sets the launch's grid.
std::string row_kernel(Kernel& k, int64_t rows, const std::string& body);

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
