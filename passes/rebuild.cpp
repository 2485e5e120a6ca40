#include "passes/rebuild.h"

#include <fmt/format.h>

#include "ir/error.h"

namespace keel::passes {

Rebuilder::Rebuilder(const Graph& src) : src_(src), dst_(src.name()), map_(src.size(), -1) {}

NodeId Rebuilder::mapped(NodeId old) const {
  NodeId now = map_.at(static_cast<size_t>(old));
  if (now < 0) {
    throw Error(
        fmt::format("[passes] node %{} ({}) was used before the pass mapped it; this is a "
                    "bug in the pass: disable it and report the graph",
                    old, op_name(src_.node(old).op)));
  }
  return now;
}

std::vector<NodeId> Rebuilder::mapped_inputs(NodeId old) const {
  std::vector<NodeId> ins;
  for (NodeId in : src_.node(old).inputs) ins.push_back(mapped(in));
  return ins;
}

NodeId Rebuilder::copy(NodeId old) {
  const Node& n = src_.node(old);
  NodeId now;
  if (n.op == Op::parameter) {
    now = dst_.append_unchecked(n);  // keeps its index attribute; params() is set in finish()
  } else {
    now = emit(n.op, mapped_inputs(old), n.attrs, n.loc);
    if (dst_.node(now).type != n.type) {
      throw Error(
          fmt::format("[passes] node %{} ({}) at {} changed type {} -> {} when copied; "
                      "this is a bug in the pass: disable it and report the graph",
                      old, op_name(n.op), n.loc.str(), n.type.str(), dst_.node(now).type.str()));
    }
  }
  map_to(old, now);
  return now;
}

NodeId Rebuilder::emit(Op op, std::vector<NodeId> inputs, Attrs attrs, const SourceLoc& loc) {
  return dst_.emit(op, std::move(inputs), std::move(attrs), loc, "passes");
}

Graph Rebuilder::finish() {
  std::vector<NodeId> params;
  for (NodeId p : src_.params()) params.push_back(mapped(p));
  std::vector<NodeId> outputs;
  for (NodeId o : src_.outputs()) outputs.push_back(mapped(o));
  dst_.set_params(std::move(params));
  dst_.set_outputs(std::move(outputs));
  for (size_t k = 0; k < src_.outputs().size(); ++k) dst_.set_output_alias(k, src_.output_alias(k));
  return std::move(dst_);
}

NodeId ChainCopies::copy(NodeId v, NodeId at, const std::function<bool(NodeId)>& repeat) {
  auto it = copies_.find(v);
  if (it != copies_.end() && at - it->second.at < distance_) return it->second.id;
  const Node& n = rb_.src().node(v);
  std::vector<NodeId> inputs;
  for (NodeId w : n.inputs) inputs.push_back(repeat(w) ? copy(w, at, repeat) : rb_.mapped(w));
  const NodeId id = rb_.emit(n.op, std::move(inputs), n.attrs, n.loc);
  copies_[v] = {id, at};
  return id;
}

}  // namespace keel::passes
