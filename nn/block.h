#pragma once
// One transformer block and what it needs, shared by the whole-model forward (nn/gpt.cpp) and
// the layer stack (nn/layer_stack.h). Internal to nn/.
#include <string>
#include <vector>

#include "nn/gpt.h"

namespace keel::nn {

// What every block needs besides its input: the documents, rotary angles, n-gram rows and
// positions.
struct Context {
  Tensor doc_ids;     // [B, T]: attention stays within a document; undefined: one per row
  Tensor cos, sin;    // rotary: [B, T, 1, D/2]; undefined for learned positions
  Tensor ngram_rows;  // [B, T, G] i64 (engram_rows); undefined without n-gram memory layers
  Tensor positions;   // [B, T], restarting per document (Mamba-2, sparse attention)
  const LayerSource* layers = nullptr;  // stacks a scan reads a layer at a time; null: none
};

// What one block is made of.
struct LayerKind {
  bool moe = false;     // an MoE feed-forward (else a dense MLP)
  bool engram = false;  // an n-gram memory (nn/engram.h) read before its mixer
  bool mamba = false;   // its mixer is Mamba-2 (nn/mamba.h), not attention
  bool sparse = false;  // its attention is sparse (nn/sparse_attention.h)
};
// Layer i's kind.
LayerKind layer_kind(const GptConfig& c, int64_t i);

// What the blocks of a forward pass report, gathered as they run: the MoE layers' load, router
// loss and dropped tokens, and the sparse attention indexers' loss.
struct BlockTotals {
  std::vector<Tensor> load;  // [n, E] row blocks, in layer order
  Tensor aux, dropped;       // undefined until an MoE layer ran
  Tensor indexer;            // undefined until a sparse attention layer ran
  void add(const BlockTotals& more);
};

std::string under(const std::string& prefix, const char* rest);  // prefix + "." + rest
// The configured norm (layernorm or rmsnorm) with the parameters under `prefix`.
Tensor norm(const GptConfig& c, const NamedTensors& p, const std::string& prefix, const Tensor& x);
// Pre-norm block under `prefix`: x + mixer(norm_1(x)), the mixer attention or (kind.mamba)
// Mamba-2, then + mlp(norm_2(x)) (or experts, when kind.moe, adding to `totals`); with
// kind.engram, x first gains the n-gram memory's read.
Tensor block(const GptConfig& c, const NamedTensors& p, const std::string& prefix, LayerKind kind,
             const Tensor& x, const Context& ctx, BlockTotals& totals);

}  // namespace keel::nn
