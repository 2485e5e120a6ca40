#pragma once
#include <cstdint>
#include <optional>
#include <span>
#include <string_view>

namespace keel {

enum class Op : uint8_t {
#define KEEL_OP(name, lo, hi, kind, diff) name,
#include "ir/ops.def"
#undef KEEL_OP
};

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
  Scan,
  TopK,
  Contraction,
  Attention,
  Collective,
  Loop
};

struct OpInfo {
  Op op;
  std::string_view name;
  int min_inputs;
  int max_inputs;  // -1: variadic
  OpKind kind;
  bool differentiable;
};

const OpInfo& op_info(Op op);
inline std::string_view op_name(Op op) {
  return op_info(op).name;
}
std::optional<Op> parse_op(std::string_view name);
std::span<const OpInfo> all_ops();
inline bool is_elementwise(Op op) {
  OpKind k = op_info(op).kind;
  return k == OpKind::Unary || k == OpKind::Binary || k == OpKind::Compare || k == OpKind::Select ||
         k == OpKind::Cast;
}

// Directions of the compare op, stored as its "direction" attribute.
enum class CompareDir : uint8_t { eq, ne, lt, le, gt, ge };
std::string_view compare_name(CompareDir d);
std::optional<CompareDir> parse_compare(std::string_view s);

}  // namespace keel
