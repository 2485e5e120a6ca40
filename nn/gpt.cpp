#include "nn/gpt.h"

#include <fmt/format.h>

#include <cmath>

#include "ir/error.h"
#include "nn/block.h"
#include "nn/engram.h"
#include "nn/layer_stack.h"
#include "nn/layers.h"
#include "nn/mamba.h"
#include "nn/moe.h"
#include "nn/sparse_attention.h"
#include "nn/vocabulary.h"

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
  if (name == "code-moe-s") {
    GptConfig m = gpt_preset("code-s");
    m.name = "code-moe-s";
    m.moe_every = 2;
    m.moe.hidden = 352;  // fine-grained: two routed experts plus the shared one cost ~1.5 MLPs
    m.mtp_weights = {0.3};
    return m;
  }
  if (name == "nam-s") {
    // Seed 04's hybrid at code-s's width: sparse attention, experts, Mamba-2 and an n-gram
    // memory, twice (a scanned layout loops one 4-layer body).
    GptConfig m = gpt_preset("code-s");
    m.name = "nam-s";
    m.layers = 8;
    m.block_pattern = "SEMN";
    m.moe.hidden = 352;
    m.sparse_attention.keys = 32;  // and the window of 16: 48 of a row's 128 positions at most
    m.engram.rows = 2039;
    m.mtp_weights = {0.3};
    m.apply_block_pattern("preset nam-s");
    return m;
  }
  throw InputError(fmt::format("[nn] unknown preset '{}'; known: {}", name,
                               fmt::join(gpt_preset_names(), ", ")));
}

const std::vector<std::string>& gpt_preset_names() {
  static const std::vector<std::string> names = {"code-moe-s", "code-s", "gpt2-s", "gpt2-m",
                                                 "nam-s"};
  return names;
}

// One block's parameters under `prefix` (h.N or mtp.N); kind.moe swaps the MLP for experts,
// kind.mamba the attention for Mamba-2, and kind.engram adds an n-gram memory.
static void add_block_shapes(const GptConfig& c, const std::string& prefix, LayerKind kind,
                             std::vector<std::pair<std::string, Shape>>& out) {
  const int64_t C = c.width, D = c.width / c.heads, F = c.hidden();
  const int64_t qkv = (c.heads + 2 * c.kv()) * D;
  auto add = [&](const char* name, Shape shape, bool is_bias = false) {
    if (!is_bias || c.bias) out.push_back({under(prefix, name), std::move(shape)});
  };
  if (kind.engram) {
    for (auto& entry : engram_param_shapes(c.engram, under(prefix, "engram"), C)) {
      out.push_back(entry);
    }
  }
  add("ln_1.weight", {C});
  if (c.norm == "layernorm") add("ln_1.bias", {C}, true);
  if (kind.mamba) {
    for (auto& entry : mamba_param_shapes(c.mamba, under(prefix, "mamba"), C)) {
      out.push_back(entry);
    }
  } else {
    add("attn.c_attn.weight", {C, qkv});
    add("attn.c_attn.bias", {qkv}, true);
    add("attn.c_proj.weight", {C, C});
    add("attn.c_proj.bias", {C}, true);
    if (kind.sparse) {
      for (auto& entry :
           sparse_indexer_param_shapes(c.sparse_attention, under(prefix, "attn.indexer"), C)) {
        out.push_back(entry);
      }
    }
  }
  add("ln_2.weight", {C});
  if (c.norm == "layernorm") add("ln_2.bias", {C}, true);
  if (kind.moe) {
    for (auto& entry : moe_param_shapes(c.moe, under(prefix, "moe"), C, F)) out.push_back(entry);
  } else if (c.mlp == "swiglu") {
    add("mlp.c_fc.weight", {C, 2 * F});  // gate and up, fused
    add("mlp.c_proj.weight", {F, C});
  } else {
    add("mlp.c_fc.weight", {C, F});
    add("mlp.c_fc.bias", {F}, true);
    add("mlp.c_proj.weight", {F, C});
    add("mlp.c_proj.bias", {C}, true);
  }
}

static void add_norm_shapes(const GptConfig& c, const std::string& name,
                            std::vector<std::pair<std::string, Shape>>& out) {
  out.push_back({name + ".weight", {c.width}});
  if (c.norm == "layernorm") out.push_back({name + ".bias", {c.width}});
}

