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

NamedTensors model_shards(const nn::GptConfig& model, const NamedTensors& whole) {
  NamedTensors out = whole;
  const int64_t M = model.model_parallel;
  const int64_t me = M > 1 ? backend::collectives().axis_index(nn::kModelAxis) : 0;
  for (const auto& [name, split] : nn::gpt_model_splits(model)) {
    const Array all = whole.at(name).array();
    Array mine(all.dtype(), nn::model_shard_shape(all.shape(), split, M));
    const size_t item = dtype_size(all.dtype());
    for (int64_t i = 0; i < mine.numel(); ++i) {
      const int64_t from = nn::model_shard_source(all.shape(), split, me, M, i);
      std::memcpy(mine.data() + size_t(i) * item, all.data() + size_t(from) * item, item);
    }
    out[name] = Tensor(std::move(mine));
  }
  return out;
}

Tensor whole_over_model(const nn::GptConfig& model, const std::string& name, const Tensor& mine) {
  const std::map<std::string, nn::ModelSplit> splits = nn::gpt_model_splits(model);
  auto split = splits.find(name);
  if (split == splits.end()) return mine;
  const int64_t M = model.model_parallel;
  const Array held = mine.array();
  Shape shape = held.shape();
  shape[static_cast<size_t>(split->second.dim)] *= M;
  Array every(held.dtype(), {M * held.numel()});
  backend::collectives().all_gather(nn::kModelAxis, held.dtype(), held.data(), every.data(),
                                    held.numel());
  Array whole(held.dtype(), shape);
  const size_t item = dtype_size(held.dtype());
  for (int64_t p = 0; p < M; ++p) {
    for (int64_t i = 0; i < held.numel(); ++i) {
      const int64_t to = nn::model_shard_source(shape, split->second, p, M, i);
      std::memcpy(whole.data() + size_t(to) * item,
                  every.data() + size_t(p * held.numel() + i) * item, item);
    }
  }
  return Tensor(std::move(whole));
}

nn::GptConfig unsplit(nn::GptConfig model) {
  model.model_parallel = 1;
  return model;
}

}  // namespace keel::train
