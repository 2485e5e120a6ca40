#include "backend/cuda/codegen_body.h"

namespace keel::cuda::gen {
namespace {

bool is_scalar(const Graph& g, NodeId id) {
  return numel(g.node(id).type.shape) == 1;
}

}  // namespace

std::vector<c_source::Access> Body::accesses() const {
  const Graph& g = k_.graph();
  const passes::FusionPlan& f = k_.fusion();
  std::vector<c_source::Access> s;
  auto access = [&](NodeId node, NodeId storage) {
    const Shape& shape = g.node(node).type.shape;
    if (!f.is_view(storage) || f.views[storage].contiguous) return c_source::Access{shape, {}};
    const std::vector<int64_t>& strides = f.views[storage].strides;
    if (strides.size() != shape.size()) {
      fail("internal: {} reads the strided view {} with another shape", c_source::describe(g, node),
           c_source::describe(g, storage));
    }
    return c_source::Access{shape, strides};
  };
  for (const c_source::Load& l : u_.loads) s.push_back(access(l.node, l.storage));
  for (NodeId id : u_.stores) s.push_back(access(id, id));
  return s;
}

std::string Body::hoisted(const std::string& indent) {
  const Graph& g = k_.graph();
  const passes::FusionPlan& f = k_.fusion();
  std::string s;
  for (const c_source::Load& l : u_.loads) {
    if (!is_scalar(g, l.node)) continue;
    const DType t = g.node(l.node).type.dtype;
    const NodeId stored = f.storage_of(l.storage);
    const int64_t at = f.is_view(l.storage) ? f.views[l.storage].offset : 0;
    std::string v;
    if (g.node(stored).op == Op::constant) {
      v = c_source::literal(g.node(stored).attrs.array("value"), at);
    } else {
      v = c_source::load_expr(t, k_.pointer(l.storage, false) + "[0]");
    }
    s += fmt::format("{}const {} t{} = {};\n", indent, c_source::compute_type(t), l.node, v);
  }
  return s;
}

std::string Body::compute(const std::vector<std::string>& offset, const std::string& indent) {
  const Graph& g = k_.graph();
  std::string s;
  for (size_t a = 0; a < u_.loads.size(); ++a) {
    const c_source::Load& l = u_.loads[a];
    if (is_scalar(g, l.node)) continue;
    const DType t = g.node(l.node).type.dtype;
    s += fmt::format(
        "{}const {} t{} = {};\n", indent, c_source::compute_type(t), l.node,
        c_source::load_expr(t, fmt::format("{}[{}]", k_.pointer(l.storage, false), offset[a])));
  }
  for (NodeId id : u_.compute) {
    const Node& n = g.node(id);
    std::vector<std::string> args;
    for (NodeId in : n.inputs) args.push_back(fmt::format("t{}", in));
    s += fmt::format("{}const {} t{} = {};\n", indent, c_source::compute_type(n.type.dtype), id,
                     c_source::value_expr(g, n, args));
  }
  return s;
}

std::string Body::store(const std::vector<std::string>& offset, const std::string& indent) {
  const Graph& g = k_.graph();
  std::string s;
  for (size_t a = 0; a < u_.stores.size(); ++a) {
    const NodeId id = u_.stores[a];
    const Node& n = g.node(id);
    // A cast from f32 to bf16 stores its input's bits: rounding its rounded value again would
    // give the same bits at twice the work.
    const bool f32_to_bf16 = n.op == Op::cast && n.type.dtype == DType::bf16 &&
                             g.node(n.inputs[0]).type.dtype == DType::f32;
    s += fmt::format(
        "{}{}[{}] = {};\n", indent, k_.pointer(id, true), offset[u_.loads.size() + a],
        c_source::store_expr(n.type.dtype, fmt::format("t{}", f32_to_bf16 ? n.inputs[0] : id)));
  }
  return s;
}

}  // namespace keel::cuda::gen
