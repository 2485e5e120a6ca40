#pragma once
/// @file
/// Fused causal attention, one op per result (nodes have one output):
///   attention(q, k, v [, doc])                    -> out [B, H, T, D]
///   attention_lse(q, k [, doc])                   -> lse [B, H, T] f32 (log-sum-exp of each
///                                                    row's scaled, masked scores)
///   attention_dq / _dk / _dv(q, k, v, out, dout, lse [, doc]) -> dq [B, H, T, D],
///                                                    dk / dv [B, KV, T, D]
/// q [B, H, T, D] f32, k and v [B, KV, T, D] f32 with H % KV == 0 (query head h reads kv head
/// h / (H / KV)), doc [B, T] i32 or i64. Query t attends key s when s <= t and, with doc ids,
/// doc[b, s] == doc[b, t]. Attribute `scale` (finite): scores are scale · q·k. Optional attribute
/// `layout` "bthd": q, k, v, out, dout and the gradients are [B, T, H, D] instead (heads after
/// positions, as a [B, T, H * D] projection reshapes for free); lse stays [B, H, T].
#include <cstdint>
#include <span>
#include <vector>

#include "ir/graph.h"

namespace keel {

/// Dimension order of q, k, v, out, dout and the gradients: [B, H, T, D] or [B, T, H, D].
enum class AttentionLayout { bhtd, bthd };

/// The sizes an attention op works on, read from its inputs by attention_dims.
struct AttentionDims {
  int64_t batch = 0;                               ///< B
  int64_t heads = 0;                               ///< query heads H
  int64_t kv_heads = 0;                            ///< key and value heads KV (H % KV == 0)
  int64_t seq = 0;                                 ///< sequence length T
  int64_t head_dim = 0;                            ///< D, per head
  bool docs = false;                               ///< the last input is the doc ids
  AttentionLayout layout = AttentionLayout::bhtd;  ///< dimension order of the inputs
};

/// The `layout` attribute (absent: bhtd); keel::Error for any other spelling.
AttentionLayout attention_layout(const Attrs& a);
const char* attention_layout_name(AttentionLayout layout);  ///< "bhtd" or "bthd"
/// [B, T, H, D] <-> [B, H, T, D]: the shape with dims 1 and 2 swapped (an involution).
Shape swap_heads_and_positions(const Shape& s);

/// The inputs an op of the family takes before the optional doc ids (3, 2 or 6).
int attention_fixed_inputs(Op op);
/// Checks the inputs' types (keel::Error naming the input and the rule) and reads the dims.
/// Shapes are read in `layout`.
AttentionDims attention_dims(Op op, std::span<const TensorType> in,
                             AttentionLayout layout = AttentionLayout::bhtd);
/// Type rule of the family (also checks `scale`).
TensorType infer_attention(Op op, std::span<const TensorType> in, const Attrs& a);

/// The inputs and attributes of an attention_lse node.
struct AttentionLseArgs {
  std::vector<NodeId> inputs;  ///< q, k [, doc]
  Attrs attrs;                 ///< scale [, layout]
};
/// Those of the attention_lse that shares `attention`'s q, k, doc ids, scale and layout (its
/// VJP's, and what a scan saves beside it: equal nodes).
AttentionLseArgs attention_lse_args(const Node& attention);

}  // namespace keel
