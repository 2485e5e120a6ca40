#include "backend/cuda/target.h"

#include "ir/op.h"

namespace keel::cuda {
namespace {

bool reads_view(const Node& reader, size_t, const passes::View&) {
  return is_elementwise(reader.op) || reader.op == Op::reduce_sum || reader.op == Op::reduce_max ||
         reader.op == Op::reduce_mean;
}

}  // namespace

const passes::Target& lowering_target() {
  static const passes::Target target = [] {
    passes::Target t;
    t.name = "cuda";
    t.reads_view = reads_view;
    t.alignment = 256;
    t.fuse_reductions = true;
    t.scan_spare_carries = true;
    return t;
  }();
  return target;
}

passes::Lowered lower(const Graph& graph, passes::PassOptions options) {
  options.target = lowering_target();
  return passes::lower(graph, options);
}

}  // namespace keel::cuda
