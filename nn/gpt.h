#pragma once
/// @file
/// A GPT-2 style decoder written in keel ops. Parameter names follow the Hugging Face GPT-2
/// layout (wte, wpe, h.N.attn.c_attn, ...), with Conv1D weights stored [in, out].
#include <functional>
#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "nn/engram_config.h"
#include "nn/mamba_config.h"
#include "nn/moe_config.h"
#include "nn/sparse_attention_config.h"
#include "policy/layer_layout.h"
#include "trace/ops.h"
#include "trace/scan.h"

/// Models written in keel ops: a GPT-2 style decoder, with mixture-of-experts layers and
/// multi-token prediction heads as options.
namespace keel::nn {

/// The model's shape and flavour; JSON through to_json / from_json, or a named preset.
struct GptConfig {
  std::string name = "gpt2-s";  ///< a preset's name; a JSON config starts from that preset
  int64_t vocab = 256;          ///< tokens the embedding has rows for
  int64_t layers = 6;           ///< transformer blocks
  int64_t width = 384;          ///< model dimension C
  int64_t heads = 6;            ///< attention heads, each width / heads wide
  int64_t seq = 256;            ///< tokens per row T
  int64_t batch = 8;            ///< rows per micro-batch B
  /// @name Block flavour
  /// The block's flavour. GPT-2: layernorm, learned positions, MHA, GELU MLP 4x wide, biases.
  ///@{
  std::string norm = "layernorm";     ///< layernorm | rmsnorm
  std::string positions = "learned";  ///< learned | rotary
  std::string mlp = "gelu";           ///< gelu | swiglu
  int64_t kv_heads = 0;               ///< grouped-query attention; 0: = heads
  int64_t mlp_hidden = 0;             ///< 0: 4 * width
  bool bias = true;                   ///< bias vectors on the projections (and layernorms)
  ///@}
  /// Mixture of experts: with moe_every = n > 0, layers n-1, 2n-1, ... use an MoE feed-forward
  /// (n = 2: every second layer); or the layers listed in moe_layer_ids (JSON "moe_layers",
  /// ascending, e.g. all but the first); neither: every layer is dense.
  int64_t moe_every = 0;
  std::vector<int64_t> moe_layer_ids;  ///< MoE layers by index (when given, moe_every is not used)
  MoeConfig moe;                       ///< what each MoE layer is made of
  /// Layers whose block first reads an n-gram memory (nn/engram.h), ascending (JSON
  /// "engram_layers"); empty: none.
  std::vector<int64_t> engram_layer_ids;
  EngramConfig engram;  ///< what each n-gram memory is made of
  /// Layers whose mixer is Mamba-2 (nn/mamba.h) instead of attention, ascending (JSON
  /// "mamba_layers"); empty: none.
  std::vector<int64_t> mamba_layer_ids;
  MambaConfig mamba;  ///< what each Mamba-2 mixer is made of
  /// Layers whose attention is sparse (nn/sparse_attention.h): a local window and the keys an
  /// indexer picks, ascending (JSON "sparse_attention_layers"); never a Mamba-2 layer.
  std::vector<int64_t> sparse_attention_layer_ids;
  SparseAttentionConfig sparse_attention;  ///< what each sparse attention is made of
  /// The layers' kinds as one letter each, repeated to fill `layers` (JSON "block_pattern"):
  /// A attention, S sparse attention, E attention with experts (MoE), M Mamba-2, N an n-gram
  /// memory then attention; every kind but E with a dense MLP. When set, it is what the layer
  /// lists (moe_layers, sparse_attention_layers, mamba_layers, engram_layers) hold.
  std::string block_pattern;
  /// Multi-token prediction: one head per weight (depth 1..3), head d predicting the token d+1
  /// places ahead of the main head's; its loss joins the objective times its weight.
  std::vector<double> mtp_weights;
  /// How the step lays out the layers (launch.layer_layout), not part of the model (left out of
  /// to_json): unrolled; scanned, repeated blocks looped inside the program over stacked
  /// parameters (nn/layer_stack.h); or split into a program every split_every layers (the
  /// trainer's StepRunner), each segment scanned or not.
  policy::LayerLayout layout;
  /// With layout.scanned: the gradient recomputes each scanned iteration from its input instead of
  /// keeping its activations (keel::ScanOptions::remat). Layout too, left out of to_json.
  bool remat_layers = false;
  /// With remat_layers: what each recomputed iteration keeps (keel::ScanOptions::remat_policy).
  RematPolicy remat_policy = RematPolicy::nothing_saveable;
  /// Processes on the mesh axis "model" the blocks are split over (nn/tensor_parallel.h): the
  /// parameters a trace receives are this process's shards. Layout too, left out of to_json.
  int64_t model_parallel = 1;
  // With model_parallel > 1, the logical dimensions split over "model" (sharding.rules); sparse
  // attention's indexers, MoE routers and shared experts, and learned positions are never
  // split. Layout too, left out of to_json.
  /// The attention heads: QKV by columns per head, the output projection by rows; and Mamba-2's
  /// heads (nn/tensor_parallel.h).
  bool split_heads = true;
  /// The dense MLPs' hidden units: the input by columns, the output by rows.
  bool split_mlp = true;
  /// The n-gram memories' table rows (the rule memory=model): each process holds a block of
  /// every table's rows, reads the rows it holds and all-reduces what was read.
  bool split_memory = false;
  /// MoE layers' routed experts (the rule experts=model): each process holds a block of every
  /// MoE layer's experts, runs the group's tokens routed to them and all-reduces their outputs.
  bool split_experts = false;
  /// MoE layers' routed experts over "data" (the rule experts=data; expert parallelism): each
  /// process holds its ZeRO-3 slice of them, a block of experts, and the step gives them to the
  /// layers per source (train/accumulate.h), whose tokens reach them by all_to_all (nn/moe.h).
  bool experts_over_data = false;
  /// The tied embedding's rows (the rule vocab=model; nn/vocabulary.h): each process holds a
  /// block of the vocabulary, its logits and its share of the loss's softmax.
  bool split_vocab = false;
  /// Whether any logical dimension is split (with model_parallel > 1, one must be).
  bool splits_any() const {
    return split_heads || split_mlp || split_memory || split_experts || split_vocab;
  }
  /// DSA's dense warm-up stage: sparse attention layers attend densely and their indexers learn
  /// from the attention over every causal key of the document (nn/sparse_attention.h; the
  /// trainer's indexer warm-up program). Layout too, left out of to_json.
  bool dense_indexer_warmup = false;