std::vector<std::pair<std::string, Shape>> gpt_param_shapes(const GptConfig& c) {
  const int64_t C = c.width;
  std::vector<std::pair<std::string, Shape>> out = {{"wte.weight", {c.vocab, C}}};
  if (c.positions == "learned") out.push_back({"wpe.weight", {c.seq, C}});
  for (int64_t i = 0; i < c.layers; ++i) {
    add_block_shapes(c, fmt::format("h.{}", i), layer_kind(c, i), out);
  }
  add_norm_shapes(c, "ln_f", out);
  // MTP head d: norms of the previous depth's state and of the next token's embedding, their
  // concatenation projected back to C, one dense block and a final norm; the output layer is
  // the shared (tied) embedding.
  for (int64_t d = 1; d <= c.mtp_depth(); ++d) {
    const std::string prefix = fmt::format("mtp.{}", d);
    add_norm_shapes(c, prefix + ".ln_h", out);
    add_norm_shapes(c, prefix + ".ln_e", out);
    out.push_back({prefix + ".proj.weight", {2 * C, C}});
    add_block_shapes(c, prefix, {}, out);
    add_norm_shapes(c, prefix + ".ln_f", out);
  }
  return out;
}

int64_t gpt_param_count(const GptConfig& c, bool with_positions) {
  int64_t n = 0;
  for (const auto& [name, shape] : gpt_param_shapes(c)) {
    if (with_positions || name != "wpe.weight") n += numel(shape);
  }
  return n;
}

void gpt_init_each(const GptConfig& c, const Tensor& seed, const std::vector<std::string>& order,
                   const std::function<void(const std::string&, const Tensor&)>& take) {
  // A random tensor's counter is its place among gpt_param_shapes' random ones, whatever the
  // order made in: the branches below, in their order.
  std::map<std::string, Shape> shapes;
  std::map<std::string, int64_t> counters;
  int64_t counter = 0;
  auto constant = [](const std::string& name) {
    if (name.ends_with(".mamba.A_log") || name.ends_with(".mamba.dt_bias")) return false;
    const bool is_norm = name.find("ln_") != std::string::npos;
    const bool is_bias = name.size() > 5 && name.ends_with(".bias");
    return name.ends_with(".mamba.D") || is_norm || is_bias;
  };
  for (const auto& [name, shape] : gpt_param_shapes(c)) {
    shapes[name] = shape;
    if (!constant(name)) counters[name] = counter++;
  }
  // Uniform [0, 1) draws on the counters normal() leaves alone (it takes 2k and 2k + 1).
  auto uniform = [&](const std::string& name) {
    return rng_uniform(seed, full({}, static_cast<double>(2 * counters.at(name)), DType::i64),
                       shapes.at(name));
  };
  for (const std::string& name : order) {
    const Shape& shape = shapes.at(name);
    const bool is_norm = name.find("ln_") != std::string::npos;
    const bool is_bias = name.size() > 5 && name.ends_with(".bias");
    // Mamba-2's decays as its reference code draws them: A in [1, 16], dt log-uniform in
    // [1e-3, 0.1] stored through softplus's inverse, the skip D one.
    if (name.ends_with(".mamba.A_log")) {
      take(name, log(1.0 + 15.0 * uniform(name)));
    } else if (name.ends_with(".mamba.dt_bias")) {
      Tensor dt = exp(uniform(name) * (std::log(0.1) - std::log(1e-3)) + std::log(1e-3));
      take(name, log(exp(dt) - 1.0));
    } else if (name.ends_with(".mamba.D") || (is_norm && !is_bias)) {
      take(name, full(shape, 1.0));
    } else if (is_bias) {
      take(name, full(shape, 0.0));
    } else {
      take(name, normal(seed, counters.at(name), shape, 0.02));
    }
  }
}

NamedTensors gpt_init(const GptConfig& c, const Tensor& seed) {
  NamedTensors p;
  std::vector<std::string> order;
  for (const auto& [name, shape] : gpt_param_shapes(c)) order.push_back(name);
  gpt_init_each(c, seed, order, [&p](const std::string& name, const Tensor& t) { p[name] = t; });
  return p;
}

