// The collective entry of the kernel table: the mesh's collectives runtime, which the ref
// interpreter calls too, so both backends agree bit for bit.
#include "backend/collectives.h"
#include "backend/cpu/kernel_ops.h"
#include "backend/cpu/kernel_util.h"

namespace keel::cpu::detail {

void collective(const keel_view* in, keel_view* out, int32_t op, const char* axis,
                int64_t axis_size, int32_t reduce, int32_t dim) {
  static constexpr Op kOps[] = {Op::all_reduce, Op::all_gather, Op::reduce_scatter, Op::axis_index,
                                Op::all_to_all};
  static constexpr ReduceKind kKinds[] = {ReduceKind::sum, ReduceKind::max, ReduceKind::min};
  Attrs attrs{{"axis", std::string(axis)}, {"axis_size", axis_size}};
  attrs.set("reduce", std::string(reduce_kind_name(kKinds[reduce])));
  attrs.set("dim", int64_t{dim});
  TensorType type{static_cast<DType>(out->dtype), {}};
  if (in) {
    check_view(*in, "collective", "input");
    type = {static_cast<DType>(in->dtype), dims(*in)};
  }
  check_view(*out, "collective", "output");
  backend::run_collective(kOps[op], attrs, type, in ? in->data : nullptr, out->data);
}

}  // namespace keel::cpu::detail
