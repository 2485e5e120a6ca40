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

int64_t split_rows(const std::string& name, const Shape& whole) {
  return name.starts_with("scan.") && !whole.empty() && whole[0] > 0 ? whole[0] : 1;
}

TensorType moment_shard_type(const std::string& name, const TensorType& whole, int64_t shards) {
  const int64_t n = numel(whole.shape), rows = split_rows(name, whole.shape);
  if (shards < 1 || n % (rows * shards) != 0) {
    throw InputError(fmt::format(
        "[train] sharding.zero: {} has {} elements{}, not a multiple of the {} processes on the "
        "data axis it would be split over; run a number of processes that divides it, or "
        "sharding.zero = 0",
        name, rows > 1 ? n / rows : n, rows > 1 ? " in each of its layers" : "", shards));
  }
  return {DType::f32, {n / shards}};
}

void check_gradient_slices(const std::map<std::string, TensorType>& whole, int64_t shards) {
  for (const auto& [name, t] : whole) {
    // Per row (a stack's layer): a count that does not divide it is moment_shard_type's error.
    const int64_t n = numel(t.shape) / split_rows(name, t.shape);
    if (n == 0 || n % shards != 0 || norm_blocks(n) % shards == 0) continue;
    throw InputError(fmt::format(
        "[train] sharding.zero = 2: {} has {} elements{}, summed for the gradient norm in {} "
        "blocks (gcd with {}), which {} processes cannot split evenly; run a process count that "
        "divides {}, or sharding.zero = 1",
        name, n, n == numel(t.shape) ? "" : " a layer", norm_blocks(n), kNormBlockBase, shards,
        norm_blocks(n)));
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
    const int64_t rows = split_rows(name, a.shape()), part = slice.shape[0] / rows;
    Array mine(DType::f32, slice.shape);
    for (int64_t r = 0; r < rows; ++r) {
      std::memcpy(mine.data() + r * part * 4, a.data() + (r * shards + rank) * part * 4,
                  static_cast<size_t>(part) * 4);
    }
    out[name] = Tensor(mine);
  }
  return out;
}

Array gather_layer(const std::string& name, const Tensor& mine, const TensorType& whole,
                   int64_t layer) {
  backend::Collectives& c = backend::collectives();
  dist::WaitScope scope("the gather of split training state", true);
  const Array& a = mine.array();
  const int64_t rows = split_rows(name, whole.shape), part = numel(a.shape()) / rows;
  Array out(DType::f32, Shape(whole.shape.begin() + 1, whole.shape.end()));
  if (rows == 1 || layer < 0 || layer >= rows ||
      numel(out.shape()) != part * c.axis_size(kDataAxis)) {
    throw Error(fmt::format(
        "[train] internal: layer {} of split stack {} ({} rows, {} elements here) does not fit {} "
        "processes",
        layer, name, rows, numel(a.shape()), c.axis_size(kDataAxis)));
  }
  c.all_gather(kDataAxis, DType::f32, a.data() + layer * part * 4, out.data(), part);
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
    const int64_t rows = split_rows(name, whole.shape);
    if (rows == 1) {
      c.all_gather(kDataAxis, DType::f32, a.data(), all.data(), numel(a.shape()));
    } else {  // a stack: each layer gathered, then copied to its place
      for (int64_t r = 0; r < rows; ++r) {
        const Array layer = gather_layer(name, t, whole, r);
        std::memcpy(all.data() + r * layer.nbytes(), layer.data(), layer.nbytes());
      }
    }
    out[name] = Tensor(all);
  }
  return out;
}

// A tensor of one row keeps the plain form (a gather of the parameter itself, which
// passes/place_collectives moves next to its readers); a stack's rows are one dim further in.
Tensor own_slice(const std::string& name, const Tensor& whole, int64_t shards) {
  // Column axis_index of [rows, shards, m]: the index stays small whatever m is.
  const int64_t n = numel(whole.shape()), rows = split_rows(name, whole.shape());
  const Tensor me = reshape(axis_index(kDataAxis), {1});
  if (rows == 1) return reshape(take(reshape(whole, {shards, n / shards}), me, 0), {n / shards});
  return reshape(take(reshape(whole, {rows, shards, n / rows / shards}), me, 1), {n / shards});
}

Tensor gather_slice(const std::string& name, const Tensor& slice, const Shape& whole) {
  const int64_t rows = split_rows(name, whole);
  if (rows == 1) return reshape(all_gather_invariant(slice, kDataAxis), whole);
  const Tensor parts = reshape(slice, {rows, numel(slice.shape()) / rows});
  return reshape(all_gather_invariant(parts, kDataAxis, 1), whole);
}

Tensor scatter_sum(const std::string& name, const Tensor& whole) {
  const int64_t n = numel(whole.shape()), rows = split_rows(name, whole.shape());
  if (rows == 1) return reduce_scatter(reshape(whole, {n}), kDataAxis);
  return reshape(reduce_scatter(reshape(whole, {rows, n / rows}), kDataAxis, 1),
                 {n / trace_axis_size(kDataAxis, SourceLoc::current())});
}

}  // namespace keel::train
