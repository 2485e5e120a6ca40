#pragma once
// Training state split over the data axis (sharding.zero: from stage 1 AdamW's moments, from 2
// the reduced gradients, at 3 the parameters): each process holds a flat slice of every tensor
// as the training state stores it, elements [rank * n / N, (rank + 1) * n / N) of its n, so a
// split part takes 1/N of the memory; checkpoints hold it whole, gathered tensor by tensor, so
// any number of processes resumes it. The names say moments, where the split began.
#include <cstdint>
#include <map>
#include <string>

#include "trace/tensor.h"

namespace keel::train {

using NamedTensors = std::map<std::string, Tensor>;

// The type of one process's slice of `whole` over `shards` processes: f32 [n / shards].
// keel::InputError naming the tensor when n is not a multiple of `shards`.
TensorType moment_shard_type(const std::string& name, const TensorType& whole, int64_t shards);
// sharding.zero = 2 (gradients split too): keel::InputError naming the first tensor whose
// global-norm blocks (train/step.h norm_blocks) do not split evenly over `shards` processes.
void check_gradient_slices(const std::map<std::string, TensorType>& whole, int64_t shards);
std::map<std::string, TensorType> moment_shard_types(const std::map<std::string, TensorType>& whole,
                                                     int64_t shards);

// Host arrays: this process's slices of `whole` (rank `rank` of `shards`).
NamedTensors slice_moments(const NamedTensors& whole, int64_t shards, int64_t rank);
// The whole tensors (of `types`) from every process's slices over the data axis, in axis order
// (all processes call it together), one tensor at a time.
NamedTensors gather_moments(const NamedTensors& mine,
                            const std::map<std::string, TensorType>& types);

// Inside a trace: this process's slice of `whole` (any shape, flattened), by its data-axis index.
Tensor own_slice(const Tensor& whole, int64_t shards);

}  // namespace keel::train
