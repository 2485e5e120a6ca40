#pragma once
// The tied embedding wte [V, C] where the model reads it: the tokens' rows, the head's logits
// and the next-token loss over them. With the vocab rule (GptConfig::split_vocab) each process
// of "model" holds a block of wte's rows, as Megatron-LM's vocabulary-parallel embedding: the
// rows it holds are read and all-reduced, its block of the logits is computed, and the loss
// all-reduces the softmax's max, sum and target logit over the blocks, so no process forms the
// whole logits for training or evaluation.
#include "nn/gpt.h"

namespace keel::nn {

/// Whether c splits wte's rows over "model".
bool vocab_split(const GptConfig& c);
/// wte's rows at `tokens` (i64 [B, T]): [B, T, C], each element the whole table's.
Tensor token_embedding(const GptConfig& c, const NamedTensors& p, const Tensor& tokens);
/// x [B, T, C] times the rows of wte this process holds: [B, T, V / M] (split), else [B, T, V].
Tensor held_logits(const GptConfig& c, const NamedTensors& p, const Tensor& x);
/// The whole logits [B, T, V]: held_logits gathered over "model" when split (for sampling, which
/// reads every token's logit).
Tensor whole_logits(const GptConfig& c, const NamedTensors& p, const Tensor& x);
/// The sum of -log softmax(logits)[target] * mask over [B, T], from held_logits's blocks.
Tensor next_token_nll(const GptConfig& c, const Tensor& held, const Tensor& targets,
                      const Tensor& mask);

}  // namespace keel::nn
