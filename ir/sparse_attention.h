#pragma once
/// @file
/// Attention over listed keys (DeepSeek's sparse attention, DSA), one op per result:
///   sparse_attention(q, k, v, keys)                 -> out [B, T, H, D]
///   sparse_attention_dq(q, k, v, dout, keys)        -> dq [B, T, H, D]
///   sparse_attention_dk / _dv(q, k, v, dout, keys)  -> dk / dv [B, T, KV, D]
///   sparse_attention_weights(q, k, keys)            -> [B, T, S] f32
/// q [B, T, H, D], k and v [B, T, KV, D] f32 with H % KV == 0 (query head h reads kv head
/// h / (H / KV)); keys [B, T, S] i32 or i64: query t of row b attends the keys at positions
/// keys[b, t, 0..S) of row b, softmax(scale · q·k) over them. An entry outside [0, T) selects
/// nothing; a query with no key gives 0. Each entry counts once: a position listed twice has
/// twice its weight (the model's selector lists each once). The gradient ops recompute each
/// query's S scores (S is small), so no T x T array and no log-sum-exp is kept. `weights`: each
/// entry's softmax probability averaged over the heads (0 for an entry selecting nothing), the
/// target DSA trains its indexer on; it has no gradient. Attribute `scale` (finite).
#include <cstdint>
#include <span>

#include "ir/graph.h"

namespace keel {

/// The sizes a sparse attention op works on, read from its inputs by sparse_attention_dims.
struct SparseAttentionDims {
  int64_t batch = 0;     ///< B
  int64_t seq = 0;       ///< T
  int64_t heads = 0;     ///< query heads H
  int64_t kv_heads = 0;  ///< key and value heads KV (H % KV == 0)
  int64_t head_dim = 0;  ///< D, per head
  int64_t keys = 0;      ///< S, the keys listed per query
};

/// Checks the inputs' types (keel::Error naming the input and the rule) and reads the dims.
SparseAttentionDims sparse_attention_dims(Op op, std::span<const TensorType> in);
/// Type rule of the family (also checks `scale`).
TensorType infer_sparse_attention(Op op, std::span<const TensorType> in, const Attrs& a);

}  // namespace keel
