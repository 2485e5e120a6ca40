#pragma once
/// @file
/// The ops of the graph IR and what is known about each (the table is ir/ops.def).
#include <cstdint>
#include <optional>
#include <span>
#include <string_view>

namespace keel {

/// Every op of the IR, in the order of ir/ops.def.
enum class Op : uint8_t {
/// Expands each row of ir/ops.def; here to the op's enumerator.
#define KEEL_OP(name, lo, hi, kind, diff) name,
#include "ir/ops.def"
#undef KEEL_OP
};

/// The family an op belongs to, which decides its type rule.
enum class OpKind : uint8_t {
  Leaf,
  Random,
  Unary,
  Binary,
  Compare,
  Select,
  Cast,
  Layout,
  Index,
  Reduce,
  Cumulative,  ///< cumsum: a running total along one axis
  TopK,
  Contraction,
  Attention,
  SparseAttention,  ///< attention over listed keys (ir/sparse_attention.h)
  Collective,
  Scan  ///< scan and its scan_result: a loop over a body graph
};

/// One row of the op table.
struct OpInfo {
  Op op;                  ///< the op
  std::string_view name;  ///< as printed and parsed ("dot_general")
  int min_inputs;         ///< fewest inputs a node of the op takes
  int max_inputs;         ///< -1: variadic
  OpKind kind;            ///< its family
  bool differentiable;    ///< it has a VJP
};

/// The table row of `op`.
const OpInfo& op_info(Op op);
/// The op's name, as printed and parsed.
inline std::string_view op_name(Op op) {
  return op_info(op).name;
}
std::optional<Op> parse_op(std::string_view name);  ///< the op named `name`; nullopt if none
std::span<const OpInfo> all_ops();                  ///< the whole table, in Op order
/// Unary, binary, compare, select and cast ops: each output element comes from the
/// corresponding (broadcast) input elements.
inline bool is_elementwise(Op op) {
  OpKind k = op_info(op).kind;
  return k == OpKind::Unary || k == OpKind::Binary || k == OpKind::Compare || k == OpKind::Select ||
         k == OpKind::Cast;
}

/// Directions of the compare op, stored as its "direction" attribute.
enum class CompareDir : uint8_t { eq, ne, lt, le, gt, ge };
std::string_view compare_name(CompareDir d);  ///< "eq", "ne", "lt", "le", "gt" or "ge"
/// The direction named `s`; nullopt if none.
std::optional<CompareDir> parse_compare(std::string_view s);

}  // namespace keel
