#include "ir/op.h"

#include <array>

namespace keel {

static constexpr OpInfo kOps[] = {
#define KEEL_OP(name, lo, hi, kind, diff) {Op::name, #name, lo, hi, OpKind::kind, diff},
#include "ir/ops.def"
#undef KEEL_OP
};

const OpInfo& op_info(Op op) {
  return kOps[static_cast<size_t>(op)];
}

std::span<const OpInfo> all_ops() {
  return kOps;
}

std::optional<Op> parse_op(std::string_view name) {
  for (const OpInfo& i : kOps) {
    if (i.name == name) return i.op;
  }
  return std::nullopt;
}

static constexpr std::array<std::string_view, 6> kCompareNames = {"eq", "ne", "lt",
                                                                  "le", "gt", "ge"};

std::string_view compare_name(CompareDir d) {
  return kCompareNames[static_cast<size_t>(d)];
}

std::optional<CompareDir> parse_compare(std::string_view s) {
  for (size_t i = 0; i < kCompareNames.size(); ++i) {
    if (kCompareNames[i] == s) return static_cast<CompareDir>(i);
  }
  return std::nullopt;
}

}  // namespace keel
