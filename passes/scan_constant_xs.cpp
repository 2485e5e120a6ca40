#include "passes/scan_constant_xs.h"

#include <memory>
#include <vector>

#include "ir/scan.h"

namespace keel::passes {
namespace {

// `body` with its xs parameters marked in `inline_xs` (by xs index) removed: each is the
// broadcast of a new const parameter appended last (of `scalars`' types, in order); nested
// scans are emitted the same way.
Graph body_with_xs_inlined(const Graph& body, const ScanInfo& s, const std::vector<char>& inline_xs,
                           const std::vector<TensorType>& scalars) {
  Graph out(body.name());
  std::vector<NodeId> map(body.size(), -1);
  const auto& params = body.params();
  auto removed = [&](size_t k) {
    const auto j = static_cast<int64_t>(k) - s.carries;
    return j >= 0 && j < s.xs && inline_xs[static_cast<size_t>(j)];
  };
  for (size_t k = 0; k < params.size(); ++k) {
    if (!removed(k))
      map[static_cast<size_t>(params[k])] =
          out.add_param(body.node(params[k]).type, body.node(params[k]).loc);
  }
  std::vector<NodeId> scalar_params;
  for (const TensorType& t : scalars) scalar_params.push_back(out.add_param(t));
  size_t next = 0;
  for (size_t k = 0; k < params.size(); ++k) {
    if (!removed(k)) continue;
    const Node& p = body.node(params[k]);
    map[static_cast<size_t>(params[k])] = out.emit(Op::broadcast, {scalar_params[next++]},
                                                   Attrs{{"shape", p.type.shape}}, p.loc, "passes");
  }
  auto mapped = [&](NodeId id) { return map.at(static_cast<size_t>(id)); };
  auto map_to = [&](NodeId id, NodeId now) { map.at(static_cast<size_t>(id)) = now; };
  for (size_t i = 0; i < body.size(); ++i) {
    const Node& n = body.nodes()[i];
    if (n.op == Op::parameter) continue;
    if (n.op == Op::scan) {
      i += emit_scan_with_constant_xs_inlined(body, static_cast<NodeId>(i), out, mapped, map_to);
      continue;
    }
    std::vector<NodeId> ins;
    for (NodeId in : n.inputs) ins.push_back(mapped(in));
    map[i] = out.emit(n.op, std::move(ins), n.attrs, n.loc, "passes");
  }
  std::vector<NodeId> outs;
  for (NodeId o : body.outputs()) outs.push_back(mapped(o));
  out.set_outputs(std::move(outs));
  return out;
}

}  // namespace

size_t emit_scan_with_constant_xs_inlined(const Graph& src, NodeId old, Graph& dst,
                                          const std::function<NodeId(NodeId)>& mapped,
                                          const std::function<void(NodeId, NodeId)>& map_to) {
  const Node& n = src.node(old);
  const ScanInfo s = scan_info(n.attrs, n.inputs.size());
  std::vector<NodeId> ins;
  for (NodeId in : n.inputs) ins.push_back(mapped(in));
  // Which xs are a broadcast of a scalar, as already emitted into `dst`.
  std::vector<char> inline_xs(static_cast<size_t>(s.xs), 0);
  std::vector<NodeId> scalars;
  std::vector<TensorType> scalar_types;
  for (int64_t j = 0; j < s.xs; ++j) {
    const Node& x = dst.node(ins[static_cast<size_t>(s.carries + j)]);
    if (x.op != Op::broadcast || !dst.node(x.inputs[0]).type.shape.empty()) continue;
    inline_xs[static_cast<size_t>(j)] = 1;
    scalars.push_back(x.inputs[0]);
    scalar_types.push_back(dst.node(x.inputs[0]).type);
  }
  std::vector<NodeId> inputs;
  for (size_t k = 0; k < ins.size(); ++k) {
    const auto j = static_cast<int64_t>(k) - s.carries;
    if (j >= 0 && j < s.xs && inline_xs[static_cast<size_t>(j)]) continue;
    inputs.push_back(ins[k]);
  }
  inputs.insert(inputs.end(), scalars.begin(), scalars.end());
  Attrs a = n.attrs;
  a.set("body",
        std::make_shared<const Graph>(body_with_xs_inlined(*s.body, s, inline_xs, scalar_types)));
  a.set("xs", s.xs - static_cast<int64_t>(scalars.size()));
  const std::vector<NodeId> results =
      emit_scan(dst, std::move(inputs), std::move(a), n.loc, "passes");
  for (int64_t k = 0; k < s.results(); ++k) {
    map_to(old + 1 + static_cast<NodeId>(k), results[static_cast<size_t>(k)]);
  }
  return static_cast<size_t>(s.results());
}

}  // namespace keel::passes
