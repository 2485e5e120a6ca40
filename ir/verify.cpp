// Structural checks on a whole graph; every message names the node, its op and its location.
#include "ir/verify.h"

#include <fmt/format.h>

#include "ir/error.h"
#include "ir/scan.h"

namespace keel {
namespace {

std::string where(const Graph& g, NodeId id) {
  const Node& n = g.node(id);
  return fmt::format("node %{} ({}) at {}", id, op_name(n.op), n.loc.str());
}

bool valid_id(const Graph& g, NodeId id) {
  return id >= 0 && static_cast<size_t>(id) < g.size();
}

// Donation: an output goes into a parameter of its own type, and no two outputs into one.
void check_aliases(const Graph& g, std::vector<std::string>& out) {
  if (g.output_aliases().size() != g.outputs().size()) {
    out.push_back(fmt::format("{} output aliases for {} outputs", g.output_aliases().size(),
                              g.outputs().size()));
    return;
  }
  std::vector<int> taken(g.params().size(), -1);
  for (size_t k = 0; k < g.outputs().size(); ++k) {
    const int32_t a = g.output_alias(k);
    if (a < 0) continue;
    if (static_cast<size_t>(a) >= g.params().size()) {
      out.push_back(fmt::format("output {} is written into parameter {}, but there are {}", k, a,
                                g.params().size()));
      continue;
    }
    const NodeId p = g.params()[static_cast<size_t>(a)], o = g.outputs()[k];
    if (valid_id(g, p) && valid_id(g, o) && g.node(p).type != g.node(o).type) {
      out.push_back(fmt::format("output {} ({}) is written into parameter {} of another type {}", k,
                                g.node(o).type.str(), a, g.node(p).type.str()));
    }
    if (taken[static_cast<size_t>(a)] >= 0) {
      out.push_back(fmt::format("outputs {} and {} are both written into parameter {}",
                                taken[static_cast<size_t>(a)], k, a));
    }
    taken[static_cast<size_t>(a)] = static_cast<int>(k);
  }
}

// A scan's body verifies on its own, and exactly its R scan_result nodes follow it, in order;
// a scan is read by nothing else. Its body donates nothing: its buffers belong to the loop.
void check_scan(const Graph& g, NodeId id, std::vector<std::string>& out) {
  const Node& n = g.node(id);
  const Graph& body = n.attrs.graph("body");
  for (const std::string& p : verify_problems(body)) {
    out.push_back(where(g, id) + ": in its body: " + p);
  }
  for (size_t k = 0; k < body.output_aliases().size(); ++k) {
    if (body.output_alias(k) >= 0) {
      out.push_back(where(g, id) + fmt::format(": its body writes output {} into a parameter; "
                                               "a scan body cannot donate",
                                               k));
    }
  }
  const int64_t results = scan_info(n.attrs, n.inputs.size()).results();
  for (int64_t k = 0; k < results; ++k) {
    const size_t r = static_cast<size_t>(id) + 1 + static_cast<size_t>(k);
    const Node* rn = r < g.size() ? &g.nodes()[r] : nullptr;
    const AttrValue* idx = rn ? rn->attrs.find("index") : nullptr;
    const int64_t* i = idx ? std::get_if<int64_t>(idx) : nullptr;
    if (!rn || rn->op != Op::scan_result || rn->inputs != std::vector<NodeId>{id} || !i ||
        *i != k) {
      out.push_back(where(g, id) +
                    fmt::format(": must be followed by scan_result(%{}) {{index={}}} as node %{} "
                                "(a scan's {} results follow it in order)",
                                id, k, r, results));
      return;
    }
  }
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
  try {
    TensorType t = infer_node_type(g, n.op, n.inputs, n.attrs);
    if (t != n.type) {
      problem(fmt::format("recorded {} but {} give {}", n.type.str(),
                          n.inputs.empty() ? "attributes" : "inputs", t.str()));
    }
  } catch (const Error& e) {
    problem(e.what());
    return;
  }
  if (n.op == Op::scan) check_scan(g, id, out);
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
  for (size_t id = 0; id < g.size(); ++id) {
    const Node& n = g.nodes()[id];
    if (n.op == Op::scan_result) continue;
    for (NodeId in : n.inputs) {
      if (valid_id(g, in) && g.node(in).op == Op::scan) {
        out.push_back(where(g, static_cast<NodeId>(id)) +
                      fmt::format(": reads scan %{} directly; read its results through "
                                  "scan_result",
                                  in));
      }
    }
  }
  for (NodeId o : g.outputs()) {
    if (valid_id(g, o) && g.node(o).op == Op::scan) {
      out.push_back(where(g, o) + ": a scan token cannot be a graph output; use its scan_result");
    }
  }
  check_params(g, out);
  for (size_t k = 0; k < g.outputs().size(); ++k) {
    if (!valid_id(g, g.outputs()[k])) {
      out.push_back(fmt::format("output {} is %{}, which does not exist", k, g.outputs()[k]));
    }
  }
  check_aliases(g, out);
  return out;
}

void verify(const Graph& g) {
  std::vector<std::string> problems = verify_problems(g);
  if (!problems.empty()) throw Error("[verify] " + problems.front());
}

}  // namespace keel
