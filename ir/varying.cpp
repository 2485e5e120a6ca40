#include "ir/varying.h"

#include "ir/collective.h"
#include "ir/scan.h"

namespace keel {
namespace {

AxisSet node_axes(const Node& n, const std::vector<AxisSet>& v, std::vector<AxisSet>* scan_results,
                  std::vector<const Node*>* counted_twice) {
  AxisSet out;
  for (NodeId in : n.inputs) {
    out.insert(v[static_cast<size_t>(in)].begin(), v[static_cast<size_t>(in)].end());
  }
  switch (n.op) {
    case Op::all_reduce:
    case Op::all_gather: {
      const bool sums = n.op == Op::all_gather || n.attrs.s("reduce") == "sum";
      if (sums && counted_twice && !out.count(n.attrs.s("axis"))) counted_twice->push_back(&n);
      if (n.op == Op::all_gather && !gathers_invariant(n)) {
        out.insert(n.attrs.s("axis"));
      } else {
        out.erase(n.attrs.s("axis"));
      }
      break;
    }
    case Op::pvary:  // of a value that already varies, its gradient would add different values
      if (counted_twice && out.count(n.attrs.s("axis"))) counted_twice->push_back(&n);
      out.insert(n.attrs.s("axis"));
      break;
    case Op::all_to_all:
    case Op::reduce_scatter:
    case Op::axis_index:
      out.insert(n.attrs.s("axis"));
      break;
    case Op::scan: {
      const ScanInfo s = scan_info(n.attrs, n.inputs.size());
      std::vector<AxisSet> params;
      for (NodeId in : n.inputs) params.push_back(v[static_cast<size_t>(in)]);
      // A carry varies over what it starts with and what the body adds; what is counted twice
      // is the last walk's, over the carries' final sets.
      *scan_results = carry_fixed_point(*s.body, s.carries, params, [&](const auto& in) {
        return varying_axes(*s.body, in, nullptr);
      });
      if (counted_twice) varying_axes(*s.body, params, counted_twice);
      return {};
    }
    case Op::scan_result:
      return (*scan_results)[static_cast<size_t>(n.attrs.i("index"))];
    default:
      break;
  }
  return out;
}

}  // namespace

std::vector<AxisSet> varying_axes(const Graph& g, const std::vector<AxisSet>& params,
                                  std::vector<const Node*>* counted_twice) {
  std::vector<AxisSet> v(g.nodes().size());
  for (size_t i = 0; i < g.params().size() && i < params.size(); ++i) {
    v[static_cast<size_t>(g.params()[i])] = params[i];
  }
  std::vector<AxisSet> scan_results;
  for (size_t i = 0; i < g.nodes().size(); ++i) {
    const Node& n = g.nodes()[i];
    if (n.op == Op::parameter) continue;
    v[i] = node_axes(n, v, &scan_results, counted_twice);
  }
  return v;
}

std::vector<AxisSet> carry_fixed_point(
    const Graph& body, int64_t carries, std::vector<AxisSet>& params,
    const std::function<std::vector<AxisSet>(const std::vector<AxisSet>&)>& walk) {
  std::vector<AxisSet> results;
  for (bool changed = true; changed;) {
    const std::vector<AxisSet> sets = walk(params);
    results.clear();
    for (NodeId o : body.outputs()) results.push_back(sets[static_cast<size_t>(o)]);
    changed = false;
    for (int64_t c = 0; c < carries; ++c) {
      for (const std::string& a : results[static_cast<size_t>(c)]) {
        changed |= params[static_cast<size_t>(c)].insert(a).second;
      }
    }
  }
  for (int64_t c = 0; c < carries; ++c) {
    results[static_cast<size_t>(c)] = params[static_cast<size_t>(c)];
  }
  return results;
}

NodeId variance_origin(const Graph& g, const std::vector<AxisSet>& varies, NodeId id,
                       const std::string& axis) {
  // Walk back through inputs that vary over `axis` until none of them does.
  for (;;) {
    const Node& n = g.node(id);
    NodeId next = -1;
    for (NodeId in : n.inputs) {
      if (varies[static_cast<size_t>(in)].count(axis)) {
        next = in;
        break;
      }
    }
    if (next < 0) return varies[static_cast<size_t>(id)].count(axis) ? id : -1;
    id = next;
  }
}

}  // namespace keel