  /// Number of MTP heads.
  int64_t mtp_depth() const { return static_cast<int64_t>(mtp_weights.size()); }
  bool is_moe_layer(int64_t i) const;               ///< whether layer `i` has an MoE feed-forward
  int64_t moe_layers() const;                       ///< how many layers are MoE
  bool is_engram_layer(int64_t i) const;            ///< whether layer `i` reads an n-gram memory
  bool is_mamba_layer(int64_t i) const;             ///< whether layer `i` mixes with Mamba-2
  bool is_sparse_attention_layer(int64_t i) const;  ///< whether layer `i`'s attention is sparse
  /// Whether some feed-forward is a dense MLP (a non-MoE layer, or an MTP block's).
  bool has_dense_mlp() const { return moe_layers() < layers || mtp_depth() > 0; }
  /// Whether some block mixes with attention (a layer not Mamba-2's, or an MTP block); on a
  /// validated config (mamba_layer_ids ascending, each below layers).
  bool has_attention() const {
    return static_cast<int64_t>(mamba_layer_ids.size()) < layers || mtp_depth() > 0;
  }
  /// Key/value heads: kv_heads, or heads when 0.
  int64_t kv() const { return kv_heads == 0 ? heads : kv_heads; }
  /// MLP width: mlp_hidden, or 4 * width when 0.
  int64_t hidden() const { return mlp_hidden == 0 ? 4 * width : mlp_hidden; }
  /// The config as JSON (the model only: the layout is left out; MoE and MTP fields only when
  /// used).
  std::string to_json() const;
  /// The config a JSON object gives: its named preset (gpt2-s when unnamed) with the fields it
  /// sets. keel::InputError naming `source` and the field for a bad or inconsistent config, or one
  /// whose tensors would count more elements than int64 holds. `min_vocab`: the tokens the data
  /// can hold (nn does not know the tokenizer; the trainer passes data::kVocab).
  static GptConfig from_json(const std::string& json, const std::string& source,
                             int64_t min_vocab = 2);
  /// Sets the layer lists from block_pattern (keel::InputError naming `source` for a bad one).
  void apply_block_pattern(const std::string& source);
  /// Throws as from_json does for a bad or inconsistent config.
  void validate(const std::string& source, int64_t min_vocab = 2) const;
};

/// The preset config `name`. "gpt2-s": 6 layers, width 384, 6 heads, seq 256, batch 8; "gpt2-m": 12
/// layers, width 768, 12 heads, batch 4; "code-s": RMSNorm, rotary positions, grouped-query
/// attention with one fused QKV projection, SwiGLU MLP; "code-moe-s": code-s with MoE in every
/// second layer and one multi-token prediction head; "nam-s": code-s's width as 8 layers of
/// block_pattern "SEMN" (sparse attention, experts, Mamba-2, n-gram memory) with one
/// multi-token prediction head. Throws keel::InputError for an unknown name.
GptConfig gpt_preset(std::string_view name);
const std::vector<std::string>& gpt_preset_names();  ///< the names gpt_preset knows

/// Names (Hugging Face GPT-2's) and shapes of every parameter, in a fixed order.
std::vector<std::pair<std::string, Shape>> gpt_param_shapes(const GptConfig& c);
/// Elements over every parameter; without the position table (wpe) when !with_positions.
int64_t gpt_param_count(const GptConfig& c, bool with_positions = true);

/// Inside a trace: parameters drawn from the counter-based generator (normal, std 0.02; biases
/// zero, norm weights one).
NamedTensors gpt_init(const GptConfig& c, const Tensor& seed);
/// gpt_init's tensors made one at a time in `order` (names of gpt_param_shapes; each value as
/// gpt_init draws it, whatever the order), each handed to `take` as it is made: a caller that
/// keeps a slice of each never needs the model whole.
void gpt_init_each(const GptConfig& c, const Tensor& seed, const std::vector<std::string>& order,
                   const std::function<void(const std::string&, const Tensor&)>& take);
/// tokens [B, T] i64 -> logits [B, T, V]; the head is tied to the embedding. One document per
/// row, positions 0..T-1.
Tensor gpt_logits(const GptConfig& c, const NamedTensors& p, const Tensor& tokens);
/// Packed rows: positions [B, T] restart per document and doc_ids [B, T] keep attention inside
/// each document.
Tensor gpt_logits(const GptConfig& c, const NamedTensors& p, const Tensor& tokens,
                  const Tensor& positions, const Tensor& doc_ids);
/// The sum of -log p(target) * mask over packed rows [B, T] (evaluation's nats): with the
/// vocabulary split over "model" from each process's block of the logits, never the whole.
Tensor gpt_nll_sum(const GptConfig& c, const NamedTensors& p, const Tensor& tokens,
                   const Tensor& targets, const Tensor& mask, const Tensor& positions,
                   const Tensor& doc_ids);
/// What a training step needs from one micro-batch [B, T] of packed rows.
struct GptLosses {
  Tensor nll;                     ///< sum of -log p(next token) over live targets (nats)
  std::vector<Tensor> mtp_nll;    ///< per MTP depth: sum of -log p over its live targets
  std::vector<Tensor> mtp_count;  ///< per MTP depth: live targets (same document, in the row)
  Tensor aux_loss;                ///< the MoE layers' weighted router losses, summed; 0 if none
  Tensor moe_load;                ///< f32 [MoE layers, E] choices per expert; undefined if none
  /// f32 choices dropped for capacity, all layers; undefined if none.
  Tensor moe_dropped;
  /// Sparse attention's indexer losses (KL from the attention over the keys they picked),
  /// summed over layers and queries; undefined if no layer is sparse. Already in `nll` as 0.
  Tensor indexer_kl;
};
struct LayerSource;  // nn/layer_stack.h
/// The whole model on one micro-batch: tokens, targets, mask, positions and doc_ids are [B, T].
/// `layers`: scanned stacks read a layer at a time (nn/layer_stack.h), or null.
GptLosses gpt_losses(const GptConfig& c, const NamedTensors& p, const Tensor& tokens,
                     const Tensor& targets, const Tensor& mask, const Tensor& positions,
                     const Tensor& doc_ids, const LayerSource* layers = nullptr);

// The model in pieces, for a step split into several programs (launch.layer_layout = split:N).
/// Embeddings [B, T, C] of tokens (and positions, when learned): the first piece, before
/// gpt_blocks and gpt_head_losses.
Tensor gpt_embed(const GptConfig& c, const NamedTensors& p, const Tensor& tokens,
                 const Tensor& positions);
/// What gpt_blocks returns for its layers.
struct GptSegment {
  Tensor x;            ///< [B, T, C]
  Tensor aux_loss;     ///< these layers' weighted router losses, summed, as in GptLosses
  Tensor moe_load;     ///< choices per expert, as in GptLosses, for these layers
  Tensor moe_dropped;  ///< choices dropped, as in GptLosses, for these layers
  /// These layers' sparse attention indexer losses, summed; undefined if none is sparse. The
  /// caller adds it to its objective as GptLosses's nll holds it (l - stop_gradient(l)).
  Tensor indexer_loss;
};
/// Layers first..first+count-1 on x [B, T, C]; their parameters are named h.0 .. h.(count-1)
/// (relative to `first`), so segments of the same structure trace to the same program. `tokens`
/// [B, T] are hashed for the n-gram memory layers among them (unread when there are none).
GptSegment gpt_blocks(const GptConfig& c, const NamedTensors& p, int64_t first, int64_t count,
                      const Tensor& x, const Tensor& tokens, const Tensor& positions,
                      const Tensor& doc_ids);
/// The final norm, the tied head and the MTP heads on the last layer's output: nll, mtp_nll,
/// mtp_count (aux_loss 0, no MoE fields).
GptLosses gpt_head_losses(const GptConfig& c, const NamedTensors& p, const Tensor& hidden,
                          const Tensor& targets, const Tensor& mask, const Tensor& positions,
                          const Tensor& doc_ids);

/// f32 [B, T]: 1 where MTP depth d's target (targets[t + d]) is live and in position t's
/// document.
Tensor mtp_live(const Tensor& mask, const Tensor& doc_ids, int64_t depth);

/// Mean next-token cross-entropy over positions where mask [B, T] is 1.
Tensor gpt_loss(const GptConfig& c, const NamedTensors& p, const Tensor& tokens,
                const Tensor& targets, const Tensor& mask);

}  // namespace keel::nn
