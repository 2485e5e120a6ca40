// VJP of fused attention, flash-attention-2 style: the backward ops recompute the scores block
// by block from q, k and the rows' log-sum-exp, so nothing T x T is saved or built.
#include <fmt/format.h>

#include "autodiff/vjp.h"
#include "ir/error.h"

namespace keel::autodiff::detail {

std::vector<NodeId> vjp_attention(Builder& b, const VjpArgs& a) {
  const Node& f = a.fwd;
  if (f.op != Op::attention) {
    throw Error(fmt::format("[autodiff] internal: {} has no VJP rule", op_name(f.op)));
  }
  const std::vector<NodeId> in = f.inputs;  // q, k, v [, doc]
  const bool docs = in.size() == 4;
  Attrs scale{{"scale", f.attrs.f("scale")}};  // and the layout, which the gradients share
  if (const AttrValue* layout = f.attrs.find("layout")) scale.set("layout", *layout);
  std::vector<NodeId> lse_in = {in[0], in[1]};
  if (docs) lse_in.push_back(in[3]);
  const NodeId lse = b.emit(Op::attention_lse, lse_in, scale);
  std::vector<NodeId> grad_in = {in[0], in[1], in[2], a.self, a.ct, lse};
  if (docs) grad_in.push_back(in[3]);
  std::vector<NodeId> out(in.size(), kNone);
  const Op ops[3] = {Op::attention_dq, Op::attention_dk, Op::attention_dv};
  for (size_t i = 0; i < 3; ++i) {
    if (a.need[i]) out[i] = b.emit(ops[i], grad_in, scale);
  }
  return out;
}

}  // namespace keel::autodiff::detail