namespace {

struct Trunk {
  Tensor hidden;  // [B, T, C], the last block's output before the final norm
  Context ctx;
  BlockTotals totals;
};

void check_length(const GptConfig& c, const Tensor& tokens) {
  c.validate("model config");
  if (tokens.shape()[1] > c.seq) {
    throw InputError(fmt::format("[nn] sequence length {} exceeds the preset's {} ({})",
                                 tokens.shape()[1], c.seq, c.name));
  }
}

// Token (and learned position) embeddings [B, T, C].
Tensor embed(const GptConfig& c, const NamedTensors& p, const Tensor& tokens,
             const Tensor& positions) {
  Tensor x = token_embedding(c, p, tokens);
  if (c.positions == "learned") x = x + take(p.at("wpe.weight"), positions);
  return x;
}

// What every block needs besides its input: the documents, rotary angles, the positions (with
// Mamba-2 or sparse attention layers) and, with n-gram memory layers and `tokens` given, each
// position's rows of the memory's tables.
Context context(const GptConfig& c, const Tensor& tokens, const Tensor& positions,
                const Tensor& doc_ids) {
  Context ctx{doc_ids, {}, {}, {}, {}};
  if (!c.mamba_layer_ids.empty() || !c.sparse_attention_layer_ids.empty()) {
    ctx.positions = positions;
  }
  if (!c.engram_layer_ids.empty() && tokens.defined()) {
    ctx.ngram_rows = engram_rows(c.engram, c.vocab, tokens, positions);
  }
  if (c.positions == "rotary") {
    const int64_t B = positions.shape()[0], T = positions.shape()[1];
    const int64_t half = c.width / c.heads / 2;
    // inv_freq[j] = 10000^(-j/half); angle[b, t, j] = position * inv_freq[j].
    Tensor j = cast(iota({half}, 0), DType::f32);
    Tensor inv = exp(j * (-std::log(10000.0) / static_cast<double>(half)));
    Tensor pos = reshape(cast(positions, DType::f32), {B, T, 1, 1});
    Tensor angle = pos * reshape(inv, {1, 1, 1, half});
    ctx.cos = cos(angle);
    ctx.sin = sin(angle);
  }
  return ctx;
}

Trunk trunk(const GptConfig& c, const NamedTensors& p, const Tensor& tokens,
            const Tensor& positions, const Tensor& doc_ids, const LayerSource* layers = nullptr) {
  check_length(c, tokens);
  Trunk out;
  out.ctx = context(c, tokens, positions, doc_ids);
  out.ctx.layers = layers;
  Tensor x = embed(c, p, tokens, positions);
  out.hidden = run_layers(c, p, 0, c.layers, 0, x, out.ctx, out.totals);
  return out;
}

// x[:, t] <- x[:, t + d] along axis 1 of [B, T], the last d places filled with `fill`.
Tensor shift_left(const Tensor& x, int64_t d, double fill) {
  const int64_t B = x.shape()[0], T = x.shape()[1];
  if (d == 0) return x;
  if (d >= T) return full({B, T}, fill, x.dtype());
  return concat({slice(x, {0, d}, {B, T}), full({B, d}, fill, x.dtype())}, 1);
}

}  // namespace

Tensor gpt_logits(const GptConfig& c, const NamedTensors& p, const Tensor& tokens) {
  const int64_t B = tokens.shape()[0], T = tokens.shape()[1];
  Trunk t = trunk(c, p, tokens, broadcast_to(iota({1, T}, 1), {B, T}), Tensor());
  return whole_logits(c, p, norm(c, p, "ln_f", t.hidden));
}

Tensor gpt_logits(const GptConfig& c, const NamedTensors& p, const Tensor& tokens,
                  const Tensor& positions, const Tensor& doc_ids) {
  Trunk t = trunk(c, p, tokens, positions, doc_ids);
  return whole_logits(c, p, norm(c, p, "ln_f", t.hidden));
}

Tensor gpt_nll_sum(const GptConfig& c, const NamedTensors& p, const Tensor& tokens,
                   const Tensor& targets, const Tensor& mask, const Tensor& positions,
                   const Tensor& doc_ids) {
  Trunk t = trunk(c, p, tokens, positions, doc_ids);
  return next_token_nll(c, held_logits(c, p, norm(c, p, "ln_f", t.hidden)), targets, mask);
}

