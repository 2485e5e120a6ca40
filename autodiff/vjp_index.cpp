// VJP rules for gather and scatter_add, each the other's transpose. Indices never get one.
#include <fmt/format.h>

#include "autodiff/vjp.h"
#include "ir/error.h"

namespace keel::autodiff::detail {

std::vector<NodeId> vjp_index(Builder& b, const VjpArgs& a) {
  const Node& f = a.fwd;
  std::vector<NodeId> out(f.inputs.size(), kNone);
  const NodeId indices = f.inputs[1];
  Attrs axis{{"axis", f.attrs.i("axis")}};
  switch (f.op) {
    case Op::gather:
      // Repeated indices accumulate, as each gathered copy contributed to the loss.
      if (a.need[0]) out[0] = b.emit(Op::scatter_add, {b.zeros(a.in[0]), indices, a.ct}, axis);
      break;
    case Op::scatter_add:
      if (a.need[0]) out[0] = a.ct;
      if (a.need[2]) out[2] = b.emit(Op::gather, {a.ct, indices}, axis);
      break;
    default:
      throw Error(fmt::format("[autodiff] internal: {} has no index VJP rule", op_name(f.op)));
  }
  return out;
}

}  // namespace keel::autodiff::detail
