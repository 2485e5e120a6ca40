// VJP of fused attention, flash-attention-2 style: the backward ops recompute the scores block
// by block from q, k and the rows' log-sum-exp, so nothing T x T is saved or built.
#include <fmt/format.h>

#include "autodiff/vjp.h"
#include "ir/attention.h"
#include "ir/error.h"
#include "ir/sparse_attention.h"

namespace keel::autodiff::detail {

std::vector<NodeId> vjp_attention(Builder& b, const VjpArgs& a) {
  const Node& f = a.fwd;
  if (f.op != Op::attention) {
    throw Error(fmt::format("[autodiff] internal: {} has no VJP rule", op_name(f.op)));
  }
  const std::vector<NodeId> in = f.inputs;  // q, k, v [, doc]
  const bool docs = in.size() == 4;
  AttentionLseArgs lse_args = attention_lse_args(f);
  const Attrs scale = lse_args.attrs;  // and the layout, which the gradients share
  const NodeId lse = b.emit(Op::attention_lse, std::move(lse_args.inputs), scale);
  std::vector<NodeId> grad_in = {in[0], in[1], in[2], a.self, a.ct, lse};
  if (docs) grad_in.push_back(in[3]);
  std::vector<NodeId> out(in.size(), kNone);
  const Op ops[3] = {Op::attention_dq, Op::attention_dk, Op::attention_dv};
  for (size_t i = 0; i < 3; ++i) {
    if (a.need[i]) out[i] = b.emit(ops[i], grad_in, scale);
  }
  return out;
}

// Sparse attention's gradient ops recompute each query's few scores themselves: no lse to save.
std::vector<NodeId> vjp_sparse_attention(Builder& b, const VjpArgs& a) {
  const Node& f = a.fwd;
  if (f.op != Op::sparse_attention) {
    throw Error(fmt::format("[autodiff] internal: {} has no VJP rule", op_name(f.op)));
  }
  const std::vector<NodeId>& in = f.inputs;  // q, k, v, keys
  const std::vector<NodeId> grad_in = {in[0], in[1], in[2], a.ct, in[3]};
  std::vector<NodeId> out(in.size(), kNone);
  const Op ops[3] = {Op::sparse_attention_dq, Op::sparse_attention_dk, Op::sparse_attention_dv};
  for (size_t i = 0; i < 3; ++i) {
    if (a.need[i]) out[i] = b.emit(ops[i], grad_in, f.attrs);
  }
  return out;
}

}  // namespace keel::autodiff::detail
