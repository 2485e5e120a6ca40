#pragma once
/// @file
/// Collectives over one named mesh axis (docs/ops.md). Attributes: `axis` (the name) and
/// `axis_size` (its size, so shapes are static and the program is typed for one mesh).
///   all_reduce(x) {reduce: "sum" | "max" | "min"}  -> x's type; every process gets the result
///   all_gather(x) {dim, invariant} -> x with dim multiplied by axis_size, blocks in axis order;
///                                invariant 1: the result is typed the same on every process
///                                (JAX's all_gather_invariant), 0 or absent: it varies over the
///                                axis (JAX's all_gather), which decides its gradient
///   reduce_scatter(x) {dim}   -> the sum over the axis, of which this process keeps block
///                                axis_index of dim (dim divided by axis_size)
///   all_to_all(x) {dim}       -> x's type: dim cut into axis_size blocks, block j sent to process
///                                j; block i of the result is process i's block axis_index
///                                (an expert-parallel dispatch); it moves values, adds nothing
///   axis_index() {}           -> i32 scalar, this process's coordinate on the axis
///   pvary(x) {}               -> x, typed as varying over the axis: each process's use of it
///                                is its own share, so its gradient is all_reduce sum (a unary
///                                op: no exchange in the forward); {gradient_of} marks the one
///                                all_reduce's gradient adds, for the compile's message
/// Sums are f32 for f32 and bf16 inputs, combined in one fixed order (dist/fixed_order.h), so
/// every process gets the same bits and they do not depend on which process started first.
#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <string_view>

#include "ir/graph.h"

namespace keel {

/// How all_reduce combines the processes' values (its `reduce` attribute).
enum class ReduceKind : uint8_t { sum, max, min };
std::string_view reduce_kind_name(ReduceKind k);  ///< "sum", "max" or "min"
/// The kind named `s`; keel::Error naming the attribute when `s` is not sum, max or min.
ReduceKind parse_reduce_kind(std::string_view s);

/// Whether all_gather node `n` is the invariant one (its `invariant` attribute is 1).
bool gathers_invariant(const Node& n);
/// Type rule of the family: checks the axis attributes and the dimension rules.
TensorType infer_collective(Op op, std::span<const TensorType> in, const Attrs& a);
/// Whether running `g` exchanges data with other processes: a collective other than axis_index
/// over an axis of more than one process, in g or in a scan body.
bool exchanges_with_peers(const Graph& g);

/// What one run of a program sends through one kind of collective.
struct CollectiveTraffic {
  int64_t calls = 0;  ///< collectives over an axis of more than one process
  int64_t bytes = 0;  ///< their inputs' bytes on one process
};
/// Per collective ("all_reduce", "all_gather", "reduce_scatter", "all_to_all") in one run of `g`, a
/// scan body's once per iteration; kinds `g` does not run are absent.
std::map<std::string, CollectiveTraffic> collective_traffic(const Graph& g);

}  // namespace keel
