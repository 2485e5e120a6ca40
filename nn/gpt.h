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
  // The block's flavour. GPT-2: layernorm, learned positions, MHA, GELU MLP 4x wide, biases.
  std::string norm = "layernorm";     // layernorm | rmsnorm
  std::string positions = "learned";  // learned | rotary
  std::string mlp = "gelu";           // gelu | swiglu
  int64_t kv_heads = 0;               // grouped-query attention; 0: = heads
  int64_t mlp_hidden = 0;             // 0: 4 * width
  bool bias = true;

  int64_t kv() const { return kv_heads == 0 ? heads : kv_heads; }
  int64_t hidden() const { return mlp_hidden == 0 ? 4 * width : mlp_hidden; }
  std::string to_json() const;
  // keel::InputError naming `source` and the field for a bad or inconsistent config.
  static GptConfig from_json(const std::string& json, const std::string& source);
  void validate(const std::string& source) const;
};

// "gpt2-s": 6 layers, width 384, 6 heads, seq 256, batch 8; "gpt2-m": 12 layers, width 768,
// 12 heads, batch 4; "code-s": RMSNorm, rotary positions, grouped-query attention with one
// fused QKV projection, SwiGLU MLP. Throws keel::InputError for an unknown name.
GptConfig gpt_preset(std::string_view name);
const std::vector<std::string>& gpt_preset_names();

using Params = std::map<std::string, Tensor>;

// Names and shapes of every parameter, in a fixed order.
std::vector<std::pair<std::string, Shape>> gpt_param_shapes(const GptConfig& c);
int64_t gpt_param_count(const GptConfig& c, bool with_positions = true);

// Inside a trace: parameters drawn from the counter-based generator (normal, std 0.02; biases
// zero, norm weights one).
Params gpt_init(const GptConfig& c, const Tensor& seed);
// tokens [B, T] i64 -> logits [B, T, V]; the head is tied to the embedding. One document per
// row, positions 0..T-1.
Tensor gpt_logits(const GptConfig& c, const Params& p, const Tensor& tokens);
// Packed rows: positions [B, T] restart per document and doc_ids [B, T] keep attention inside
// each document.
Tensor gpt_logits(const GptConfig& c, const Params& p, const Tensor& tokens,
                  const Tensor& positions, const Tensor& doc_ids);
// Mean next-token cross-entropy over positions where mask [B, T] is 1.
Tensor gpt_loss(const GptConfig& c, const Params& p, const Tensor& tokens, const Tensor& targets,
                const Tensor& mask);

}  // namespace keel::nn
