#pragma once
// Fused causal attention, one op per result (nodes have one output):
//   attention(q, k, v [, doc])                    -> out [B, H, T, D]
//   attention_lse(q, k [, doc])                   -> lse [B, H, T] f32 (log-sum-exp of each
//                                                    row's scaled, masked scores)
//   attention_dq / _dk / _dv(q, k, v, out, dout, lse [, doc]) -> dq [B, H, T, D],
//                                                    dk / dv [B, KV, T, D]
// q [B, H, T, D] f32, k and v [B, KV, T, D] f32 with H % KV == 0 (query head h reads kv head
// h / (H / KV)), doc [B, T] i32 or i64. Query t attends key s when s <= t and, with doc ids,
// doc[b, s] == doc[b, t]. Attribute `scale` (finite): scores are scale · q·k.
#include <cstdint>
#include <span>

#include "ir/graph.h"

namespace keel {

struct AttentionDims {
  int64_t batch = 0, heads = 0, kv_heads = 0, seq = 0, head_dim = 0;
  bool docs = false;  // the last input is the doc ids
};

// The inputs an op of the family takes before the optional doc ids (3, 2 or 6).
int attention_fixed_inputs(Op op);
// Checks the inputs' types (keel::Error naming the input and the rule) and reads the dims.
AttentionDims attention_dims(Op op, std::span<const TensorType> in);
// Type rule of the family (also checks `scale`).
TensorType infer_attention(Op op, std::span<const TensorType> in, const Attrs& a);

}  // namespace keel
