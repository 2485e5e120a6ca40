#pragma once
// The copy engine behind transpose, broadcast, slice and dot_general's operand permutes: elements
// indexed by `shape` move from src (strides in elements, 0 = broadcast) to dst.
#include <cstddef>
#include <cstdint>

#include "backend/cpu/abi.h"

namespace keel::cpu::detail {

struct StridedCopy {
  int rank = 0;
  int64_t shape[KEEL_MAX_RANK] = {};
  int64_t dst_stride[KEEL_MAX_RANK] = {};
  int64_t src_stride[KEEL_MAX_RANK] = {};
};

// Copies every element; esize is 1, 2, 4 or 8 bytes. Parallel above kParallelMin elements.
void strided_copy(void* dst, const void* src, size_t esize, StridedCopy c);

// dst (row-major) = src transposed: out dim i is in dim perm[i].
void permute(void* dst, const void* src, size_t esize, const int64_t* in_shape, int rank,
             const int64_t* perm);

// Row-major strides of `shape` (rank <= KEEL_MAX_RANK) written to `out`.
void row_major_strides(const int64_t* shape, int rank, int64_t* out);

}  // namespace keel::cpu::detail
