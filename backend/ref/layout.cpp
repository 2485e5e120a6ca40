// Layout ops move elements without changing them: each output element is copied bit for bit from
// the input element its index maps to.
#include "backend/ref/indexing.h"
#include "backend/ref/kernels.h"

namespace keel::ref {
namespace {

Array reshape(const Node& node, const Array& x) {
  Array out(node.type.dtype, node.type.shape);
  for (int64_t i = 0; i < out.numel(); ++i) copy_element(out, i, x, i);
  return out;
}

// Output dim d is input dim perm[d].
Array transpose(const Node& node, const Array& x) {
  const auto& perm = node.attrs.ints("perm");
  Array out(node.type.dtype, node.type.shape);
  Index in_idx(x.shape().size());
  for_each_index(out.shape(), [&](const Index& idx, int64_t i) {
    for (size_t d = 0; d < idx.size(); ++d) in_idx[perm[d]] = idx[d];
    copy_element(out, i, x, flat_offset(in_idx, x.shape()));
  });
  return out;
}

Array broadcast(const Node& node, const Array& x) {
  Array out(node.type.dtype, node.type.shape);
  for_each_index(out.shape(), [&](const Index& idx, int64_t i) {
    copy_element(out, i, x, broadcast_offset(idx, x.shape()));
  });
  return out;
}

Array slice(const Node& node, const Array& x) {
  const auto& start = node.attrs.ints("start");
  const auto& stride = node.attrs.ints("stride");
  Array out(node.type.dtype, node.type.shape);
  Index in_idx(x.shape().size());
  for_each_index(out.shape(), [&](const Index& idx, int64_t i) {
    for (size_t d = 0; d < idx.size(); ++d) in_idx[d] = start[d] + idx[d] * stride[d];
    copy_element(out, i, x, flat_offset(in_idx, x.shape()));
  });
  return out;
}

// Each piece lands at a running offset along `axis`.
Array concat(const Node& node, std::span<const Array> in) {
  const int64_t axis = node.attrs.i("axis");
  Array out(node.type.dtype, node.type.shape);
  int64_t offset = 0;
  for (const Array& piece : in) {
    for_each_index(piece.shape(), [&](const Index& idx, int64_t j) {
      Index out_idx = idx;
      out_idx[axis] += offset;
      copy_element(out, flat_offset(out_idx, out.shape()), piece, j);
    });
    offset += piece.shape()[axis];
  }
  return out;
}

// Fill with `value`, then copy the input shifted by `low` in every dim.
Array pad(const Node& node, const Array& x) {
  const auto& low = node.attrs.ints("low");
  Array out = Array::full(node.type.shape, node.attrs.f("value"), node.type.dtype);
  for_each_index(x.shape(), [&](const Index& idx, int64_t j) {
    Index out_idx = idx;
    for (size_t d = 0; d < idx.size(); ++d) out_idx[d] += low[d];
    copy_element(out, flat_offset(out_idx, out.shape()), x, j);
  });
  return out;
}

}  // namespace

Array eval_layout(const Node& node, std::span<const Array> in) {
  switch (node.op) {
    case Op::reshape:
      return reshape(node, in[0]);
    case Op::transpose:
      return transpose(node, in[0]);
    case Op::broadcast:
      return broadcast(node, in[0]);
    case Op::slice:
      return slice(node, in[0]);
    case Op::concat:
      return concat(node, in);
    case Op::pad:
      return pad(node, in[0]);
    default:
      fail(node, "is not a layout op");
  }
}

}  // namespace keel::ref
