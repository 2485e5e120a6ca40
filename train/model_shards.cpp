#include "train/model_shards.h"

#include <cstring>

#include "backend/collectives.h"
#include "nn/tensor_parallel.h"

namespace keel::train {

std::map<std::string, TensorType> model_shard_types(
    const nn::GptConfig& model, const std::map<std::string, TensorType>& whole) {
  std::map<std::string, TensorType> out = whole;
  for (const auto& [name, split] : nn::gpt_model_splits(model)) {
    TensorType& t = out.at(name);
    t.shape = nn::model_shard_shape(t.shape, split, model.model_parallel);
  }
  return out;
}

namespace {

// Copies process `index`'s shard out of the whole tensor (of `whole` shape) `from` into `to`, or,
// `into_whole`, the shard `from` into the whole tensor `to`: along the split dimension, block
// `index` of each part (nn::model_shard_source's element order), one contiguous run per part
// and outer index.
void copy_shard(const Shape& whole, const nn::ModelSplit& s, int64_t index, int64_t processes,
                DType dtype, const std::byte* from, std::byte* to, bool into_whole) {
  const size_t item = dtype_size(dtype);
  const auto d = static_cast<size_t>(s.dim);
  int64_t outer = 1, inner = 1;
  for (size_t k = 0; k < d; ++k) outer *= whole[k];
  for (size_t k = d + 1; k < whole.size(); ++k) inner *= whole[k];
  const int64_t held = whole[d] / processes;  // along d, in each shard
  for (int64_t o = 0; o < outer; ++o) {
    int64_t start = 0, at = 0;  // the part's first index along d: in the whole, in the shard
    for (int64_t part : s.parts) {
      const int64_t block = part / processes;
      const size_t in_whole = size_t((o * whole[d] + start + index * block) * inner) * item;
      const size_t in_shard = size_t((o * held + at) * inner) * item;
      std::memcpy(to + (into_whole ? in_whole : in_shard),
                  from + (into_whole ? in_shard : in_whole), size_t(block * inner) * item);
      start += part;
      at += block;
    }
  }
}

}  // namespace

Array model_shard(const std::map<std::string, nn::ModelSplit>& splits, int64_t processes,
                  const std::string& name, const Array& whole) {
  const auto split = splits.find(name);
  if (split == splits.end()) return whole;
  const int64_t me = backend::collectives().axis_index(nn::kModelAxis);
  Array mine(whole.dtype(), nn::model_shard_shape(whole.shape(), split->second, processes));
  copy_shard(whole.shape(), split->second, me, processes, whole.dtype(), whole.data(), mine.data(),
             false);
  return mine;
}

NamedTensors model_shards(const nn::GptConfig& model, const NamedTensors& whole) {
  NamedTensors out = whole;
  if (model.model_parallel == 1) return out;
  const std::map<std::string, nn::ModelSplit> splits = nn::gpt_model_splits(model);
  for (const auto& [name, split] : splits) {
    out[name] = Tensor(model_shard(splits, model.model_parallel, name, whole.at(name).array()));
  }
  return out;
}

Tensor whole_over_model(const std::map<std::string, nn::ModelSplit>& splits, int64_t processes,
                        const std::string& name, const Tensor& mine) {
  auto split = splits.find(name);
  if (split == splits.end()) return mine;
  const Array held = mine.array();
  Shape shape = held.shape();
  shape[static_cast<size_t>(split->second.dim)] *= processes;
  Array every(held.dtype(), {processes * held.numel()});
  backend::collectives().all_gather(nn::kModelAxis, held.dtype(), held.data(), every.data(),
                                    held.numel());
  Array whole(held.dtype(), shape);
  const size_t block = size_t(held.numel()) * dtype_size(held.dtype());
  for (int64_t p = 0; p < processes; ++p) {
    copy_shard(shape, split->second, p, processes, held.dtype(), every.data() + size_t(p) * block,
               whole.data(), true);
  }
  return Tensor(std::move(whole));
}

nn::GptConfig unsplit(nn::GptConfig model) {
  model.model_parallel = 1;
  return model;
}

}  // namespace keel::train
