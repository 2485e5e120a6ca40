#pragma once
// Collectives over named mesh axes, as op functions (ir/collective.h gives their meaning).
// The runtime tells trace/ the mesh's axis sizes at init; without a runtime every axis the
// program names has size 1. A collective's result varies over the axes its input does, minus
// the axis it reduced or gathered (ir/varying.h).
#include <cstdint>
#include <map>
#include <string>

#include "ir/collective.h"
#include "trace/ops.h"

namespace keel {

Tensor all_reduce(const Tensor& x, const std::string& axis, ReduceKind kind = ReduceKind::sum,
                  SourceLoc loc = KEEL_HERE);
// Every process's x along `dim`, in axis order. all_gather's result varies over the axis, so a
// per-process loss can read it: its gradient is the reduce_scatter of the cotangent (every
// process's use of each block, summed: the gather FSDP needs). all_gather_invariant's result is
// the same on every process, for an objective every process holds the same copy of: its gradient
// is this process's block of the cotangent.
Tensor all_gather(const Tensor& x, const std::string& axis, int64_t dim = 0,
                  SourceLoc loc = KEEL_HERE);
Tensor all_gather_invariant(const Tensor& x, const std::string& axis, int64_t dim = 0,
                            SourceLoc loc = KEEL_HERE);
Tensor reduce_scatter(const Tensor& x, const std::string& axis, int64_t dim = 0,
                      SourceLoc loc = KEEL_HERE);
// x's `dim` cut into one block per process of `axis`: block j goes to process j, and block i of
// the result is process i's block for this one (the tokens an expert-parallel layer sends to each
// expert's process, and their outputs back). Its gradient sends each cotangent block back. Over
// one process, x itself.
Tensor all_to_all(const Tensor& x, const std::string& axis, int64_t dim = 0,
                  SourceLoc loc = KEEL_HERE);
// x, typed as varying over `axis`: the input of a column-parallel layer (Megatron's copy into
// the model-parallel region). The values are x's; each process's use of it is its own share, so
// its gradient is the all_reduce sum of the processes' cotangents. Over one process, x itself.
Tensor pvary(const Tensor& x, const std::string& axis, SourceLoc loc = KEEL_HERE);
// a b (as matmul) with the contracted dimension split over `axis`: each process holds a block
// of it in a and b (a row-parallel layer's input and weight), so the result is this process's
// share of the sum. Until an all_reduce sum (or reduce_scatter) over `axis`, only linear ops may
// read it: tracing refuses a nonlinear op on it, adding it to a whole value, or returning it,
// naming the line (ir/partial.h).
Tensor matmul_partial(const Tensor& a, const Tensor& b, const std::string& axis,
                      SourceLoc loc = KEEL_HERE);
// This process's coordinate on `axis` (i32 scalar).
Tensor axis_index(const std::string& axis, SourceLoc loc = KEEL_HERE);

// The mesh the traced programs run in: axis name -> size (the runtime sets it at init and on
// a mesh change; empty: every axis has size 1).
void set_trace_mesh(std::map<std::string, int64_t> axes);
// The size of `axis` for tracing (1 for any axis of a one-device mesh); keel::Error naming `loc`
// when a mesh of several devices has no such axis.
int64_t trace_axis_size(const std::string& axis, const SourceLoc& loc);

}  // namespace keel
