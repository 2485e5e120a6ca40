// The CPU backend's lowering target: which of its loops and kernels take strided views.
#include "backend/cpu/target.h"

#include "ir/attention.h"
#include "ir/op.h"

namespace keel::cpu {
namespace {

bool reads_strided(Op op) {
  return is_elementwise(op) || op == Op::reduce_sum || op == Op::reduce_max ||
         op == Op::reduce_mean || op == Op::dot_general || passes::is_layout(op) ||
         op == Op::concat;
}

bool row_contiguous(const passes::View& v) {
  return !v.strides.empty() && v.strides.back() == 1;
}

}  // namespace

bool reads_view(const Node& reader, size_t index, const passes::View& v) {
  if (reads_strided(reader.op)) return true;
  if (op_info(reader.op).kind != OpKind::Attention || !row_contiguous(v)) return false;
  // q, k, v, out, dout come first; lse (input 5 of the gradients) and the doc ids are read flat.
  const int fixed = attention_fixed_inputs(reader.op);
  return static_cast<int>(index) < fixed && index != 5;
}

bool writes_view(const Node& writer, const passes::View& v) {
  const bool attention = writer.op == Op::attention || writer.op == Op::attention_dq ||
                         writer.op == Op::attention_dk || writer.op == Op::attention_dv;
  return attention && row_contiguous(v);
}

const passes::Target& lowering_target() {
  static const passes::Target target = [] {
    passes::Target t;
    t.name = "cpu";
    t.reads_view = reads_view;
    t.writes_view = writes_view;
    t.alignment = 64;
    t.fuse_reductions = true;
    t.scan_spare_carries = true;
    return t;
  }();
  return target;
}

passes::Lowered lower(const Graph& graph, passes::PassOptions options) {
  options.target = lowering_target();
  return passes::lower(graph, options);
}

}  // namespace keel::cpu
