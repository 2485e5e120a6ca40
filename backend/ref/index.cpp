// Index ops: gather (numpy take), its inverse scatter_add, and one_hot.
#include <fmt/format.h>

#include <algorithm>
#include <vector>

#include "backend/ref/indexing.h"
#include "backend/ref/kernels.h"

namespace keel::ref {
namespace {

// Splits an index over operand[:axis] + indices + operand[axis+1:] into the operand index
// (with the looked-up, clamped position at `axis`).
struct TakeMap {
  const Array& operand;
  const Array& indices;
  int64_t axis;

  int64_t operand_offset(const Index& idx, Index& scratch) const {
    const size_t a = static_cast<size_t>(axis);
    const size_t ri = indices.shape().size();
    Index ind(idx.begin() + a, idx.begin() + a + ri);
    int64_t v = indices.get_i64(flat_offset(ind, indices.shape()));
    v = std::clamp<int64_t>(v, 0, operand.shape()[a] - 1);  // docs/ops.md: indices clamp
    for (size_t d = 0; d < a; ++d) scratch[d] = idx[d];
    scratch[a] = v;
    for (size_t d = a + 1; d < scratch.size(); ++d) scratch[d] = idx[d - 1 + ri];
    return flat_offset(scratch, operand.shape());
  }
};

Array gather(const Node& node, const Array& operand, const Array& indices) {
  const int64_t axis = node.attrs.i("axis");
  Array out(node.type.dtype, node.type.shape);
  if (out.numel() > 0 && operand.shape()[axis] == 0) {
    fail(node, fmt::format("cannot take {} indices from empty axis {} of {}", indices.numel(), axis,
                           shape_str(operand.shape())));
  }
  TakeMap map{operand, indices, axis};
  Index scratch(operand.shape().size());
  for_each_index(out.shape(), [&](const Index& idx, int64_t i) {
    copy_element(out, i, operand, map.operand_offset(idx, scratch));
  });
  return out;
}

// Sums in double / int64 and rounds once at the end, so repeated indices accumulate exactly
// before the single store.
Array scatter_add(const Node& node, const Array& operand, const Array& indices,
                  const Array& updates) {
  const int64_t axis = node.attrs.i("axis");
  Array out(node.type.dtype, node.type.shape);
  if (out.numel() == 0) return out;  // nothing to add to (an empty axis has no positions)
  const bool fl = is_float(out.dtype());
  std::vector<double> facc(fl ? out.numel() : 0);
  std::vector<int64_t> iacc(fl ? 0 : out.numel());
  for (int64_t i = 0; i < out.numel(); ++i) {
    if (fl) {
      facc[i] = operand.get_f64(i);
    } else {
      iacc[i] = operand.get_i64(i);
    }
  }
  TakeMap map{operand, indices, axis};
  Index scratch(operand.shape().size());
  for_each_index(updates.shape(), [&](const Index& idx, int64_t u) {
    int64_t o = map.operand_offset(idx, scratch);
    if (fl) {
      facc[o] += updates.get_f64(u);
    } else {
      iacc[o] = wrap_add(iacc[o], updates.get_i64(u));
    }
  });
  for (int64_t i = 0; i < out.numel(); ++i) {
    if (fl) {
      out.set_f64(i, facc[i]);
    } else {
      out.set_i64(i, iacc[i]);
    }
  }
  return out;
}

// Row k of the output is all zeros except a 1 at column indices[k] when it lies in [0, depth).
Array one_hot(const Node& node, const Array& indices) {
  const int64_t depth = node.attrs.i("depth");
  Array out(node.type.dtype, node.type.shape);
  for (int64_t k = 0; k < indices.numel(); ++k) {
    const int64_t v = indices.get_i64(k);
    for (int64_t j = 0; j < depth; ++j) out.set_i64(k * depth + j, j == v ? 1 : 0);
  }
  return out;
}

}  // namespace

Array eval_index(const Node& node, std::span<const Array> in) {
  switch (node.op) {
    case Op::gather:
      return gather(node, in[0], in[1]);
    case Op::scatter_add:
      return scatter_add(node, in[0], in[1], in[2]);
    case Op::one_hot:
      return one_hot(node, in[0]);
    default:
      fail(node, "is not an index op");
  }
}

}  // namespace keel::ref
