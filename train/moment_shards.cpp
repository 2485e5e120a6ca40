#include "train/moment_shards.h"

#include <fmt/format.h>

#include <cstring>
#include <vector>

#include "backend/collectives.h"
#include "dist/deadline.h"
#include "ir/error.h"
#include "trace/collectives.h"
#include "trace/ops.h"
#include "train/accumulate.h"
#include "train/step.h"

namespace keel::train {

TensorType moment_shard_type(const std::string& name, const TensorType& whole, int64_t shards) {
  const int64_t n = numel(whole.shape);
  if (shards < 1 || n % shards != 0) {
    throw InputError(fmt::format(
        "[train] sharding.zero: {} has {} elements, not a multiple of the {} processes on the "
        "data axis it would be split over; run a number of processes that divides it, or "
        "sharding.zero = 0",
        name, n, shards));
  }
  return {DType::f32, {n / shards}};
}

void check_gradient_slices(const std::map<std::string, TensorType>& whole, int64_t shards) {
  for (const auto& [name, t] : whole) {
    const int64_t n = numel(t.shape);
    // A count that does not divide the tensor is moment_shard_type's error.
    if (n == 0 || n % shards != 0 || norm_blocks(n) % shards == 0) continue;
    throw InputError(fmt::format(
        "[train] sharding.zero = 2: {} has {} elements, summed for the gradient norm in {} "
        "blocks (gcd with {}), which {} processes cannot split evenly; run a process count that "
        "divides {}, or sharding.zero = 1",
        name, n, norm_blocks(n), kNormBlockBase, shards, norm_blocks(n)));
  }
}

std::map<std::string, TensorType> moment_shard_types(const std::map<std::string, TensorType>& whole,
                                                     int64_t shards) {
  std::map<std::string, TensorType> out;
  for (const auto& [name, t] : whole) out[name] = moment_shard_type(name, t, shards);
  return out;
}

NamedTensors slice_moments(const NamedTensors& whole, int64_t shards, int64_t rank) {
  NamedTensors out;
  for (const auto& [name, t] : whole) {
    const Array a = t.array();
    const TensorType slice = moment_shard_type(name, {a.dtype(), a.shape()}, shards);
    const int64_t n = slice.shape[0];
    Array mine(DType::f32, slice.shape);
    std::memcpy(mine.data(), a.data() + rank * n * 4, static_cast<size_t>(n) * 4);
    out[name] = Tensor(mine);
  }
  return out;
}

NamedTensors gather_moments(const NamedTensors& mine,
                            const std::map<std::string, TensorType>& types) {
  backend::Collectives& c = backend::collectives();
  // The writer may first spend long on its own (metrics, its copies of the parameters).
  dist::WaitScope scope("the gather of split training state", true);
  NamedTensors out;
  for (const auto& [name, t] : mine) {
    const Array a = t.array();
    const TensorType& whole = types.at(name);
    Array all(DType::f32, whole.shape);
    if (static_cast<int64_t>(all.nbytes()) !=
        static_cast<int64_t>(a.nbytes()) * c.axis_size(kDataAxis)) {
      throw Error(
          fmt::format("[train] internal: split tensor {} has {} bytes here, {} whole over {} "
                      "processes",
                      name, a.nbytes(), all.nbytes(), c.axis_size(kDataAxis)));
    }
    c.all_gather(kDataAxis, DType::f32, a.data(), all.data(), numel(a.shape()));
    out[name] = Tensor(all);
  }
  return out;
}

Tensor own_slice(const Tensor& whole, int64_t shards) {
  // Row axis_index of [shards, n]: the index stays small whatever n is.
  const int64_t n = numel(whole.shape()) / shards;
  const Tensor rows = reshape(whole, {shards, n});
  return reshape(take(rows, reshape(axis_index(kDataAxis), {1}), 0), {n});
}

}  // namespace keel::train
