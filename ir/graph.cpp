#include "ir/graph.h"

#include <fmt/format.h>

#include "ir/error.h"

namespace keel {

std::string TensorType::str() const {
  return fmt::format("{}{}", dtype_name(dtype), shape_str(shape));
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
  std::vector<TensorType> types;
  types.reserve(inputs.size());
  for (NodeId in : inputs) {
    if (in < 0 || static_cast<size_t>(in) >= nodes_.size()) {
      throw Error(
          fmt::format("[{}] {} at {}: input %{} does not exist", api, op_name(op), loc.str(), in));
    }
    types.push_back(nodes_[in].type);
  }
  Node n;
  try {
    n.type = infer_type(op, types, attrs);
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
