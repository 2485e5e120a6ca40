#include "nn/vocabulary.h"

#include "nn/layers.h"
#include "nn/tensor_parallel.h"
#include "trace/collectives.h"

namespace keel::nn {

bool vocab_split(const GptConfig& c) {
  return c.model_parallel > 1 && c.split_vocab;
}

Tensor token_embedding(const GptConfig& c, const NamedTensors& p, const Tensor& tokens) {
  const Tensor& wte = p.at("wte.weight");
  return vocab_split(c) ? read_split_rows(wte, tokens) : take(wte, tokens);
}

Tensor held_logits(const GptConfig& c, const NamedTensors& p, const Tensor& x) {
  // Each process's use of x is its block's share of x's gradient (a column-parallel input).
  const Tensor in = vocab_split(c) ? pvary(x, kModelAxis) : x;
  return dot_general(in, p.at("wte.weight"), {{}, {}, {2}, {1}});
}

Tensor whole_logits(const GptConfig& c, const NamedTensors& p, const Tensor& x) {
  const Tensor held = held_logits(c, p, x);
  return vocab_split(c) ? all_gather_invariant(held, kModelAxis, 2) : held;
}

Tensor next_token_nll(const GptConfig& c, const Tensor& held, const Tensor& targets,
                      const Tensor& mask) {
  if (!vocab_split(c)) return cross_entropy_sum(held, targets, mask);
  const Shape& s = held.shape();                  // [B, T, V / M]
  const int64_t B = s[0], T = s[1], rows = s[2];  // the vocabulary this process holds
  // log softmax's shift (the max over every block) and its sum of exponentials, whole.
  const Tensor top = stop_gradient(all_reduce(max(held, {-1}, true), kModelAxis, ReduceKind::max));
  const Tensor shifted = held - top;
  const Tensor total = all_reduce(sum(exp(shifted), {-1}, true), kModelAxis);
  // The target's shifted logit from the process whose block holds it, zeros elsewhere.
  auto i64 = [](int64_t v) { return full({}, static_cast<double>(v), DType::i64); };
  const Tensor local = targets - cast(axis_index(kModelAxis), DType::i64) * i64(rows);
  const Tensor at = minimum(maximum(local, i64(0)), i64(rows - 1));
  const Tensor mine = cast(eq(at, local), held.dtype());
  const Tensor picked =
      all_reduce(sum(one_hot(at, rows, held.dtype()) * shifted, {-1}) * mine, kModelAxis);
  return -sum((picked - reshape(log(total), {B, T})) * mask);
}

}  // namespace keel::nn