namespace {

// The next-token loss and the MTP heads on the last block's output.
GptLosses head_losses(const GptConfig& c, const NamedTensors& p, const Tensor& hidden,
                      const Context& ctx, const Tensor& targets, const Tensor& mask,
                      const Tensor& doc_ids) {
  GptLosses out;
  out.nll = next_token_nll(c, held_logits(c, p, norm(c, p, "ln_f", hidden)), targets, mask);
  // MTP depth d at position t predicts targets[t + d] from the depth d-1 state and the
  // embedding of the token at t + d (= targets[t + d - 1]), like DeepSeek-V3's sequential heads.
  Tensor state = hidden;
  BlockTotals none;  // MTP blocks are dense
  for (int64_t d = 1; d <= c.mtp_depth(); ++d) {
    const std::string prefix = fmt::format("mtp.{}", d);
    Tensor next = token_embedding(c, p, shift_left(targets, d - 1, 0));
    Tensor joined =
        concat({norm(c, p, prefix + ".ln_h", state), norm(c, p, prefix + ".ln_e", next)}, 2);
    state = block(c, p, prefix, {}, matmul(joined, p.at(prefix + ".proj.weight")), ctx, none);
    Tensor live = mtp_live(mask, doc_ids, d);
    out.mtp_nll.push_back(next_token_nll(c, held_logits(c, p, norm(c, p, prefix + ".ln_f", state)),
                                         shift_left(targets, d, 0), live));
    out.mtp_count.push_back(sum(live));
  }
  out.aux_loss = full({}, 0.0);
  return out;
}

// The MoE totals of some blocks as GptLosses-style fields.
void moe_fields(const BlockTotals& m, Tensor& aux, Tensor& load, Tensor& dropped) {
  aux = m.aux.defined() ? m.aux : full({}, 0.0);
  if (m.load.empty()) return;
  load = m.load.size() == 1 ? m.load[0] : concat(m.load, 0);
  dropped = m.dropped;
}

}  // namespace

GptLosses gpt_losses(const GptConfig& c, const NamedTensors& p, const Tensor& tokens,
                     const Tensor& targets, const Tensor& mask, const Tensor& positions,
                     const Tensor& doc_ids, const LayerSource* layers) {
  Trunk t = trunk(c, p, tokens, positions, doc_ids, layers);
  GptLosses out = head_losses(c, p, t.hidden, t.ctx, targets, mask, doc_ids);
  moe_fields(t.totals, out.aux_loss, out.moe_load, out.moe_dropped);
  if (t.totals.indexer.defined()) {
    // The indexers' loss as DSA trains it: its gradient reaches the indexers alone (their inputs
    // are detached), and adding l - stop_gradient(l), exactly 0, leaves the loss's value the
    // language model's, bit for bit.
    out.nll = out.nll + (t.totals.indexer - stop_gradient(t.totals.indexer));
    out.indexer_kl = stop_gradient(t.totals.indexer);
  }
  return out;
}

Tensor gpt_embed(const GptConfig& c, const NamedTensors& p, const Tensor& tokens,
                 const Tensor& positions) {
  check_length(c, tokens);
  return embed(c, p, tokens, positions);
}

GptSegment gpt_blocks(const GptConfig& c, const NamedTensors& p, int64_t first, int64_t count,
                      const Tensor& x, const Tensor& tokens, const Tensor& positions,
                      const Tensor& doc_ids) {
  // The memory's rows only where a layer here reads them: a scanned segment would carry them
  // into its loop.
  bool reads_memory = false;
  for (int64_t i = first; i < first + count; ++i)
    reads_memory = reads_memory || c.is_engram_layer(i);
  Context ctx = context(c, reads_memory ? tokens : Tensor(), positions, doc_ids);
  BlockTotals moe;
  GptSegment out;
  out.x = run_layers(c, p, first, count, first, x, ctx, moe);
  moe_fields(moe, out.aux_loss, out.moe_load, out.moe_dropped);
  out.indexer_loss = moe.indexer;
  return out;
}

GptLosses gpt_head_losses(const GptConfig& c, const NamedTensors& p, const Tensor& hidden,
                          const Tensor& targets, const Tensor& mask, const Tensor& positions,
                          const Tensor& doc_ids) {
  return head_losses(c, p, hidden, context(c, Tensor(), positions, doc_ids), targets, mask,
                     doc_ids);
}

Tensor mtp_live(const Tensor& mask, const Tensor& doc_ids, int64_t depth) {
  Tensor same_doc = cast(eq(shift_left(doc_ids, depth, -1), doc_ids), DType::f32);
  return shift_left(mask, depth, 0) * same_doc;
}

Tensor gpt_loss(const GptConfig& c, const NamedTensors& p, const Tensor& tokens,
                const Tensor& targets, const Tensor& mask) {
  return cross_entropy(gpt_logits(c, p, tokens), targets, mask);
}

}  // namespace keel::nn
