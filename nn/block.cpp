#include "nn/block.h"

#include <fmt/format.h>

#include "ir/error.h"
#include "nn/engram.h"
#include "nn/layers.h"
#include "nn/mamba.h"
#include "nn/moe.h"
#include "nn/sparse_attention.h"
#include "nn/tensor_parallel.h"
#include "trace/collectives.h"

namespace keel::nn {

std::string under(const std::string& prefix, const char* rest) {
  return prefix + "." + rest;
}

LayerKind layer_kind(const GptConfig& c, int64_t i) {
  return {c.is_moe_layer(i), c.is_engram_layer(i), c.is_mamba_layer(i),
          c.is_sparse_attention_layer(i)};
}

Tensor norm(const GptConfig& c, const NamedTensors& p, const std::string& prefix, const Tensor& x) {
  if (c.norm == "rmsnorm") return rms_norm(x, p.at(prefix + ".weight"));
  return layer_norm(x, p.at(prefix + ".weight"), p.at(prefix + ".bias"));
}

namespace {

Tensor project(const GptConfig& c, const NamedTensors& p, const std::string& name,
               const Tensor& x) {
  if (c.bias) return linear(x, p.at(name + ".weight"), p.at(name + ".bias"));
  return matmul(x, p.at(name + ".weight"));
}

// A column-parallel layer's input (`split`: the layer is split over "model"): each process's use
// of it is its share of the gradient.
Tensor column_input(bool split, const Tensor& x) {
  return split ? pvary(x, kModelAxis) : x;
}

// A row-parallel projection: this process's rows of the weight times its columns of x, summed
// over the processes, then the whole bias.
Tensor row_project(const GptConfig& c, bool split, const NamedTensors& p, const std::string& name,
                   const Tensor& x) {
  if (!split) return project(c, p, name, x);
  Tensor y = all_reduce(matmul_partial(x, p.at(name + ".weight"), kModelAxis), kModelAxis);
  return c.bias ? y + p.at(name + ".bias") : y;
}

// GPT-NeoX rotary embedding on [B, T, H, D]: rotate the two halves of D by position angles.
Tensor rotate(const Tensor& x, const Context& ctx) {
  const Shape& s = x.shape();
  const int64_t h = s[3] / 2;
  Tensor a = slice(x, {0, 0, 0, 0}, {s[0], s[1], s[2], h});
  Tensor b = slice(x, {0, 0, 0, h}, {s[0], s[1], s[2], s[3]});
  return concat({a * ctx.cos - b * ctx.sin, b * ctx.cos + a * ctx.sin}, 3);
}

// [B, T, n*D] columns [from, from + n*D) -> [B, T, n, D]: a view the attention kernels read in
// place (the layout bthd), so splitting heads copies nothing.
Tensor heads_of(const Tensor& qkv, int64_t from, int64_t n, int64_t D) {
  const int64_t B = qkv.shape()[0], T = qkv.shape()[1];
  return reshape(slice(qkv, {0, 0, from}, {B, T, from + n * D}), {B, T, n, D});
}

// The attention's addend to the stream x [B, T, C]. Split over "model", this process's heads.
// Sparse (`sparse`), it adds its indexer's loss to `totals`.
Tensor attention_mix(const GptConfig& c, const NamedTensors& p, const std::string& prefix,
                     const Tensor& x, const Context& ctx, bool sparse, BlockTotals& totals) {
  const bool heads_split = c.model_parallel > 1 && c.split_heads;
  const int64_t M = heads_split ? c.model_parallel : 1;
  const int64_t B = x.shape()[0], T = x.shape()[1], H = c.heads / M, KV = c.kv() / M;
  const int64_t D = c.width / c.heads;
  const Tensor normed = norm(c, p, under(prefix, "ln_1"), x);
  Tensor qkv = project(c, p, under(prefix, "attn.c_attn"), column_input(heads_split, normed));
  Tensor q = heads_of(qkv, 0, H, D);
  Tensor k = heads_of(qkv, H * D, KV, D);
  Tensor v = heads_of(qkv, (H + KV) * D, KV, D);
  if (c.positions == "rotary") {
    q = rotate(q, ctx);
    k = rotate(k, ctx);
  }
  // Grouped-query: KV heads serve H / KV each. [B, T, H, D] out is [B, T, H·D] without a copy.
  Tensor y;
  if (sparse) {
    SparseMix mix = c.dense_indexer_warmup
                        ? dense_warmup_mix(c.sparse_attention, p, under(prefix, "attn"), normed, q,
                                           k, v, ctx.positions, ctx.doc_ids, M)
                        : sparse_attention_mix(c.sparse_attention, p, under(prefix, "attn"), normed,
                                               q, k, v, ctx.positions, M);
    y = mix.y;
    totals.indexer =
        totals.indexer.defined() ? totals.indexer + mix.indexer_loss : mix.indexer_loss;
  } else {
    y = attention(q, k, v, ctx.doc_ids, AttentionLayout::bthd);
  }
  return row_project(c, heads_split, p, under(prefix, "attn.c_proj"), reshape(y, {B, T, H * D}));
}

}  // namespace

// Pre-norm block under `prefix`: x + mixer(norm_1(x)) (attention, or Mamba-2), then
// + mlp(norm_2(x)) (or experts). Split over "model", this process's heads and hidden units
// (nn/tensor_parallel.h).
Tensor block(const GptConfig& c, const NamedTensors& p, const std::string& prefix, LayerKind kind,
             const Tensor& stream, const Context& ctx, BlockTotals& totals) {
  if (kind.engram && !ctx.ngram_rows.defined()) {
    throw InputError(fmt::format(
        "[nn] {} reads an n-gram memory, and this forward was given no tokens to hash; pass "
        "the micro-batch's tokens (nn::gpt_blocks takes them for a split step's segments)",
        prefix));
  }
  const Tensor x = kind.engram
                       ? engram(c.engram, p, under(prefix, "engram"), stream, ctx.ngram_rows,
                                c.model_parallel > 1 && c.split_memory ? c.model_parallel : 1)
                       : stream;
  const bool mlp_split = c.model_parallel > 1 && c.split_mlp;
  const bool heads_split = c.model_parallel > 1 && c.split_heads;  // Mamba-2's heads too
  const int64_t B = x.shape()[0], T = x.shape()[1];
  Tensor x1 = x + (kind.mamba ? mamba_mixer(c.mamba, p, under(prefix, "mamba"),
                                            norm(c, p, under(prefix, "ln_1"), x), ctx.positions,
                                            ctx.doc_ids, heads_split ? c.model_parallel : 1)
                              : attention_mix(c, p, prefix, x, ctx, kind.sparse, totals));
  Tensor h = norm(c, p, under(prefix, "ln_2"), x1);
  if (kind.moe) {
    MoeOutput o = moe_ffn(c.moe, p, under(prefix, "moe"), h,
                          c.model_parallel > 1 && c.split_experts ? c.model_parallel : 1);
    totals.load.push_back(reshape(o.load, {1, c.moe.experts}));
    totals.aux = totals.aux.defined() ? totals.aux + o.aux_loss : o.aux_loss;
    totals.dropped = totals.dropped.defined() ? totals.dropped + o.dropped : o.dropped;
    return x1 + o.y;
  }
  Tensor m;
  if (c.mlp == "swiglu") {
    const int64_t F = c.hidden() / (mlp_split ? c.model_parallel : 1);
    Tensor gu = matmul(column_input(mlp_split, h), p.at(under(prefix, "mlp.c_fc.weight")));
    Tensor g = slice(gu, {0, 0, 0}, {B, T, F});
    Tensor u = slice(gu, {0, 0, F}, {B, T, 2 * F});
    m = (g * sigmoid(g)) * u;
  } else {
    m = gelu(project(c, p, under(prefix, "mlp.c_fc"), column_input(mlp_split, h)));
  }
  return x1 + row_project(c, mlp_split, p, under(prefix, "mlp.c_proj"), m);
}

void BlockTotals::add(const BlockTotals& more) {
  for (const Tensor& rows : more.load) load.push_back(rows);
  if (more.aux.defined()) aux = aux.defined() ? aux + more.aux : more.aux;
  if (more.dropped.defined()) dropped = dropped.defined() ? dropped + more.dropped : more.dropped;
  if (more.indexer.defined()) indexer = indexer.defined() ? indexer + more.indexer : more.indexer;
}

}  // namespace keel::nn
