#pragma once
// Building blocks of a GPT step, written in keel ops so the whole step is one program.
// Shape letters: B batch, T sequence, C width, H heads, D head width (C = H·D), V vocab.
#include <cstdint>

#include "trace/ops.h"

namespace keel::nn {

// Over the last axis: (x - mean) / sqrt(var + eps) · weight + bias.
Tensor layer_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps = 1e-5);
// Over the last axis: x / sqrt(mean(x²) + eps) · weight.
inline constexpr double kRmsNormEps = 1e-6;
Tensor rms_norm(const Tensor& x, const Tensor& weight, double eps = kRmsNormEps);
// GPT-2's tanh approximation.
Tensor gelu(const Tensor& x);
// x [B, T, ...] moved `back` places later along T; places before the row's or the document's
// start (positions [B, T] restart per document) hold `fill`.
Tensor earlier_in_document(const Tensor& x, const Tensor& positions, int64_t back, double fill);
Tensor softmax(const Tensor& x, int64_t axis = -1);
// Sum over positions of mask · -log p(target) (nats).
Tensor cross_entropy_sum(const Tensor& logits, const Tensor& targets, const Tensor& mask);
// Mean over positions where mask (f32, same shape as targets) is 1 of -log p(target).
Tensor cross_entropy(const Tensor& logits, const Tensor& targets, const Tensor& mask);
// x[B, T, C_in] · w[C_in, C_out] + b[C_out].
Tensor linear(const Tensor& x, const Tensor& w, const Tensor& b);
// Causal self-attention, fused (one `attention` op: no T x T scores, no copy of k and v per
// query group): q [B, H, T, D], k and v [B, KV, T, D] with H a multiple of KV; with `doc_ids`
// [B, T] a query sees only keys of its own document. Returns [B, H, T, D]. Layout bthd: every
// operand and the result [B, T, H, D].
Tensor attention(const Tensor& q, const Tensor& k, const Tensor& v,
                 const Tensor& doc_ids = Tensor(), AttentionLayout layout = AttentionLayout::bhtd);
// The same attention as a graph of plain ops (scores [B, H, T, T], a mask, softmax, k and v
// repeated per group): the reference the fused op is tested against. `allowed` [B, 1, T, T]
// bool (or [T, T]) masks the pairs that may attend.
Tensor attention_unfused(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& allowed);
// A [T, T] bool mask: query t may attend key s when s <= t.
Tensor causal_mask(int64_t seq);
// allowed[b, 0, t, s] = s <= t and doc_ids[b, t] == doc_ids[b, s].
Tensor document_mask(const Tensor& doc_ids);
// Normal(0, std) from the counter-based generator (Box–Muller over two uniform draws).
Tensor normal(const Tensor& seed, int64_t counter, const Shape& shape, double std);

}  // namespace keel::nn
