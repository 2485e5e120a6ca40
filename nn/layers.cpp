#include "nn/layers.h"

#include <cmath>
#include <numbers>

namespace keel::nn {

Tensor layer_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps) {
  Tensor mu = mean(x, {-1}, true);
  Tensor centered = x - mu;
  Tensor var = mean(centered * centered, {-1}, true);
  return centered * rsqrt(var + eps) * weight + bias;
}

Tensor rms_norm(const Tensor& x, const Tensor& weight, double eps) {
  return x * rsqrt(mean(x * x, {-1}, true) + eps) * weight;
}

Tensor gelu(const Tensor& x) {
  const double k = std::sqrt(2.0 / std::numbers::pi);
  return 0.5 * x * (1.0 + tanh(k * (x + 0.044715 * x * x * x)));
}

Tensor softmax(const Tensor& x, int64_t axis) {
  Tensor shifted = x - stop_gradient(max(x, {axis}, true));
  Tensor e = exp(shifted);
  return e / sum(e, {axis}, true);
}

Tensor cross_entropy_sum(const Tensor& logits, const Tensor& targets, const Tensor& mask) {
  const int64_t vocab = logits.shape().back();
  Tensor shifted = logits - stop_gradient(max(logits, {-1}, true));
  Tensor logp = shifted - log(sum(exp(shifted), {-1}, true));
  Tensor picked = sum(one_hot(targets, vocab, logits.dtype()) * logp, {-1});
  return -sum(picked * mask);
}

Tensor cross_entropy(const Tensor& logits, const Tensor& targets, const Tensor& mask) {
  // The denominator is at least 1 so an all-masked batch gives 0, not NaN.
  return cross_entropy_sum(logits, targets, mask) / maximum(sum(mask), full({}, 1.0, mask.dtype()));
}

Tensor linear(const Tensor& x, const Tensor& w, const Tensor& b) {
  return matmul(x, w) + b;
}

Tensor attention(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& doc_ids,
                 AttentionLayout layout) {
  const double scale = 1.0 / std::sqrt(double(q.shape().back()));
  return causal_attention(q, k, v, scale, doc_ids, layout);
}

namespace {

// [B, KV, T, D] -> [B, KV * groups, T, D], each kv head repeated for its query heads.
Tensor repeat_kv(const Tensor& x, int64_t groups) {
  if (groups == 1) return x;
  const Shape& s = x.shape();
  Tensor e =
      broadcast_to(reshape(x, {s[0], s[1], 1, s[2], s[3]}), {s[0], s[1], groups, s[2], s[3]});
  return reshape(e, {s[0], s[1] * groups, s[2], s[3]});
}

}  // namespace

Tensor attention_unfused(const Tensor& q, const Tensor& k_in, const Tensor& v_in,
                         const Tensor& allowed) {
  const int64_t d = q.shape().back(), groups = q.shape()[1] / k_in.shape()[1];
  Tensor k = repeat_kv(k_in, groups), v = repeat_kv(v_in, groups);
  // scores[B, H, T, S] = q[B, H, T, D] · k[B, H, S, D] over D.
  Tensor scores = dot_general(q, k, {{0, 1}, {0, 1}, {3}, {3}}) * (1.0 / std::sqrt(double(d)));
  Tensor masked = select(allowed, scores, full({}, -1e30, scores.dtype()));
  Tensor p = softmax(masked, -1);
  return dot_general(p, v, {{0, 1}, {0, 1}, {3}, {2}});  // [B, H, T, D]
}

Tensor causal_mask(int64_t seq) {
  Tensor t = iota({seq, seq}, 0);
  Tensor s = iota({seq, seq}, 1);
  return ge(t, s);
}

Tensor document_mask(const Tensor& doc_ids) {
  const int64_t B = doc_ids.shape()[0], T = doc_ids.shape()[1];
  Tensor same = eq(reshape(doc_ids, {B, 1, T, 1}), reshape(doc_ids, {B, 1, 1, T}));
  Tensor causal = reshape(causal_mask(T), {1, 1, T, T});
  return select(causal, same, full({}, 0.0, DType::boolean));
}

Tensor earlier_in_document(const Tensor& x, const Tensor& positions, int64_t back, double fill) {
  if (back == 0) return x;
  const Shape& s = x.shape();
  const Tensor none = full({}, fill, x.dtype());
  if (back >= s[1]) return broadcast_to(none, s);
  Shape head = s, kept = s;
  head[1] = back;
  kept[1] = s[1] - back;
  Tensor moved = concat({broadcast_to(none, head), slice(x, Axes(s.size(), 0), kept)}, 1);
  Shape where(s.size(), 1);
  where[0] = s[0];
  where[1] = s[1];
  Tensor inside =
      reshape(ge(positions, full({}, static_cast<double>(back), positions.dtype())), where);
  return select(inside, moved, none);
}

Tensor normal(const Tensor& seed, int64_t counter, const Shape& shape, double std) {
  Tensor c1 = constant(Array::scalar(static_cast<double>(2 * counter), DType::i64));
  Tensor c2 = constant(Array::scalar(static_cast<double>(2 * counter + 1), DType::i64));
  Tensor u1 = 1.0 - rng_uniform(seed, c1, shape);  // in (0, 1], so log is finite
  Tensor u2 = rng_uniform(seed, c2, shape);
  return sqrt(-2.0 * log(u1)) * cos((2.0 * std::numbers::pi) * u2) * std;
}

}  // namespace keel::nn
