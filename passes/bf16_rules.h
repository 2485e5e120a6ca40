#pragma once
// What bf16_operands and bf16_scan_operands agree on: which products round their operands, and
// which layout ops rounding moves across.
#include "ir/graph.h"

namespace keel::passes::bf16 {

// Rounding is elementwise, so it commutes with these (the copy replays them).
inline bool moves_across(Op op) {
  return op == Op::reshape || op == Op::transpose || op == Op::broadcast;
}

// A product of f32 operands with an f32 result: the ones matmul_precision = bf16 rounds.
inline bool rounds_operands(const Graph& g, const Node& n) {
  return n.op == Op::dot_general && n.type.dtype == DType::f32 &&
         g.node(n.inputs[0]).type.dtype == DType::f32;
}

}  // namespace keel::passes::bf16
