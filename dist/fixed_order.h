#pragma once
// Reductions over a communicator in one fixed order, so every process gets the same bits, and
// N processes holding the tree sums of K items each add up exactly like one process holding
// N*K items whenever N is a power of two (then each process's items are a subtree) or K is 1
// (then the processes' order is the items' order). Not otherwise: at N = 3, K = 2 one process
// adds ((x0 + x1) + x2) + ((x3 + x4) + x5), the processes ((x0 + x1) + (x2 + x3)) + (x4 + x5).
// The order
// ("the tree") over n items, used by the step's micro-batch sums too:
//   n odd:  ((x0 + x1) + x2) + ...        n even: tree(first half) + tree(second half)
// A sum runs as a reduce-scatter (each process combines one slice from every process, in rank
// order by the tree) and an all-gather of the slices, in segments to bound the extra memory.
#include <cstdint>

#include "dist/communicator.h"
#include "ir/collective.h"
#include "ir/dtype.h"

namespace keel::dist {

// In place over `blocks` consecutive arrays of `count` elements: block 0 receives their tree
// combination. f32 and bf16 combine in f32 (bf16 rounded once at the end), integers exactly.
void combine_blocks(ReduceKind kind, DType dtype, void* blocks, int64_t n_blocks, int64_t count);

void all_reduce(Communicator& c, ReduceKind kind, DType dtype, const void* in, void* out,
                int64_t count);
// in: c.size() blocks of `count` elements; out: rank's block of the sum.
void reduce_scatter(Communicator& c, DType dtype, const void* in, void* out, int64_t count);
// out: c.size() blocks of `count` elements in rank order.
void all_gather(Communicator& c, DType dtype, const void* in, void* out, int64_t count);

}  // namespace keel::dist
