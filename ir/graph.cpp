#include "ir/graph.h"

#include <fmt/format.h>

#include "ir/error.h"
#include "ir/scan.h"

namespace keel {

int64_t TensorType::bytes() const {
  return numel(shape) * static_cast<int64_t>(dtype_size(dtype));
}

std::string TensorType::str() const {
  return fmt::format("{}{}", dtype_name(dtype), shape_str(shape));
}

TensorType infer_node_type(const Graph& g, Op op, std::span<const NodeId> inputs,
                           const Attrs& attrs) {
  if (op != Op::scan_result) {
    std::vector<TensorType> types;
    types.reserve(inputs.size());
    for (NodeId in : inputs) types.push_back(g.node(in).type);
    return infer_type(op, types, attrs);
  }
  if (inputs.size() != 1) throw Error("scan_result takes 1 input");
  const Node& s = g.node(inputs[0]);
  if (s.op != Op::scan) {
    throw Error(fmt::format("input %{} is {}; scan_result reads a scan", inputs[0], op_name(s.op)));
  }
  const std::vector<TensorType> types = scan_result_types(s.attrs, s.inputs.size());
  const int64_t k = attrs.i("index");
  if (k < 0 || k >= static_cast<int64_t>(types.size())) {
    throw Error(fmt::format("index {} is out of range; the scan has {} results", k, types.size()));
  }
  return types[static_cast<size_t>(k)];
}

NodeId Graph::add_param(TensorType type, SourceLoc loc) {
  Node n;
  n.op = Op::parameter;
  n.type = std::move(type);
  n.attrs.set("index", static_cast<int64_t>(params_.size()));
  n.loc = std::move(loc);
  NodeId id = append_unchecked(std::move(n));
  params_.push_back(id);
  return id;
}

NodeId Graph::add_constant(Array value, SourceLoc loc) {
  Node n;
  n.op = Op::constant;
  n.type = {value.dtype(), value.shape()};
  n.attrs.set("value", std::move(value));
  n.loc = std::move(loc);
  return append_unchecked(std::move(n));
}

NodeId Graph::emit(Op op, std::vector<NodeId> inputs, Attrs attrs, SourceLoc loc,
                   std::string_view api) {
  for (NodeId in : inputs) {
    if (in < 0 || static_cast<size_t>(in) >= nodes_.size()) {
      throw Error(
          fmt::format("[{}] {} at {}: input %{} does not exist", api, op_name(op), loc.str(), in));
    }
  }
  Node n;
  try {
    n.type = infer_node_type(*this, op, inputs, attrs);
  } catch (const Error& e) {
    throw Error(fmt::format("[{}] {} at {}: {}", api, op_name(op), loc.str(), e.what()));
  }
  n.op = op;
  n.inputs = std::move(inputs);
  n.attrs = std::move(attrs);
  n.loc = std::move(loc);
  return append_unchecked(std::move(n));
}

NodeId Graph::append_unchecked(Node node) {
  nodes_.push_back(std::move(node));
  return static_cast<NodeId>(nodes_.size() - 1);
}

}  // namespace keel
