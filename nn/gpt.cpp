#include "nn/gpt.h"

#include <fmt/format.h>

#include <cmath>

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
  if (name == "code-s") {
    c.name = "code-s";
    c.layers = 4;
    c.width = 256;
    c.heads = 8;
    c.kv_heads = 2;
    c.mlp_hidden = 704;  // about 8/3 of the width (SwiGLU's usual), a multiple of 64
    c.seq = 128;         // same tokens per step as 8 x 256, 20% faster here (attention)
    c.batch = 16;
    c.norm = "rmsnorm";
    c.positions = "rotary";
    c.mlp = "swiglu";
    c.bias = false;
    return c;
  }
  throw InputError(fmt::format("[nn] unknown preset '{}'; known: {}", name,
                               fmt::join(gpt_preset_names(), ", ")));
}

const std::vector<std::string>& gpt_preset_names() {
  static const std::vector<std::string> names = {"code-s", "gpt2-s", "gpt2-m"};
  return names;
}

static std::string layer(int64_t i, const char* rest) {
  return fmt::format("h.{}.{}", i, rest);
}

std::vector<std::pair<std::string, Shape>> gpt_param_shapes(const GptConfig& c) {
  const int64_t C = c.width, D = c.width / c.heads, F = c.hidden();
  const int64_t qkv = (c.heads + 2 * c.kv()) * D;
  std::vector<std::pair<std::string, Shape>> out = {{"wte.weight", {c.vocab, C}}};
  if (c.positions == "learned") out.push_back({"wpe.weight", {c.seq, C}});
  auto add = [&](int64_t i, const char* name, Shape shape, bool is_bias = false) {
    if (!is_bias || c.bias) out.push_back({layer(i, name), std::move(shape)});
  };
  for (int64_t i = 0; i < c.layers; ++i) {
    add(i, "ln_1.weight", {C});
    if (c.norm == "layernorm") add(i, "ln_1.bias", {C}, true);
    add(i, "attn.c_attn.weight", {C, qkv});
    add(i, "attn.c_attn.bias", {qkv}, true);
    add(i, "attn.c_proj.weight", {C, C});
    add(i, "attn.c_proj.bias", {C}, true);
    add(i, "ln_2.weight", {C});
    if (c.norm == "layernorm") add(i, "ln_2.bias", {C}, true);
    if (c.mlp == "swiglu") {
      add(i, "mlp.c_fc.weight", {C, 2 * F});  // gate and up, fused
      add(i, "mlp.c_proj.weight", {F, C});
    } else {
      add(i, "mlp.c_fc.weight", {C, F});
      add(i, "mlp.c_fc.bias", {F}, true);
      add(i, "mlp.c_proj.weight", {F, C});
      add(i, "mlp.c_proj.bias", {C}, true);
    }
  }
  out.push_back({"ln_f.weight", {C}});
  if (c.norm == "layernorm") out.push_back({"ln_f.bias", {C}});
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

namespace {

struct Context {
  Tensor allowed;   // [B, 1, T, T] bool or [T, T]
  Tensor cos, sin;  // rotary: [B, 1, T, D/2]
};

Tensor norm(const GptConfig& c, const Params& p, const std::string& prefix, const Tensor& x) {
  if (c.norm == "rmsnorm") return rms_norm(x, p.at(prefix + ".weight"));
  return layer_norm(x, p.at(prefix + ".weight"), p.at(prefix + ".bias"));
}

Tensor project(const GptConfig& c, const Params& p, const std::string& name, const Tensor& x) {
  if (c.bias) return linear(x, p.at(name + ".weight"), p.at(name + ".bias"));
  return matmul(x, p.at(name + ".weight"));
}

// GPT-NeoX rotary embedding on [B, H, T, D]: rotate the two halves of D by position angles.
Tensor rotate(const Tensor& x, const Context& ctx) {
  const Shape& s = x.shape();
  const int64_t h = s[3] / 2;
  Tensor a = slice(x, {0, 0, 0, 0}, {s[0], s[1], s[2], h});
  Tensor b = slice(x, {0, 0, 0, h}, {s[0], s[1], s[2], s[3]});
  return concat({a * ctx.cos - b * ctx.sin, b * ctx.cos + a * ctx.sin}, 3);
}

// [B, T, n*D] columns [from, from + n*D) -> [B, n, T, D].
Tensor heads_of(const Tensor& qkv, int64_t from, int64_t n, int64_t D) {
  const int64_t B = qkv.shape()[0], T = qkv.shape()[1];
  Tensor part = slice(qkv, {0, 0, from}, {B, T, from + n * D});
  return transpose(reshape(part, {B, T, n, D}), {0, 2, 1, 3});
}

// Grouped-query attention: each of the kv heads serves heads/kv query heads.
Tensor repeat_kv(const Tensor& x, int64_t groups) {
  if (groups == 1) return x;
  const Shape& s = x.shape();  // [B, KV, T, D]
  Tensor e =
      broadcast_to(reshape(x, {s[0], s[1], 1, s[2], s[3]}), {s[0], s[1], groups, s[2], s[3]});
  return reshape(e, {s[0], s[1] * groups, s[2], s[3]});
}

// Pre-norm block: x + attn(norm_1(x)), then + mlp(norm_2(x)).
Tensor block(const GptConfig& c, const Params& p, int64_t i, const Tensor& x, const Context& ctx) {
  const int64_t B = x.shape()[0], T = x.shape()[1], C = c.width, H = c.heads, KV = c.kv();
  const int64_t D = C / H;
  Tensor qkv = project(c, p, layer(i, "attn.c_attn"), norm(c, p, layer(i, "ln_1"), x));
  Tensor q = heads_of(qkv, 0, H, D);
  Tensor k = heads_of(qkv, H * D, KV, D);
  Tensor v = heads_of(qkv, (H + KV) * D, KV, D);
  if (c.positions == "rotary") {
    q = rotate(q, ctx);
    k = rotate(k, ctx);
  }
  Tensor y = attention(q, repeat_kv(k, H / KV), repeat_kv(v, H / KV), ctx.allowed);
  y = reshape(transpose(y, {0, 2, 1, 3}), {B, T, C});
  Tensor x1 = x + project(c, p, layer(i, "attn.c_proj"), y);
  Tensor h = norm(c, p, layer(i, "ln_2"), x1);
  Tensor m;
  if (c.mlp == "swiglu") {
    const int64_t F = c.hidden();
    Tensor gu = matmul(h, p.at(layer(i, "mlp.c_fc.weight")));  // [B, T, 2F]
    Tensor g = slice(gu, {0, 0, 0}, {B, T, F});
    Tensor u = slice(gu, {0, 0, F}, {B, T, 2 * F});
    m = (g * sigmoid(g)) * u;
  } else {
    m = gelu(project(c, p, layer(i, "mlp.c_fc"), h));
  }
  return x1 + project(c, p, layer(i, "mlp.c_proj"), m);
}

Tensor forward(const GptConfig& c, const Params& p, const Tensor& tokens, const Tensor& positions,
               const Tensor& allowed) {
  const int64_t B = tokens.shape()[0], T = tokens.shape()[1];
  c.validate("model config");
  if (T > c.seq) {
    throw InputError(
        fmt::format("[nn] sequence length {} exceeds the preset's {} ({})", T, c.seq, c.name));
  }
  Context ctx{allowed, {}, {}};
  Tensor x = take(p.at("wte.weight"), tokens);  // [B, T, C]
  if (c.positions == "learned") {
    x = x + take(p.at("wpe.weight"), positions);
  } else {
    const int64_t half = c.width / c.heads / 2;
    // inv_freq[j] = 10000^(-j/half); angle[b, t, j] = position * inv_freq[j].
    Tensor j = cast(iota({half}, 0), DType::f32);
    Tensor inv = exp(j * (-std::log(10000.0) / static_cast<double>(half)));
    Tensor pos = reshape(cast(positions, DType::f32), {B, 1, T, 1});
    Tensor angle = pos * reshape(inv, {1, 1, 1, half});
    ctx.cos = cos(angle);
    ctx.sin = sin(angle);
  }
  for (int64_t i = 0; i < c.layers; ++i) x = block(c, p, i, x, ctx);
  x = norm(c, p, "ln_f", x);
  // Tied head: logits[B, T, V] = x[B, T, C] · wte[V, C] over C.
  return dot_general(x, p.at("wte.weight"), {{}, {}, {2}, {1}});
}

}  // namespace

Tensor gpt_logits(const GptConfig& c, const Params& p, const Tensor& tokens) {
  const int64_t B = tokens.shape()[0], T = tokens.shape()[1];
  return forward(c, p, tokens, broadcast_to(iota({1, T}, 1), {B, T}), causal_mask(T));
}

Tensor gpt_logits(const GptConfig& c, const Params& p, const Tensor& tokens,
                  const Tensor& positions, const Tensor& doc_ids) {
  const int64_t B = tokens.shape()[0], T = tokens.shape()[1];
  // allowed[b, 0, t, s] = s <= t and doc_ids[b, t] == doc_ids[b, s].
  Tensor same = eq(reshape(doc_ids, {B, 1, T, 1}), reshape(doc_ids, {B, 1, 1, T}));
  Tensor causal = reshape(causal_mask(T), {1, 1, T, T});
  Tensor allowed = select(causal, same, full({}, 0.0, DType::boolean));
  return forward(c, p, tokens, positions, allowed);
}

Tensor gpt_loss(const GptConfig& c, const Params& p, const Tensor& tokens, const Tensor& targets,
                const Tensor& mask) {
  return cross_entropy(gpt_logits(c, p, tokens), targets, mask);
}

}  // namespace keel::nn
