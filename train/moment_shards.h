#pragma once
// Training state split over the data axis (sharding.zero: from stage 1 AdamW's moments, from 2
// the reduced gradients, at 3 the parameters): each process holds a flat slice of every row of
// every tensor as the training state stores it, elements [rank * m / N, (rank + 1) * m / N) of
// each row's m, rows in order, so a split part takes 1/N of the memory. A scanned stack's rows
// are its layers (stage 3 reads a layer with one gather of every process's part); any other
// tensor is one row. Checkpoints hold it whole, gathered tensor by tensor, so any number of
// processes resumes it. The names say moments, where the split began.
#include <cstdint>
#include <map>
#include <string>

#include "trace/tensor.h"

namespace keel::train {

using NamedTensors = std::map<std::string, Tensor>;

// The rows the tensor stored as `name` of shape `whole` is split by: its layers for a scanned
// stack (scan.*, [layers, ...]), else 1.
int64_t split_rows(const std::string& name, const Shape& whole);

// The type of one process's slice of `whole` over `shards` processes: f32 [n / shards].
// keel::InputError naming the tensor when a row's elements are not a multiple of `shards`.
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

// Layer `layer` of the scanned stack `name` (of type `whole`) from every process's `mine`, its
// part of each layer: one layer whole on the host, the stack never (all processes call it
// together, layer by layer).
Array gather_layer(const std::string& name, const Tensor& mine, const TensorType& whole,
                   int64_t layer);

// Inside a trace, over the data axis, for the tensor stored as `name`: this process's slice of
// `whole` (by its axis index); the whole tensor of shape `whole` from every process's slice; the
// slice of the sum over the processes of `whole` (the gradients' reduce-scatter).
Tensor own_slice(const std::string& name, const Tensor& whole, int64_t shards);
Tensor gather_slice(const std::string& name, const Tensor& slice, const Shape& whole);
Tensor scatter_sum(const std::string& name, const Tensor& whole);

}  // namespace keel::train
