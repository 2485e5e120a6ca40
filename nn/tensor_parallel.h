#pragma once
/// @file
/// Tensor parallelism over the mesh axis "model" (Megatron-LM's split of a transformer block):
/// each process holds its heads' columns of the fused QKV projection and its share of the MLP's
/// hidden units (column-parallel), and the matching rows of the two output projections
/// (row-parallel), whose products are partial sums all-reduced over "model". Everything else
/// (embeddings unless a rule below splits them, norms, the output projections' biases) is whole
/// on every process, and so is the loss. GptConfig::split_heads and split_mlp (sharding.rules)
/// choose which of the two splits. The heads rule splits Mamba-2 mixers by their heads too (z, x,
/// dt and the per-head vectors), with B's and C's state columns split through the convolution and
/// gathered after it, the norm's mean square all-reduced and the output projection row-parallel.
/// Whole on every process, computed again by each: sparse attention's indexers (whose target, the
/// heads' mean attention weights, is all-reduced over "model"), MoE routers and shared experts;
/// n-gram memories unless the memory rule splits their tables' rows (GptConfig::split_memory): each
/// process reads the rows it holds, zeros elsewhere, and the reads are all-reduced; and MoE
/// routed experts unless the experts rule splits them (GptConfig::split_experts): each process
/// runs its block of experts on the tokens routed to them, and the outputs are all-reduced.
/// The vocab rule splits the tied embedding by rows (nn/vocabulary.h).
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "nn/gpt.h"

namespace keel::nn {

/// The mesh axis a GPT's blocks are split over.
inline const std::string kModelAxis = "model";
/// The mesh axis that splits the batch (and, given per source, MoE layers' experts: nn/moe.h).
inline const std::string kDataAxis = "data";

/// How one parameter splits over "model": dimension `dim` is the concatenation of `parts`
/// (a fused QKV weight's q, k and v columns; SwiGLU's gate and up), and each part is cut into
/// model_parallel equal blocks; process i holds block i of every part, in part order.
struct ModelSplit {
  int64_t dim = 0;
  std::vector<int64_t> parts;  ///< sizes along dim, summing to the whole dimension
};

/// The split of every parameter the blocks shard, by name (a parameter not listed is whole on
/// every process). Empty when c.model_parallel is 1.
std::map<std::string, ModelSplit> gpt_model_splits(const GptConfig& c);
/// The same by the names and shapes the step holds them under: with a scanned stack in one
/// program (c.layout.scanned, no split_every), a stacked tensor (scan.F.J.*, [layers, ...]) of
/// split layers splits as they do, one dimension further in.
std::map<std::string, ModelSplit> stored_model_splits(const GptConfig& c);
/// The shape each of `processes` holds of a `whole` parameter split by `s`.
Shape model_shard_shape(const Shape& whole, const ModelSplit& s, int64_t processes);
/// The rows `rows` (i64, any shape R) of a table [N, ...] split by rows over "model", of which
/// `table` is this process's block: [R..., ...] where each element is the whole table's, exactly
/// (the rows it holds read, zeros for the others, all-reduced). The gradient reaches only the
/// rows this process holds.
Tensor read_split_rows(const Tensor& table, const Tensor& rows);
/// Where element `i` of process `index`'s shard lies in the whole tensor (both row-major).
int64_t model_shard_source(const Shape& whole, const ModelSplit& s, int64_t index,
                           int64_t processes, int64_t i);

}  // namespace keel::nn
