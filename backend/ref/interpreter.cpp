#include "backend/ref/interpreter.h"

#include <fmt/format.h>

#include <cstring>

#include "backend/collectives.h"
#include "backend/ref/kernels.h"
#include "ir/error.h"
#include "ir/scan.h"

namespace keel::ref {

void fail(const Node& node, const std::string& msg) {
  throw Error(fmt::format("[ref] {} at {}: {}", op_name(node.op), node.loc.str(), msg));
}

namespace {

// Re-derives the node's type from the actual inputs, so kernels never index out of bounds even
// on a graph that skipped the verifier.
void check_node(const Node& node, std::span<const Array> in) {
  std::vector<TensorType> types;
  for (const Array& a : in) types.push_back({a.dtype(), a.shape()});
  TensorType want;
  try {
    want = infer_type(node.op, types, node.attrs);
  } catch (const Error& e) {
    fail(node, e.what());
  }
  if (want != node.type) {
    fail(node, fmt::format("its inputs give {} but the node is typed {}; run the verifier",
                           want.str(), node.type.str()));
  }
}

// Runs the body once per iteration on the current carries, the i-th slices of the xs and the
// consts; returns the final carries then the stacked ys.
std::vector<Array> eval_scan(const Node& node, std::span<const Array> in) {
  const ScanInfo s = scan_info(node.attrs, in.size());
  std::vector<TensorType> types;
  for (const Array& a : in) types.push_back({a.dtype(), a.shape()});
  try {
    infer_scan(types, node.attrs);
  } catch (const Error& e) {
    fail(node, e.what());
  }
  const std::vector<TensorType> rtypes = scan_result_types(node.attrs, in.size());
  std::vector<Array> results;
  for (int64_t k = 0; k < s.results(); ++k) {
    results.push_back(k < s.carries ? in[k].clone()
                                    : Array::uninitialized(rtypes[k].dtype, rtypes[k].shape));
  }
  std::vector<Array> args(in.begin(), in.end());
  for (int64_t it = 0; it < s.length; ++it) {
    const int64_t i = s.reverse ? s.length - 1 - it : it;
    for (int64_t c = 0; c < s.carries; ++c) args[c] = results[c];
    for (int64_t j = s.carries; j < s.carries + s.xs; ++j) {
      const TensorType& t = s.body->node(s.body->params()[j]).type;
      Array slice = Array::uninitialized(t.dtype, t.shape);
      std::memcpy(slice.data(), in[j].data() + i * slice.nbytes(), slice.nbytes());
      args[j] = std::move(slice);
    }
    std::vector<Array> out = interpret(*s.body, args);
    for (int64_t c = 0; c < s.carries; ++c) results[c] = std::move(out[c]);
    for (int64_t k = s.carries; k < s.results(); ++k) {
      const size_t bytes = out[k].nbytes();
      std::memcpy(results[k].data() + i * static_cast<int64_t>(bytes), out[k].data(), bytes);
    }
  }
  return results;
}

}  // namespace

Array eval_node(const Node& node, std::span<const Array> in) {
  if (static_cast<size_t>(node.op) >= all_ops().size()) {
    throw Error(fmt::format("[ref] op #{} is unknown", static_cast<int>(node.op)));
  }
  if (node.op == Op::parameter) {
    fail(node, "parameters have no rule; interpret() binds them to the program inputs");
  }
  check_node(node, in);
  // No default: -Wswitch flags any op added to ops.def but not handled here.
  switch (node.op) {
    case Op::parameter:
      break;
    case Op::constant:
    case Op::iota:
      return eval_leaf(node);
    case Op::rng_uniform:
      return eval_rng(node, in);
    case Op::neg:
    case Op::abs:
    case Op::exp:
    case Op::log:
    case Op::tanh:
    case Op::sqrt:
    case Op::rsqrt:
    case Op::sigmoid:
    case Op::erf:
    case Op::sin:
    case Op::cos:
    case Op::stop_gradient:
    case Op::pvary:
      return eval_unary(node, in[0]);
    case Op::add:
    case Op::sub:
    case Op::mul:
    case Op::div:
    case Op::max:
    case Op::min:
    case Op::pow:
      return eval_binary(node, in[0], in[1]);
    case Op::compare:
      return eval_compare(node, in[0], in[1]);
    case Op::select:
      return eval_select(node, in[0], in[1], in[2]);
    case Op::cast:
      return eval_cast(node, in[0]);
    case Op::reshape:
    case Op::transpose:
    case Op::broadcast:
    case Op::slice:
    case Op::concat:
    case Op::pad:
      return eval_layout(node, in);
    case Op::gather:
    case Op::scatter_add:
    case Op::one_hot:
      return eval_index(node, in);
    case Op::reduce_sum:
    case Op::reduce_max:
    case Op::reduce_mean:
    case Op::argmax:
      return eval_reduce(node, in[0]);
    case Op::cumsum:
      return eval_cumsum(node, in[0]);
    case Op::top_k_values:
    case Op::top_k_indices:
      return eval_top_k(node, in[0]);
    case Op::dot_general:
      return eval_dot(node, in[0], in[1]);
    case Op::attention:
    case Op::attention_lse:
    case Op::attention_dq:
    case Op::attention_dk:
    case Op::attention_dv:
      return eval_attention(node, in);
    case Op::sparse_attention:
    case Op::sparse_attention_dq:
    case Op::sparse_attention_dk:
    case Op::sparse_attention_dv:
    case Op::sparse_attention_weights:
      return eval_sparse_attention(node, in);
    case Op::all_reduce:
    case Op::all_gather:
    case Op::reduce_scatter:
    case Op::all_to_all:
    case Op::axis_index: {
      // The same runtime the CPU backend calls: a collective's result is the mesh's.
      Array out(node.type.dtype, node.type.shape);
      backend::run_collective(node.op, node.attrs,
                              in.empty() ? node.type : TensorType{in[0].dtype(), in[0].shape()},
                              in.empty() ? nullptr : in[0].data(), out.data());
      return out;
    }
    case Op::scan:
    case Op::scan_result:
      fail(node, "runs in interpret(): a scan's results are the values of its scan_result nodes");
  }
  fail(node, "has no reference implementation");
}

std::vector<Array> interpret(const Graph& g, std::span<const Array> inputs) {
  const std::vector<NodeId>& params = g.params();
  if (inputs.size() != params.size()) {
    throw Error(
        fmt::format("[ref] graph '{}' takes {} inputs but {} were given; pass one array "
                    "per parameter",
                    g.name(), params.size(), inputs.size()));
  }
  std::vector<Array> values(g.size());
  std::vector<bool> ready(g.size(), false);
  for (size_t i = 0; i < params.size(); ++i) {
    NodeId id = params[i];
    if (id < 0 || static_cast<size_t>(id) >= g.size() || g.node(id).op != Op::parameter) {
      throw Error(
          fmt::format("[ref] parameter {} refers to %{}, which is not a parameter node", i, id));
    }
    const TensorType& want = g.node(id).type;
    TensorType got{inputs[i].dtype(), inputs[i].shape()};
    if (got != want) {
      throw Error(
          fmt::format("[ref] input {} is {} but parameter {} expects {}; pass arrays "
                      "matching the graph's parameter types",
                      i, got.str(), i, want.str()));
    }
    values[id] = inputs[i];
    ready[id] = true;
  }
  std::vector<Array> args;
  for (size_t id = 0; id < g.size(); ++id) {
    const Node& node = g.nodes()[id];
    if (node.op == Op::parameter) {
      if (!ready[id]) fail(node, fmt::format("%{} is not listed in the graph's parameters", id));
      continue;
    }
    args.clear();
    for (NodeId in : node.inputs) {
      // SSA order: an input must be a node that already ran.
      if (in < 0 || static_cast<size_t>(in) >= id) {
        fail(node, fmt::format("%{} uses %{}, which is not defined before it", id, in));
      }
      args.push_back(values[in]);
    }
    if (node.op == Op::scan) {
      std::vector<Array> results = eval_scan(node, args);
      // The verifier guarantees the results follow in order; check before writing them.
      for (size_t k = 0; k < results.size(); ++k) {
        const size_t r = id + 1 + k;
        if (r >= g.size() || g.nodes()[r].op != Op::scan_result ||
            g.nodes()[r].inputs != std::vector<NodeId>{static_cast<NodeId>(id)} ||
            g.nodes()[r].type != TensorType{results[k].dtype(), results[k].shape()}) {
          fail(node, fmt::format("result {} is not read by scan_result node %{}; run the verifier",
                                 k, r));
        }
        values[r] = std::move(results[k]);
        ready[r] = true;
      }
      values[id] = Array(DType::boolean, {0});
      continue;
    }
    if (node.op == Op::scan_result) {
      if (!ready[id]) fail(node, fmt::format("%{} does not follow its scan", id));
      continue;
    }
    values[id] = eval_node(node, args);
  }
  std::vector<Array> out;
  for (NodeId o : g.outputs()) {
    if (o < 0 || static_cast<size_t>(o) >= g.size()) {
      throw Error(fmt::format("[ref] output %{} does not exist in graph '{}'", o, g.name()));
    }
    out.push_back(values[o]);
  }
  return out;
}

}  // namespace keel::ref
