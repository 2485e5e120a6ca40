#pragma once
// Sparse attention (DeepSeek's DSA): a light indexer scores, for each query, the earlier
// positions of its document at low width; the query attends its local window and the indexer's
// top `keys` beyond it (nn/sparse_attention_config.h), through the fused sparse_attention op, so
// no T x T array of the main attention's width exists. The indexer is trained as DSA's sparse
// stage trains it: on detached inputs, towards the main attention's weights (averaged over the
// heads) on the keys it picked, by a KL divergence. Internal to nn/.
#include <string>
#include <utility>
#include <vector>

#include "nn/gpt.h"
#include "nn/sparse_attention_config.h"

namespace keel::nn {

// The indexer's parameter names (under `prefix`) and shapes for width C, H' = indexer_heads,
// d = indexer_dim: query.weight [C, H' * d], key.weight [C, d], weights.weight [C, H'].
std::vector<std::pair<std::string, Shape>> sparse_indexer_param_shapes(
    const SparseAttentionConfig& c, const std::string& prefix, int64_t width);

// The indexer's scores [B, T, T] of x [B, T, C]: score[t, s] = sum_j w[t, j] relu(q[t, j] . k[s]).
Tensor indexer_scores(const SparseAttentionConfig& c, const NamedTensors& p,
                      const std::string& prefix, const Tensor& x);

// The keys [B, T, window + min(keys, T)] i64 each query attends: first its window (t, t - 1, ..),
// then the `keys` highest scores among positions before the window in its document (positions
// [B, T] restart at each document), -1 for an entry that selects nothing.
Tensor sparse_keys(const SparseAttentionConfig& c, const Tensor& scores, const Tensor& positions);

// Every key each query may read: [B, T, T] i64, entry s = s for the positions of its document
// up to t (positions [B, T] restart at each document), -1 for the rest.
Tensor every_key(const Tensor& positions);

// The indexer's loss: sum over queries of KL(target || softmax of its scores on the listed keys),
// target = the main attention's weights on them (sparse_attention_weights, held constant).
Tensor indexer_loss(const Tensor& scores, const Tensor& keys, const Tensor& target);

// What a sparse attention layer returns: its mix [B, T, H, D] and its indexer's loss.
struct SparseMix {
  Tensor y;
  Tensor indexer_loss;
};
// q [B, T, H, D], k and v [B, T, KV, D] (heads projected as dense attention's), x the block's
// normed input [B, T, C] (the indexer reads it detached). `model_processes` > 1: q, k and v are
// this process's share of the heads, split over mesh axis "model" (the indexer is whole).
SparseMix sparse_attention_mix(const SparseAttentionConfig& c, const NamedTensors& p,
                               const std::string& prefix, const Tensor& x, const Tensor& q,
                               const Tensor& k, const Tensor& v, const Tensor& positions,
                               int64_t model_processes = 1);

// DSA's dense warm-up stage (GptConfig::dense_indexer_warmup): the layer attends densely (the
// attention op over its document's causal keys) and its indexer's loss is the KL from the
// heads' mean attention weights over every one of those keys (every_key), not its own picks.
SparseMix dense_warmup_mix(const SparseAttentionConfig& c, const NamedTensors& p,
                           const std::string& prefix, const Tensor& x, const Tensor& q,
                           const Tensor& k, const Tensor& v, const Tensor& positions,
                           const Tensor& doc_ids, int64_t model_processes = 1);

}  // namespace keel::nn
