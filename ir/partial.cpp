#include "ir/partial.h"

#include "ir/collective.h"
#include "ir/scan.h"

namespace keel {
namespace {

class Walk {
 public:
  Walk(std::vector<PartialMisuse>* misuse, const std::vector<AxisSet>* varies)
      : misuse_(misuse), varies_(varies) {}

  std::vector<AxisSet> graph(const Graph& g, const std::vector<AxisSet>& params) {
    const Graph* outer = g_;
    g_ = &g;
    std::vector<AxisSet> p(g.size());
    for (size_t i = 0; i < g.params().size() && i < params.size(); ++i) {
      p[static_cast<size_t>(g.params()[i])] = params[i];
    }
    std::vector<AxisSet> scan_results;
    for (size_t i = 0; i < g.size(); ++i) {
      const Node& n = g.nodes()[i];
      if (n.op != Op::parameter) p[i] = node(n, p, scan_results);
    }
    g_ = outer;
    return p;
  }

 private:
  // Records the first misuse: `n` reads input k, which is partial.
  void refuse(const Node& n, NodeId input, const AxisSet& partial, const char* why) {
    if (!misuse_ || !misuse_->empty() || partial.empty()) return;
    misuse_->push_back({&n, &g_->node(input), *partial.begin(), why});
  }

  // Refuses `n` changing partial input `share` by input `by` when `by` differs across the
  // processes of an axis `share` is a partial sum over (known only with the varying sets).
  void refuse_varying(const Node& n, const std::vector<AxisSet>& p, size_t share, size_t by,
                      const char* why, const std::string& except = "") {
    if (!varies_ || share >= n.inputs.size() || by >= n.inputs.size()) return;
    const AxisSet& partial = p[static_cast<size_t>(n.inputs[share])];
    const AxisSet& varying = (*varies_)[static_cast<size_t>(n.inputs[by])];
    for (const std::string& axis : partial) {
      if (axis != except && varying.count(axis)) refuse(n, n.inputs[share], {axis}, why);
    }
  }

  // The operands' common set, or a misuse when they differ (a share added to a whole value);
  // their union either way, so a loop carry grows to what the body makes it.
  AxisSet same(const Node& n, const std::vector<AxisSet>& p, size_t first) {
    const AxisSet& want = p[static_cast<size_t>(n.inputs[first])];
    AxisSet all;
    for (size_t k = first; k < n.inputs.size(); ++k) {
      const AxisSet& got = p[static_cast<size_t>(n.inputs[k])];
      all.insert(got.begin(), got.end());
    }
    for (size_t k = first; k < n.inputs.size(); ++k) {
      const AxisSet& got = p[static_cast<size_t>(n.inputs[k])];
      if (got != want) {
        const bool got_more = got.size() >= want.size();
        refuse(n, got_more ? n.inputs[k] : n.inputs[first], got_more ? got : want,
               "adds it to a value that is not a partial sum over the same axes (the value would "
               "count once per process)");
      }
    }
    return all;
  }

