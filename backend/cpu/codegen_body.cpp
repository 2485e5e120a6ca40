// The statements inside a loop: load each input once, compute every fused value into a local
// scalar, store the values the rest of the program reads.
#include <set>

#include "backend/cpu/codegen_internal.h"

namespace keel::cpu::gen {
namespace {

bool is_scalar(const Graph& g, NodeId id) {
  return numel(g.node(id).type.shape) == 1;
}

}  // namespace

std::vector<Access> Body::accesses() const {
  std::vector<Access> s;
  for (const Load& l : u_.loads) {
    const passes::View* v = b_.view(l.storage);
    s.push_back({g_.node(l.node).type.shape, v ? v->strides : std::vector<int64_t>{}});
  }
  for (NodeId id : u_.stores) {
    const passes::View* v = b_.view(id);  // a value stored into a concat's buffer
    s.push_back({g_.node(id).type.shape, v ? v->strides : std::vector<int64_t>{}});
  }
  return s;
}

std::string Body::hoisted() const {
  std::string s;
  for (const Load& l : u_.loads) {
    if (!is_scalar(g_, l.node)) continue;
    const Node& src = g_.node(l.storage);
    const DType t = g_.node(l.node).type.dtype;
    const std::string v = src.op == Op::constant ? literal(src.attrs.array("value"), 0)
                                                 : load_expr(t, fmt::format("v{}[0]", l.storage));
    s += fmt::format("    const {} t{} = {};\n", compute_type(t), l.node, v);
  }
  return s;
}

std::string Body::compute(const std::vector<std::string>& offset, const std::string& indent) const {
  std::string s;
  for (size_t k = 0; k < u_.loads.size(); ++k) {
    const Load& l = u_.loads[k];
    if (is_scalar(g_, l.node)) continue;
    const DType t = g_.node(l.node).type.dtype;
    s += fmt::format("{}const {} t{} = {};\n", indent, compute_type(t), l.node,
                     load_expr(t, fmt::format("{}[{}]", ptr(l.storage), offset[k])));
  }
  for (NodeId id : u_.compute) {
    const Node& n = g_.node(id);
    std::vector<std::string> args;
    for (NodeId in : n.inputs) args.push_back(fmt::format("t{}", in));
    s += fmt::format("{}const {} t{} = {};\n", indent, compute_type(n.type.dtype), id,
                     value_expr(g_, n, args));
  }
  return s;
}

std::string Body::store(const std::vector<std::string>& offset, const std::string& indent) const {
  std::string s;
  for (size_t k = 0; k < u_.stores.size(); ++k) {
    const NodeId id = u_.stores[k];
    // Without restrict the stored value's own (writable) pointer is the same buffer anyway.
    const NodeId into = restrict_ok() ? store_target(id) : id;
    // A cast from f32 to bf16 stores its input's bits: rounding its rounded value again would
    // give the same bits at twice the work.
    const Node& n = g_.node(id);
    const bool f32_to_bf16 = n.op == Op::cast && n.type.dtype == DType::bf16 &&
                             g_.node(n.inputs[0]).type.dtype == DType::f32;
    s += fmt::format("{}{}[{}] = {};\n", indent, ptr(into), offset[u_.loads.size() + k],
                     store_expr(n.type.dtype, fmt::format("t{}", f32_to_bf16 ? n.inputs[0] : id)));
  }
  return s;
}

// Restrict is a promise that no written buffer overlaps a read one; the memory plan may place
// a value over an input that dies in the same loop, and then the promise would be false.
bool Body::restrict_ok() const {
  std::vector<NodeId> written = u_.stores;
  if (u_.kind == UnitKind::Reduce) written.push_back(u_.root);
  for (NodeId w : written) {
    const auto [w0, w1] = b_.arena_range(g_, w);
    if (w0 < 0) continue;
    for (const Load& l : u_.loads) {
      const auto [r0, r1] = b_.arena_range(g_, l.storage);
      if (r0 >= 0 && r0 < w1 && w0 < r1) return false;
    }
  }
  return true;
}

bool Body::loads(NodeId storage) const {
  for (const Load& l : u_.loads) {
    if (l.storage == storage && !is_scalar(g_, l.node)) return true;
  }
  return false;
}

NodeId Body::store_target(NodeId id) const {
  const NodeId p = b_.into_param.empty() ? -1 : b_.into_param[id];
  return p >= 0 && loads(p) ? p : id;
}

std::string Body::ptr(NodeId storage) const {
  return fmt::format("{}{}", restrict_ok() ? "p" : "v", storage);
}

std::string Body::restrict_aliases(const std::string& indent) const {
  if (!restrict_ok()) return "";
  std::string s;
  std::vector<NodeId> written = u_.stores;
  if (u_.kind == UnitKind::Reduce) written.push_back(u_.root);
  std::set<NodeId> targets;  // parameters a donated output is written into, through their pointer
  for (NodeId w : written) {
    if (store_target(w) != w) targets.insert(store_target(w));
  }
  std::set<NodeId> done;
  for (const Load& l : u_.loads) {
    if (is_scalar(g_, l.node) || !done.insert(l.storage).second) continue;
    const std::string_view t = storage_type(g_.node(l.storage).type.dtype);
    if (targets.count(l.storage)) {
      s += fmt::format("{}{}* __restrict p{} = const_cast<{}*>(v{});\n", indent, t, l.storage, t,
                       l.storage);
    } else {
      s += fmt::format("{}const {}* __restrict p{} = v{};\n", indent, t, l.storage, l.storage);
    }
  }
  for (NodeId w : written) {
    if (store_target(w) != w || !done.insert(w).second) continue;
    s += fmt::format("{}{}* __restrict p{} = v{};\n", indent, storage_type(g_.node(w).type.dtype),
                     w, w);
  }
  return s;
}

}  // namespace keel::cpu::gen
