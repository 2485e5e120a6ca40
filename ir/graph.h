#pragma once
/// @file
/// A program: nodes in SSA order (every input precedes its user), parameters and outputs.
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "ir/attrs.h"
#include "ir/op.h"
#include "ir/shape.h"
#include "ir/source_loc.h"

namespace keel {

/// A node's index in its graph's nodes().
using NodeId = int32_t;

/// The static type of a node's value: dtype and shape.
struct TensorType {
  DType dtype = DType::f32;                            ///< element type
  Shape shape;                                         ///< dimensions
  bool operator==(const TensorType&) const = default;  ///< same dtype and shape
  std::string str() const;                             ///< "f32[2,3]"
  int64_t bytes() const;                               ///< elements x element size
};

/// One operation of a graph; its single result has type `type`.
struct Node {
  Op op = Op::constant;        ///< what it computes
  std::vector<NodeId> inputs;  ///< operands, all earlier in the graph
  TensorType type;             ///< type of the result
  Attrs attrs;                 ///< the op's attributes
  SourceLoc loc;               ///< the user's line that created it
};

/// The output type of `op` applied to inputs of the given types; throws keel::Error with the rule
/// that failed (no location: callers add it). Not defined for parameters.
TensorType infer_type(Op op, std::span<const TensorType> inputs, const Attrs& attrs);

class Graph;
/// As infer_type, for a node of `g` with these inputs: scan_result reads its scan's attributes.
TensorType infer_node_type(const Graph& g, Op op, std::span<const NodeId> inputs,
                           const Attrs& attrs);

/// A program: nodes in SSA order, its parameters and outputs, and output aliases (donation).
class Graph {
 public:
  /// An empty graph named `name`.
  explicit Graph(std::string name = "main") : name_(std::move(name)) {}

  const std::string& name() const { return name_; }  ///< the program's name (the traced function's)
  void set_name(std::string name) { name_ = std::move(name); }  ///< renames the graph
  const std::vector<Node>& nodes() const { return nodes_; }     ///< every node, inputs before users
  /// Node `id`; std::out_of_range if there is none.
  const Node& node(NodeId id) const { return nodes_.at(static_cast<size_t>(id)); }
  size_t size() const { return nodes_.size(); }  ///< number of nodes
  /// Parameter nodes, in argument order.
  const std::vector<NodeId>& params() const { return params_; }
  /// Output nodes, in result order.
  const std::vector<NodeId>& outputs() const { return outputs_; }
  /// Donation (PJRT's input/output aliasing): per output, the index in params() of the parameter
  /// whose buffer it is written into, or -1 for a fresh buffer.
  const std::vector<int32_t>& output_aliases() const { return aliases_; }
  /// output_aliases()[output].
  int32_t output_alias(size_t output) const { return aliases_.at(output); }

  /// Appends a parameter of `type` as the next argument (its "index" attribute).
  NodeId add_param(TensorType type, SourceLoc loc = {});
  /// Appends a constant holding `value`.
  NodeId add_constant(Array value, SourceLoc loc = {});
  /// Appends `op` after checking its inputs; a failure throws "[api] op at file:line: rule".
  NodeId emit(Op op, std::vector<NodeId> inputs, Attrs attrs, SourceLoc loc,
              std::string_view api = "ir");
  /// Appends without checks (the parser uses it; the verifier checks afterwards).
  NodeId append_unchecked(Node node);
  /// Sets the outputs; replacing the outputs drops their aliases.
  void set_outputs(std::vector<NodeId> outputs) {
    outputs_ = std::move(outputs);
    aliases_.assign(outputs_.size(), -1);
  }
  /// Appends output `id`, written into parameter `alias`'s buffer (-1: a fresh buffer).
  void add_output(NodeId id, int32_t alias = -1) {
    outputs_.push_back(id);
    aliases_.push_back(alias);
  }
  /// Output `output` written into parameter `param`'s buffer (-1: none); the verifier checks it.
  void set_output_alias(size_t output, int32_t param) { aliases_.at(output) = param; }
  /// Replaces the parameter list (the parser uses it; the verifier checks it).
  void set_params(std::vector<NodeId> params) { params_ = std::move(params); }

 private:
  std::string name_;
  std::vector<Node> nodes_;
  std::vector<NodeId> params_;
  std::vector<NodeId> outputs_;
  std::vector<int32_t> aliases_;  ///< parallel to outputs_
};

}  // namespace keel
