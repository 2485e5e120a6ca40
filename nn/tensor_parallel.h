#pragma once
/// @file
/// Tensor parallelism over the mesh axis "model" (Megatron-LM's split of a transformer block):
/// each process holds its heads' columns of the fused QKV projection and its share of the MLP's
/// hidden units (column-parallel), and the matching rows of the two output projections
/// (row-parallel), whose products are partial sums all-reduced over "model". Everything else
/// (embeddings, norms, the output projections' biases) is whole on every process, and so is the
/// loss. MoE layers are not split: a config with both is refused.
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "nn/gpt.h"

namespace keel::nn {

/// The mesh axis a GPT's blocks are split over.
inline const std::string kModelAxis = "model";

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

}  // namespace keel::nn
