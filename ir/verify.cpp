// Structural checks on a whole graph; every message names the node, its op and its location.
#include "ir/verify.h"

#include <fmt/format.h>

#include "ir/error.h"

namespace keel {
namespace {

std::string where(const Graph& g, NodeId id) {
  const Node& n = g.node(id);
  return fmt::format("node %{} ({}) at {}", id, op_name(n.op), n.loc.str());
}

bool valid_id(const Graph& g, NodeId id) {
  return id >= 0 && static_cast<size_t>(id) < g.size();
}

// Inputs, arity and type of one node; the type is only inferred when inputs and arity are sound.
void check_node(const Graph& g, NodeId id, std::vector<std::string>& out) {
  const Node& n = g.node(id);
  auto problem = [&](std::string rule) { out.push_back(where(g, id) + ": " + rule); };
  bool inputs_ok = true;
  for (size_t i = 0; i < n.inputs.size(); ++i) {
    if (n.inputs[i] < 0 || n.inputs[i] >= id) {
      problem(fmt::format("input {} is %{}, which is not an earlier node", i, n.inputs[i]));
      inputs_ok = false;
    }
  }
  const OpInfo& info = op_info(n.op);
  int arity = static_cast<int>(n.inputs.size());
  if (arity < info.min_inputs || (info.max_inputs >= 0 && arity > info.max_inputs)) {
    if (info.min_inputs == info.max_inputs) {
      problem(fmt::format("takes {} inputs; got {}", info.min_inputs, arity));
    } else {
      problem(fmt::format("takes {} to {} inputs; got {}", info.min_inputs,
                          info.max_inputs < 0 ? "any" : std::to_string(info.max_inputs), arity));
    }
    return;
  }
  if (!inputs_ok || n.op == Op::parameter) return;
  std::vector<TensorType> types;
  for (NodeId in : n.inputs) types.push_back(g.node(in).type);
  try {
    TensorType t = infer_type(n.op, types, n.attrs);
    if (t != n.type) {
      problem(fmt::format("recorded {} but {} give {}", n.type.str(),
                          n.inputs.empty() ? "attributes" : "inputs", t.str()));
    }
  } catch (const Error& e) {
    problem(e.what());
  }
}

// params() lists exactly the parameter nodes, each at the position its index names.
void check_params(const Graph& g, std::vector<std::string>& out) {
  std::vector<int> listed(g.size(), 0);
  for (size_t k = 0; k < g.params().size(); ++k) {
    NodeId id = g.params()[k];
    if (!valid_id(g, id)) {
      out.push_back(fmt::format("params()[{}] is %{}, which does not exist", k, id));
      continue;
    }
    if (listed[id]++) out.push_back(where(g, id) + ": listed twice in params()");
    const Node& n = g.node(id);
    if (n.op != Op::parameter) {
      out.push_back(where(g, id) + fmt::format(": params()[{}] is not a parameter node", k));
      continue;
    }
    const AttrValue* idx = n.attrs.find("index");
    const int64_t* i = idx ? std::get_if<int64_t>(idx) : nullptr;
    if (!i) {
      out.push_back(where(g, id) + ": parameter has no integer index attribute");
    } else if (*i != static_cast<int64_t>(k)) {
      out.push_back(where(g, id) +
                    fmt::format(": index attribute is {} but it is params()[{}]", *i, k));
    }
  }
  for (size_t id = 0; id < g.size(); ++id) {
    if (g.nodes()[id].op == Op::parameter && !listed[id]) {
      out.push_back(where(g, static_cast<NodeId>(id)) + ": parameter node is not in params()");
    }
  }
}

}  // namespace

std::vector<std::string> verify_problems(const Graph& g) {
  std::vector<std::string> out;
  for (size_t id = 0; id < g.size(); ++id) check_node(g, static_cast<NodeId>(id), out);
  check_params(g, out);
  for (size_t k = 0; k < g.outputs().size(); ++k) {
    if (!valid_id(g, g.outputs()[k])) {
      out.push_back(fmt::format("output {} is %{}, which does not exist", k, g.outputs()[k]));
    }
  }
  return out;
}

void verify(const Graph& g) {
  std::vector<std::string> problems = verify_problems(g);
  if (!problems.empty()) throw Error("[verify] " + problems.front());
}

}  // namespace keel
