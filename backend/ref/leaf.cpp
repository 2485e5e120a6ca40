// Ops that create values from attributes alone: constant, iota, rng_uniform.
#include "backend/ref/indexing.h"
#include "backend/ref/kernels.h"
#include "ir/rng.h"

namespace keel::ref {

Array eval_leaf(const Node& node) {
  if (node.op == Op::constant) return node.attrs.array("value").clone();
  // iota: each element holds its own coordinate along `dim`.
  const int64_t dim = node.attrs.i("dim");
  Array out(node.type.dtype, node.type.shape);
  for_each_index(out.shape(), [&](const Index& idx, int64_t i) { out.set_i64(i, idx[dim]); });
  return out;
}

Array eval_rng(const Node& node, std::span<const Array> in) {
  // Seed and counter are i64 scalars reinterpreted as the generator's uint64 words.
  const auto seed = static_cast<uint64_t>(in[0].get_i64(0));
  const auto counter = static_cast<uint64_t>(in[1].get_i64(0));
  Array out(node.type.dtype, node.type.shape);
  for (int64_t i = 0; i < out.numel(); ++i) {
    out.set_f64(i, rng_uniform01(seed, counter, static_cast<uint64_t>(i)));
  }
  return out;
}

}  // namespace keel::ref
