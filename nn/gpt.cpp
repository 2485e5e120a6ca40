#include "nn/gpt.h"

#include <fmt/format.h>

#include "ir/error.h"
#include "nn/layers.h"

namespace keel::nn {

GptConfig gpt_preset(std::string_view name) {
  GptConfig c;
  if (name == "gpt2-s") return c;
  if (name == "gpt2-m") {
    c.name = "gpt2-m";
    c.layers = 12;
    c.width = 768;
    c.heads = 12;
    c.batch = 4;
    return c;
  }
  throw InputError(fmt::format("[nn] unknown preset '{}'; known: gpt2-s, gpt2-m", name));
}

static std::string layer(int64_t i, const char* rest) {
  return fmt::format("h.{}.{}", i, rest);
}

std::vector<std::pair<std::string, Shape>> gpt_param_shapes(const GptConfig& c) {
  const int64_t C = c.width;
  std::vector<std::pair<std::string, Shape>> out = {{"wte.weight", {c.vocab, C}},
                                                    {"wpe.weight", {c.seq, C}}};
  for (int64_t i = 0; i < c.layers; ++i) {
    out.push_back({layer(i, "ln_1.weight"), {C}});
    out.push_back({layer(i, "ln_1.bias"), {C}});
    out.push_back({layer(i, "attn.c_attn.weight"), {C, 3 * C}});
    out.push_back({layer(i, "attn.c_attn.bias"), {3 * C}});
    out.push_back({layer(i, "attn.c_proj.weight"), {C, C}});
    out.push_back({layer(i, "attn.c_proj.bias"), {C}});
    out.push_back({layer(i, "ln_2.weight"), {C}});
    out.push_back({layer(i, "ln_2.bias"), {C}});
    out.push_back({layer(i, "mlp.c_fc.weight"), {C, 4 * C}});
    out.push_back({layer(i, "mlp.c_fc.bias"), {4 * C}});
    out.push_back({layer(i, "mlp.c_proj.weight"), {4 * C, C}});
    out.push_back({layer(i, "mlp.c_proj.bias"), {C}});
  }
  out.push_back({"ln_f.weight", {C}});
  out.push_back({"ln_f.bias", {C}});
  return out;
}

int64_t gpt_param_count(const GptConfig& c, bool with_positions) {
  int64_t n = 0;
  for (const auto& [name, shape] : gpt_param_shapes(c)) {
    if (with_positions || name != "wpe.weight") n += numel(shape);
  }
  return n;
}

Params gpt_init(const GptConfig& c, const Tensor& seed) {
  Params p;
  int64_t counter = 0;
  for (const auto& [name, shape] : gpt_param_shapes(c)) {
    bool is_norm = name.find("ln_") != std::string::npos;
    bool is_bias = name.size() > 5 && name.ends_with(".bias");
    if (is_norm && !is_bias) {
      p[name] = full(shape, 1.0);
    } else if (is_bias) {
      p[name] = full(shape, 0.0);
    } else {
      p[name] = normal(seed, counter++, shape, 0.02);
    }
  }
  return p;
}

// Pre-LayerNorm block: x + attn(ln_1(x)), then + mlp(ln_2(x)).
static Tensor block(const GptConfig& c, const Params& p, int64_t i, const Tensor& x,
                    const Tensor& allowed) {
  const int64_t B = x.shape()[0], T = x.shape()[1], C = c.width, H = c.heads, D = C / H;
  auto w = [&](const char* n) -> const Tensor& { return p.at(layer(i, n)); };
  Tensor h = layer_norm(x, w("ln_1.weight"), w("ln_1.bias"));
  Tensor qkv = linear(h, w("attn.c_attn.weight"), w("attn.c_attn.bias"));  // [B, T, 3C]
  auto head = [&](int64_t k) {
    Tensor part = slice(qkv, {0, 0, k * C}, {B, T, (k + 1) * C});
    return transpose(reshape(part, {B, T, H, D}), {0, 2, 1, 3});  // [B, H, T, D]
  };
  Tensor y = attention(head(0), head(1), head(2), allowed);
  y = reshape(transpose(y, {0, 2, 1, 3}), {B, T, C});
  Tensor x1 = x + linear(y, w("attn.c_proj.weight"), w("attn.c_proj.bias"));
  Tensor h2 = layer_norm(x1, w("ln_2.weight"), w("ln_2.bias"));
  Tensor m = gelu(linear(h2, w("mlp.c_fc.weight"), w("mlp.c_fc.bias")));
  return x1 + linear(m, w("mlp.c_proj.weight"), w("mlp.c_proj.bias"));
}

Tensor gpt_logits(const GptConfig& c, const Params& p, const Tensor& tokens) {
  const int64_t T = tokens.shape()[1];
  if (T > c.seq || c.width % c.heads != 0) {
    throw InputError(
        fmt::format("[nn] sequence {} exceeds the preset's {} (or width {} is not a "
                    "multiple of heads {})",
                    T, c.seq, c.width, c.heads));
  }
  Tensor pos = slice(p.at("wpe.weight"), {0, 0}, {T, c.width});
  Tensor x = take(p.at("wte.weight"), tokens) + pos;  // [B, T, C]
  Tensor allowed = causal_mask(T);
  for (int64_t i = 0; i < c.layers; ++i) x = block(c, p, i, x, allowed);
  x = layer_norm(x, p.at("ln_f.weight"), p.at("ln_f.bias"));
  // Tied head: logits[B, T, V] = x[B, T, C] · wte[V, C] over C.
  return dot_general(x, p.at("wte.weight"), {{}, {}, {2}, {1}});
}

Tensor gpt_loss(const GptConfig& c, const Params& p, const Tensor& tokens, const Tensor& targets,
                const Tensor& mask) {
  return cross_entropy(gpt_logits(c, p, tokens), targets, mask);
}

}  // namespace keel::nn
