#pragma once
// Training state split over the mesh axis "model" (tensor parallelism, nn/tensor_parallel.h):
// each process holds its shards of the parameters the GPT blocks split, and AdamW's moments of
// them, and every other tensor whole. Checkpoints hold every tensor whole: the shards are
// gathered tensor by tensor, and a resume on any mesh takes its own shards of them.
#include <map>
#include <string>

#include "nn/gpt.h"
#include "nn/tensor_parallel.h"
#include "train/moment_shards.h"

namespace keel::train {

// The types this process holds of tensors of the `whole` types (names as the parameters'):
// the split ones' shards, the rest as they are. `whole` itself when the blocks are not split.
std::map<std::string, TensorType> model_shard_types(const nn::GptConfig& model,
                                                    const std::map<std::string, TensorType>& whole);
// Host array: this process's shard (by its "model" coordinate) of tensor `name`, `whole` itself
// when `splits` (nn::gpt_model_splits) does not list it.
Array model_shard(const std::map<std::string, nn::ModelSplit>& splits, int64_t processes,
                  const std::string& name, const Array& whole);
// Host arrays: this process's shards (by its "model" coordinate) of the split tensors of
// `whole`, the rest as they are.
NamedTensors model_shards(const nn::GptConfig& model, const NamedTensors& whole);
// The whole tensor `name` from every process's shard `mine` (all processes of the axis call it
// together, in the same order): one all_gather over "model" when `splits` (nn::gpt_model_splits)
// lists it, else `mine` itself.
Tensor whole_over_model(const std::map<std::string, nn::ModelSplit>& splits, int64_t processes,
                        const std::string& name, const Tensor& mine);
// The model's config for whole parameters (a checkpoint's): the blocks not split.
nn::GptConfig unsplit(nn::GptConfig model);

}  // namespace keel::train
