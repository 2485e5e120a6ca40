#include "nn/tensor_parallel.h"

#include "nn/block.h"
#include "nn/layer_stack.h"
#include "trace/collectives.h"

namespace keel::nn {

std::map<std::string, ModelSplit> gpt_model_splits(const GptConfig& c) {
  std::map<std::string, ModelSplit> out;
  if (c.model_parallel == 1) return out;
  const int64_t D = c.width / c.heads, F = c.hidden();
  const std::vector<int64_t> qkv = {c.heads * D, c.kv() * D, c.kv() * D};
  const std::vector<int64_t> fc = c.mlp == "swiglu" ? std::vector<int64_t>{F, F} : std::vector{F};
  // Mamba-2's: z, x, B, C and dt by heads and state columns, its convolution's x, B and C
  // channels, the per-head vectors, the norm and the output projection's rows.
  auto block = [&](const std::string& prefix, bool moe, bool mamba, bool memory) {
    if (c.split_memory && memory) {
      out[under(prefix, "engram.table")] = {0, {c.engram.tables() * c.engram.rows}};
    }
    if (c.split_heads && mamba) {
      const int64_t I = c.mamba.expand * c.width, N = c.mamba.state, H = I / c.mamba.head_dim;
      const std::string m = under(prefix, "mamba");
      out[under(m, "in_proj.weight")] = {1, {I, I, N, N, H}};
      out[under(m, "conv.weight")] = {1, {I, N, N}};
      out[under(m, "conv.bias")] = {0, {I, N, N}};
      for (const char* v : {"dt_bias", "A_log", "D"}) out[under(m, v)] = {0, {H}};
      out[under(m, "ln_y.weight")] = {0, {I}};
      out[under(m, "out_proj.weight")] = {0, {I}};
    }
    if (c.split_heads && !mamba) {
      out[under(prefix, "attn.c_attn.weight")] = {1, qkv};
      out[under(prefix, "attn.c_proj.weight")] = {0, {c.heads * D}};
      if (c.bias) out[under(prefix, "attn.c_attn.bias")] = {0, qkv};
    }
    if (c.split_experts && moe) {
      out[under(prefix, "moe.experts.c_fc.weight")] = {0, {c.moe.experts}};
      out[under(prefix, "moe.experts.c_proj.weight")] = {0, {c.moe.experts}};
    }
    if (c.split_mlp && !moe) {
      out[under(prefix, "mlp.c_fc.weight")] = {1, fc};
      out[under(prefix, "mlp.c_proj.weight")] = {0, {F}};
      if (c.bias && c.mlp != "swiglu")
        out[under(prefix, "mlp.c_fc.bias")] = {0, fc};  // SwiGLU has none
    }
  };
  if (c.split_vocab) out["wte.weight"] = {0, {c.vocab}};
  for (int64_t i = 0; i < c.layers; ++i) {
    block("h." + std::to_string(i), c.is_moe_layer(i), c.is_mamba_layer(i), c.is_engram_layer(i));
  }
  for (int64_t d = 1; d <= c.mtp_depth(); ++d) {
    block("mtp." + std::to_string(d), false, false, false);
  }
  return out;
}

std::map<std::string, ModelSplit> stored_model_splits(const GptConfig& c) {
  std::map<std::string, ModelSplit> out = gpt_model_splits(c);
  if (out.empty() || !c.layout.scanned || c.layout.split_every > 0) return out;
  std::map<std::string, TensorType> per_layer;
  for (const auto& [name, shape] : gpt_param_shapes(c)) per_layer[name] = {DType::f32, shape};
  for (const auto& [stacked, layers] : stacked_layer_names(c, per_layer)) {
    const auto split = out.find(layers.front());
    if (split == out.end()) continue;
    const ModelSplit s{split->second.dim + 1, split->second.parts};
    for (const std::string& name : layers) out.erase(name);
    out[stacked] = s;
  }
  return out;
}

Tensor read_split_rows(const Tensor& table, const Tensor& rows) {
  auto i64 = [](int64_t v) { return full({}, static_cast<double>(v), DType::i64); };
  // This process holds rows [first, first + held) of the whole table.
  const int64_t held = table.shape()[0];
  const Tensor first = cast(axis_index(kModelAxis), DType::i64) * i64(held);
  const Tensor local = rows - first;
  // A row held elsewhere reads a row of this block (clamped), which is then dropped.
  const Tensor at = minimum(maximum(local, i64(0)), i64(held - 1));
  const Tensor read = take(table, at);  // [R..., ...]
  Shape mask_shape = rows.shape();
  mask_shape.resize(read.shape().size(), 1);
  const Tensor mine = broadcast_to(reshape(eq(at, local), mask_shape), read.shape());
  return all_reduce(select(mine, read, zeros_like(read)), kModelAxis);
}

Shape model_shard_shape(const Shape& whole, const ModelSplit& s, int64_t processes) {
  Shape out = whole;
  out[static_cast<size_t>(s.dim)] /= processes;
  return out;
}

int64_t model_shard_source(const Shape& whole, const ModelSplit& s, int64_t index,
                           int64_t processes, int64_t i) {
  const auto d = static_cast<size_t>(s.dim);
  int64_t inner = 1;
  for (size_t k = d + 1; k < whole.size(); ++k) inner *= whole[k];
  const int64_t held = whole[d] / processes;  // along d, in this process's shard
  const int64_t outer = i / (inner * held), at = i / inner % held, rest = i % inner;
  int64_t start = 0, from = at;  // the part `at` falls in starts at `start` in the whole
  int64_t block = 0;
  for (int64_t part : s.parts) {
    block = part / processes;
    if (from < block) break;
    from -= block;
    start += part;
  }
  return (outer * whole[d] + start + index * block + from) * inner + rest;
}

}  // namespace keel::nn
