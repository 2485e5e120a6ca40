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

bool is_attention_grad(Op op) {
  return op == Op::attention_dq || op == Op::attention_dk || op == Op::attention_dv;
}

}  // namespace

bool shares_call(const Graph& g, const std::vector<NodeId>& call, NodeId next) {
  const Node& first = g.node(call.front());
  const Node& second = g.node(next);
  if (is_attention_grad(first.op) && is_attention_grad(second.op)) {
    for (NodeId id : call) {
      if (g.node(id).op == second.op) return false;
    }
    return first.inputs == second.inputs && first.attrs.f("scale") == second.attrs.f("scale") &&
           attention_layout(first.attrs) == attention_layout(second.attrs);
  }
  if (first.op != Op::attention_lse || second.op != Op::attention || call.size() != 1) {
    return false;
  }
  const bool docs = first.inputs.size() == 3;
  return second.inputs.size() == (docs ? 4u : 3u) && second.inputs[0] == first.inputs[0] &&
         second.inputs[1] == first.inputs[1] && (!docs || second.inputs[3] == first.inputs[2]) &&
         second.attrs.f("scale") == first.attrs.f("scale") &&
         attention_layout(second.attrs) == attention_layout(first.attrs);
}

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
    t.shares_call = shares_call;
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