  AxisSet node(const Node& n, const std::vector<AxisSet>& p, std::vector<AxisSet>& scan_results) {
    auto in = [&](size_t k) -> const AxisSet& { return p[static_cast<size_t>(n.inputs[k])]; };
    AxisSet any;
    for (NodeId x : n.inputs) {
      any.insert(p[static_cast<size_t>(x)].begin(), p[static_cast<size_t>(x)].end());
    }
    switch (n.op) {
      case Op::cast:  // float to float only: to an integer truncates, to bool tests != 0
        if (!is_float(n.attrs.dtype("dtype"))) {
          refuse(n, n.inputs[0], in(0), "casts it to a type that does not add up");
        }
        return in(0);
      case Op::all_gather:  // over its own axis: every process's share, not a sum
        if (in(0).count(n.attrs.s("axis"))) {
          refuse(n, n.inputs[0], in(0), "gathers the shares over the axis they are shares over");
        }
        return in(0);
      case Op::all_to_all:  // over its own axis it would mix the processes' shares of each block
        if (in(0).count(n.attrs.s("axis"))) {
          refuse(n, n.inputs[0], in(0), "exchanges the shares over the axis they are shares over");
        }
        return in(0);
      case Op::neg:
      case Op::stop_gradient:
      case Op::pvary:
      case Op::reshape:
      case Op::transpose:
      case Op::broadcast:
      case Op::slice:
      case Op::reduce_sum:
      case Op::reduce_mean:
      case Op::cumsum:
        return in(0);
      case Op::pad:
        if (n.attrs.f("value") != 0.0)
          refuse(n, n.inputs[0], in(0), "pads it with a nonzero value");
        return in(0);
      case Op::add:
      case Op::sub:
      case Op::concat:
        return same(n, p, 0);
      case Op::select:
        refuse(n, n.inputs[0], in(0), "selects by it");
        for (size_t k : {1, 2}) refuse_varying(n, p, k, 0, kSelectsByVarying);
        return same(n, p, 1);
      case Op::mul:
      case Op::dot_general: {
        if (!in(0).empty() && !in(1).empty()) {
          refuse(n, n.inputs[1], in(1), "multiplies it by another partial sum");
        }
        {  // a row-parallel product's operands vary over its own axis by design
          const std::string own = n.attrs.has("partial") ? n.attrs.s("partial") : "";
          refuse_varying(n, p, 0, 1, kScalesByVarying, own);
          refuse_varying(n, p, 1, 0, kScalesByVarying, own);
        }
        if (n.op == Op::dot_general && n.attrs.has("partial")) {
          const std::string& axis = n.attrs.s("partial");
          for (size_t k = 0; k < 2; ++k) {  // a share of a share is not one sum
            if (in(k).count(axis)) refuse(n, n.inputs[k], in(k), "splits it over its axis again");
          }
          any.insert(axis);
        }
        return any;
      }
      case Op::div:
        refuse(n, n.inputs[1], in(1), "divides by it");
        refuse_varying(n, p, 0, 1, kScalesByVarying);
        return in(0);
      case Op::gather:
        refuse(n, n.inputs[1], in(1), "indexes with it");
        refuse_varying(n, p, 0, 1, kIndexesByVarying);
        return in(0);
      case Op::scatter_add:
        refuse(n, n.inputs[1], in(1), "indexes with it");
        refuse_varying(n, p, 0, 1, kIndexesByVarying);
        refuse_varying(n, p, 2, 1, kIndexesByVarying);
        if (in(0) != in(2)) {
          refuse(n, in(0).empty() ? n.inputs[2] : n.inputs[0], in(0).empty() ? in(2) : in(0),
                 "adds it to a value that is not a partial sum over the same axes (the value "
                 "would count once per process)");
        }
        return any;
      case Op::all_reduce: {
        AxisSet out = in(0);
        if (parse_reduce_kind(n.attrs.s("reduce")) != ReduceKind::sum) {
          refuse(n, n.inputs[0], in(0), "takes the max or min over processes of shares of sums");
        }
        out.erase(n.attrs.s("axis"));
        return out;
      }
      case Op::reduce_scatter: {
        AxisSet out = in(0);
        out.erase(n.attrs.s("axis"));
        return out;
      }
      case Op::scan:
        return scan(n, p, scan_results);
      case Op::scan_result:
        return scan_results[static_cast<size_t>(n.attrs.i("index"))];
      default:
        for (size_t k = 0; k < n.inputs.size(); ++k) {
          refuse(n, n.inputs[k], in(k),
                 "is not linear: it needs the whole sum, not this process's share");
        }
        return {};
    }
  }

