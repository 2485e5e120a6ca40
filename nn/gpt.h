#pragma once
// A GPT-2 style decoder written in keel ops. Parameter names follow the Hugging Face GPT-2
// layout (wte, wpe, h.N.attn.c_attn, ...), with Conv1D weights stored [in, out].
#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "trace/ops.h"

namespace keel::nn {

struct GptConfig {
  std::string name = "gpt2-s";
  int64_t vocab = 256;
  int64_t layers = 6;
  int64_t width = 384;
  int64_t heads = 6;
  int64_t seq = 256;
  int64_t batch = 8;
};

// "gpt2-s": 6 layers, width 384, 6 heads, seq 256, batch 8; "gpt2-m": 12 layers, width 768,
// 12 heads, batch 4. Throws keel::InputError for an unknown name.
GptConfig gpt_preset(std::string_view name);

using Params = std::map<std::string, Tensor>;

// Names and shapes of every parameter, in a fixed order.
std::vector<std::pair<std::string, Shape>> gpt_param_shapes(const GptConfig& c);
int64_t gpt_param_count(const GptConfig& c, bool with_positions = true);

// Inside a trace: parameters drawn from the counter-based generator (normal, std 0.02; biases
// zero, norm weights one).
Params gpt_init(const GptConfig& c, const Tensor& seed);
// tokens [B, T] i64 -> logits [B, T, V]; the head is tied to the embedding.
Tensor gpt_logits(const GptConfig& c, const Params& p, const Tensor& tokens);
// Mean next-token cross-entropy over positions where mask [B, T] is 1.
Tensor gpt_loss(const GptConfig& c, const Params& p, const Tensor& tokens, const Tensor& targets,
                const Tensor& mask);

}  // namespace keel::nn
