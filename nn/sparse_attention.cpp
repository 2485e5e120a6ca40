#include "nn/sparse_attention.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "ir/error.h"
#include "nn/block.h"
#include "nn/tensor_parallel.h"
#include "trace/collectives.h"

namespace keel::nn {

void SparseAttentionConfig::validate(const std::string& source, int64_t seq) const {
  auto bad = [&](const std::string& what) {
    return InputError(fmt::format("[nn] {}: field 'sparse_attention': {}", source, what));
  };
  if (window < 1 || window > seq) {
    throw bad(fmt::format("'window' must be in 1..seq ({}), got {}", seq, window));
  }
  if (keys < 1 || keys > seq) {
    throw bad(fmt::format("'keys' must be in 1..seq ({}), got {}", seq, keys));
  }
  if (indexer_heads < 1 || indexer_heads > 64) {
    throw bad(fmt::format("'indexer_heads' must be in 1..64, got {}", indexer_heads));
  }
  if (indexer_dim < 1 || indexer_dim > 512) {
    throw bad(fmt::format("'indexer_dim' must be in 1..512, got {}", indexer_dim));
  }
}

std::vector<std::pair<std::string, Shape>> sparse_indexer_param_shapes(
    const SparseAttentionConfig& c, const std::string& prefix, int64_t width) {
  return {{under(prefix, "query.weight"), {width, c.indexer_heads * c.indexer_dim}},
          {under(prefix, "key.weight"), {width, c.indexer_dim}},
          {under(prefix, "weights.weight"), {width, c.indexer_heads}}};
}

Tensor indexer_scores(const SparseAttentionConfig& c, const NamedTensors& p,
                      const std::string& prefix, const Tensor& x) {
  const int64_t B = x.shape()[0], T = x.shape()[1], H = c.indexer_heads, d = c.indexer_dim;
  Tensor q = reshape(matmul(x, p.at(under(prefix, "query.weight"))), {B, T * H, d});
  Tensor k = matmul(x, p.at(under(prefix, "key.weight")));                   // [B, T, d]
  Tensor w = matmul(x, p.at(under(prefix, "weights.weight")));               // [B, T, H]
  Tensor dots = maximum(matmul(q, transpose(k, {0, 2, 1})), full({}, 0.0));  // [B, T*H, T]
  // DSA's scale: the heads' weights by 1/sqrt(H), the dot products by 1/sqrt(d).
  const double scale = 1.0 / std::sqrt(static_cast<double>(H * d));
  return sum(reshape(dots, {B, T, H, T}) * reshape(w * scale, {B, T, H, 1}), {2});
}

Tensor sparse_keys(const SparseAttentionConfig& c, const Tensor& scores, const Tensor& positions) {
  const int64_t B = scores.shape()[0], T = scores.shape()[1], W = c.window;
  const Tensor t = reshape(iota({T}, 0), {1, T, 1});
  // t - the first position of its document in the row (a row may start inside a document).
  const Tensor place = minimum(reshape(cast(positions, DType::i64), {B, T, 1}), t);
  const Tensor none = full({}, -1.0, DType::i64);
  // The window: t - j for j < W and j <= place.
  const Tensor back = reshape(iota({W}, 0), {1, 1, W});
  Tensor window = select(le(back, place), t - back, none);
  // Beyond it: the positions s of the document with s <= t - W, by the indexer's score.
  const Tensor s = reshape(iota({T}, 0), {1, 1, T});
  const Tensor allowed = select(ge(s, t - place), le(s, t - W), full({}, 0.0, DType::boolean));
  const double lowest = -std::numeric_limits<double>::infinity();
  // Rows shorter than the model's (evaluation and sampling buckets) have fewer keys to pick.
  const int64_t k = std::min(c.keys, T);
  auto [best, at] = top_k(select(allowed, scores, full({}, lowest)), k);
  Tensor picked = select(gt(best, full({}, lowest)), at, none);
  return concat({broadcast_to(window, {B, T, W}), picked}, 2);
}

Tensor indexer_loss(const Tensor& scores, const Tensor& keys, const Tensor& target) {
  const int64_t B = scores.shape()[0], T = scores.shape()[1], S = keys.shape()[2];
  // The scores at the listed keys: flat index (b * T + t) * T + key.
  const Tensor listed = ge(keys, full({}, 0.0, DType::i64));
  const Tensor row = reshape(iota({B * T}, 0), {B, T, 1}) * T;
  const Tensor flat = row + select(listed, keys, full({}, 0.0, DType::i64));
  const Tensor at =
      reshape(take(reshape(scores, {B * T * T}), reshape(flat, {B * T * S})), {B, T, S});
  // An entry selecting nothing gets a large finite negative: its exp is 0, with no inf - inf.
  const Tensor logits = select(listed, at, full({}, -1e30));
  const Tensor shifted = logits - stop_gradient(max(logits, {2}, true));
  const Tensor log_q = shifted - log(sum(exp(shifted), {2}, true));
  const Tensor p = stop_gradient(target);
  const Tensor some = gt(p, full({}, 0.0));
  const Tensor log_p = select(some, log(select(some, p, full({}, 1.0))), full({}, 0.0));
  return sum(p * (log_p - log_q));
}

Tensor every_key(const Tensor& positions) {
  const int64_t B = positions.shape()[0], T = positions.shape()[1];
  const Tensor t = reshape(iota({T}, 0), {1, T, 1});
  const Tensor place = minimum(reshape(cast(positions, DType::i64), {B, T, 1}), t);
  const Tensor s = reshape(iota({T}, 0), {1, 1, T});
  const Tensor mine = select(ge(s, t - place), le(s, t), full({}, 0.0, DType::boolean));
  return select(mine, broadcast_to(s, {B, T, T}), full({}, -1.0, DType::i64));
}

namespace {

// The heads' mean attention weights on `keys`, held constant: each process's mean over its
// equal share of the heads, averaged over "model", is the mean over all of them.
Tensor attention_target(const Tensor& q, const Tensor& k, const Tensor& keys, double scale,
                        int64_t model_processes) {
  Tensor target = sparse_attention_weights(stop_gradient(q), stop_gradient(k), keys, scale);
  if (model_processes > 1) {
    target = all_reduce(target, kModelAxis) * (1.0 / static_cast<double>(model_processes));
  }
  return target;
}

}  // namespace

SparseMix sparse_attention_mix(const SparseAttentionConfig& c, const NamedTensors& p,
                               const std::string& prefix, const Tensor& x, const Tensor& q,
                               const Tensor& k, const Tensor& v, const Tensor& positions,
                               int64_t model_processes) {
  const std::string at = under(prefix, "indexer");
  Tensor scores = indexer_scores(c, p, at, stop_gradient(x));
  Tensor keys = stop_gradient(sparse_keys(c, scores, positions));
  const double scale = 1.0 / std::sqrt(static_cast<double>(q.shape()[3]));
  Tensor y = sparse_attention(q, k, v, keys, scale);
  // Every process picks the keys itself from whole inputs and weights, so on a backend whose
  // products and top_k are deterministic (the CPU's, the CUDA kernels') they pick the same.
  return {y, indexer_loss(scores, keys, attention_target(q, k, keys, scale, model_processes))};
}

SparseMix dense_warmup_mix(const SparseAttentionConfig& c, const NamedTensors& p,
                           const std::string& prefix, const Tensor& x, const Tensor& q,
                           const Tensor& k, const Tensor& v, const Tensor& positions,
                           const Tensor& doc_ids, int64_t model_processes) {
  const Tensor scores = indexer_scores(c, p, under(prefix, "indexer"), stop_gradient(x));
  const Tensor keys = every_key(positions);
  const double scale = 1.0 / std::sqrt(static_cast<double>(q.shape()[3]));
  Tensor y = attention(q, k, v, doc_ids, AttentionLayout::bthd);
  return {y, indexer_loss(scores, keys, attention_target(q, k, keys, scale, model_processes))};
}

}  // namespace keel::nn