  // A carry is partial over what it starts with and what the body adds: grown to a fixed point
  // (misuses are those of the last walk, over the carries' final sets). A carry the body makes
  // partial must start as a share too, or as zeros.
  AxisSet scan(const Node& n, const std::vector<AxisSet>& p, std::vector<AxisSet>& scan_results) {
    const ScanInfo s = scan_info(n.attrs, n.inputs.size());
    // The body's varying sets, from its inputs' here, carries grown to their fixed point.
    const std::vector<AxisSet>* const outer_varies = varies_;
    std::vector<AxisSet> body_varies;
    if (outer_varies) {
      std::vector<AxisSet> vparams;
      for (NodeId in : n.inputs) vparams.push_back((*outer_varies)[static_cast<size_t>(in)]);
      carry_fixed_point(*s.body, s.carries, vparams,
                        [&](const auto& in) { return varying_axes(*s.body, in); });
      body_varies = varying_axes(*s.body, vparams);
      varies_ = &body_varies;
    }
    std::vector<AxisSet> params;
    for (NodeId in : n.inputs) params.push_back(p[static_cast<size_t>(in)]);
    std::vector<PartialMisuse>* const record = misuse_;
    misuse_ = nullptr;
    std::vector<AxisSet> results = carry_fixed_point(
        *s.body, s.carries, params, [&](const auto& in) { return graph(*s.body, in); });
    misuse_ = record;
    graph(*s.body, params);
    for (int64_t c = 0; c < s.carries; ++c) {
      const auto k = static_cast<size_t>(c);
      if (params[k] != p[static_cast<size_t>(n.inputs[k])] && !zeros(n.inputs[k])) {
        refuse(n, n.inputs[k], params[k],
               "starts a loop carry the body makes a partial sum from a whole value that is "
               "not zeros (it would count once per process)");
      }
    }
    scan_results = std::move(results);
    varies_ = outer_varies;
    return {};
  }

  // Whether `id` of the graph being walked is zeros: a zero constant, reshaped or broadcast.
  bool zeros(NodeId id) const {
    const Node& n = g_->node(id);
    if (n.op == Op::broadcast || n.op == Op::reshape || n.op == Op::cast) return zeros(n.inputs[0]);
    if (n.op != Op::constant) return false;
    const Array& a = n.attrs.array("value");
    for (int64_t i = 0; i < a.numel(); ++i) {
      if (a.get_f64(i) != 0.0) return false;
    }
    return true;
  }

  static constexpr const char* kScalesByVarying =
      "scales it by a value that differs across the processes of its axis (each share would "
      "be scaled differently)";
  static constexpr const char* kSelectsByVarying =
      "selects it by a condition that differs across the processes of its axis (some shares "
      "would be dropped)";
  static constexpr const char* kIndexesByVarying =
      "indexes it with indices that differ across the processes of its axis (the shares would "
      "be of different elements)";

  std::vector<PartialMisuse>* misuse_;
  const std::vector<AxisSet>* varies_;  // of the graph being walked; null: not checked
  const Graph* g_ = nullptr;            // whose nodes are being walked
};

}  // namespace

std::vector<AxisSet> partial_axes(const Graph& g, std::vector<PartialMisuse>* misuse,
                                  const std::vector<AxisSet>* param_varies) {
  std::vector<AxisSet> varies;
  if (param_varies) varies = varying_axes(g, *param_varies);
  return Walk(misuse, param_varies ? &varies : nullptr).graph(g, {});
}

NodeId partial_origin(const Graph& g, const std::vector<AxisSet>& partial, NodeId id,
                      const std::string& axis) {
  for (;;) {
    const Node& n = g.node(id);
    if (n.op == Op::dot_general && n.attrs.has("partial") && n.attrs.s("partial") == axis) {
      return id;
    }
    NodeId next = -1;
    for (NodeId in : n.inputs) {
      if (partial[static_cast<size_t>(in)].count(axis)) {
        next = in;
        break;
      }
    }
    if (next < 0) return -1;
    id = next;
  }
}

}  // namespace keel
