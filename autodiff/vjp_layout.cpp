// VJP rules for layout ops: each moves the cotangent back through the inverse layout change.
#include <fmt/format.h>

#include "autodiff/vjp.h"
#include "ir/error.h"

namespace keel::autodiff::detail {
namespace {

// Places g (the slice's output) at positions start + i·stride of a zero array of shape x.
// Strides are undone by interleaving zeros: append a unit axis after each strided dim, pad it
// to the stride, merge it back and trim the trailing gap; then one pad puts it at `start`.
NodeId unslice(Builder& b, NodeId g, const Shape& x, const Attrs& attrs) {
  const auto& start = attrs.ints("start");
  const auto& stride = attrs.ints("stride");
  const Shape n = b.shape(g);
  if (numel(n) == 0) return b.zeros({b.dtype(g), x});
  const size_t rank = x.size();
  Shape extent = n;
  bool strided = false;
  for (int64_t s : stride) strided = strided || s > 1;
  if (strided) {
    Shape unit, merged;
    std::vector<int64_t> high;
    for (size_t d = 0; d < rank; ++d) {
      unit.push_back(n[d]);
      high.push_back(0);
      if (stride[d] > 1) {
        unit.push_back(1);
        high.push_back(stride[d] - 1);
      }
      merged.push_back(n[d] * stride[d]);
      extent[d] = (n[d] - 1) * stride[d] + 1;
    }
    NodeId spread = b.pad(b.reshape(g, unit), std::vector<int64_t>(unit.size(), 0), high);
    g = b.slice(b.reshape(spread, merged), std::vector<int64_t>(rank, 0), extent,
                std::vector<int64_t>(rank, 1));
  }
  std::vector<int64_t> high(rank);
  for (size_t d = 0; d < rank; ++d) high[d] = x[d] - start[d] - extent[d];
  return b.pad(g, start, high);
}

}  // namespace

std::vector<NodeId> vjp_layout(Builder& b, const VjpArgs& a) {
  const Node& f = a.fwd;
  // Single-input rules run only when their input needs a cotangent; concat checks per input.
  std::vector<NodeId> out(f.inputs.size(), kNone);
  const NodeId g = a.ct;
  const Shape& x = a.in[0].shape;
  switch (f.op) {
    case Op::reshape:
      out[0] = b.reshape(g, x);
      break;
    case Op::transpose: {
      const auto& perm = f.attrs.ints("perm");
      std::vector<int64_t> inverse(perm.size());
      for (size_t i = 0; i < perm.size(); ++i) inverse[perm[i]] = int64_t(i);
      out[0] = b.transpose(g, inverse);
      break;
    }
    case Op::broadcast:
      out[0] = b.sum_to(g, x);
      break;
    case Op::slice:
      out[0] = unslice(b, g, x, f.attrs);
      break;
    case Op::pad: {
      const auto& low = f.attrs.ints("low");
      std::vector<int64_t> limit(x.size());
      for (size_t d = 0; d < x.size(); ++d) limit[d] = low[d] + x[d];
      out[0] = b.slice(g, low, limit, std::vector<int64_t>(x.size(), 1));
      break;
    }
    case Op::concat: {
      const size_t axis = size_t(f.attrs.i("axis"));
      const Shape y = b.shape(g);  // a copy: emitting moves node storage
      std::vector<int64_t> start(y.size(), 0), limit(y.begin(), y.end());
      int64_t offset = 0;
      for (size_t i = 0; i < f.inputs.size(); ++i) {
        int64_t len = a.in[i].shape[axis];
        if (a.need[i]) {
          start[axis] = offset;
          limit[axis] = offset + len;
          out[i] = b.slice(g, start, limit, std::vector<int64_t>(y.size(), 1));
        }
        offset += len;
      }
      break;
    }
    default:
      throw Error(fmt::format("[autodiff] internal: {} has no layout VJP rule", op_name(f.op)));
  }
  return out;
}

}  // namespace keel::autodiff::detail
