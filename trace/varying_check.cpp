#include "trace/varying_check.h"

#include <fmt/format.h>

#include "ir/error.h"
#include "ir/partial.h"
#include "trace/compile.h"

namespace keel::detail {
namespace {

// Recursive descent over the structure grammar of trace/tree.h.
class PathParser {
 public:
  explicit PathParser(const std::string& s) : s_(s) {}
  std::vector<std::string> parse() {
    while (i_ < s_.size()) item("");
    return out_;
  }

 private:
  void item(const std::string& path) {
    const char c = s_[i_++];
    if (c == 'T' || c == 'S') {
      out_.push_back(path.empty() ? "." : path);
    } else if (c == '[' || c == '<') {
      const char close = c == '[' ? ']' : '>';
      while (i_ < s_.size() && s_[i_] != ':') ++i_;
      ++i_;
      for (int k = 0; i_ < s_.size() && s_[i_] != close; ++k) item(fmt::format("{}[{}]", path, k));
      ++i_;
    } else if (c == '{') {
      while (i_ < s_.size() && s_[i_] != '}') {
        const size_t eq = s_.find('=', i_);
        const std::string key = s_.substr(i_, eq - i_);
        i_ = eq + 1;
        item(path.empty() ? key : path + "." + key);
        if (i_ < s_.size() && s_[i_] == ',') ++i_;
      }
      ++i_;
    } else if (c == '(') {
      for (int k = 0; i_ < s_.size() && s_[i_] != ')'; ++k) item(fmt::format("{}<{}>", path, k));
      ++i_;
    }
  }
  const std::string& s_;
  size_t i_ = 0;
  std::vector<std::string> out_;
};

AxisSet as_set(const std::map<int, std::vector<std::string>>& m, size_t index) {
  auto it = m.find(static_cast<int>(index));
  return it == m.end() ? AxisSet{} : AxisSet(it->second.begin(), it->second.end());
}

}  // namespace

std::vector<std::string> leaf_paths(const std::string& structure) {
  return PathParser(structure).parse();
}

namespace {

// The axes leaf `leaf` of part `index` (an argument or a result) is declared to vary over: its
// part's, and its own (CompileOptions::varying_argument_leaves and varying_result_leaves).
AxisSet declared_axes(const std::map<int, std::vector<std::string>>& parts,
                      const std::map<int, std::map<std::string, std::vector<std::string>>>& leaves,
                      size_t index, const std::string& leaf) {
  AxisSet out = as_set(parts, index);
  auto own = leaves.find(static_cast<int>(index));
  if (own == leaves.end()) return out;
  auto it = own->second.find(leaf);
  if (it != own->second.end()) out.insert(it->second.begin(), it->second.end());
  return out;
}

// What each parameter of `g` varies over: its argument's and its own declared axes.
std::vector<AxisSet> parameter_axes(const Graph& g, const std::vector<LeafRange>& arguments,
                                    const CompileOptions& o) {
  std::vector<AxisSet> params(g.params().size());
  for (size_t a = 0; a < arguments.size(); ++a) {
    const std::vector<std::string> paths = leaf_paths(arguments[a].structure);
    for (size_t k = arguments[a].begin; k < arguments[a].end && k < params.size(); ++k) {
      const size_t leaf = k - arguments[a].begin;
      params[k] = declared_axes(o.varying_arguments, o.varying_argument_leaves, a,
                                leaf < paths.size() ? paths[leaf] : std::string());
    }
  }
  return params;
}

}  // namespace

std::vector<AxisSet> check_varying(const Graph& g, const std::string& function,
                                   const std::vector<LeafRange>& arguments,
                                   const std::vector<LeafRange>& results, const CompileOptions& o) {
  const std::vector<AxisSet> params = parameter_axes(g, arguments, o);
  std::vector<const Node*> counted_twice;
  const std::vector<AxisSet> varies = varying_axes(g, params, &counted_twice);
  // A sum over processes of a value they all hold is N times it: its gradient (ir/collective.h)
  // would be wrong, and it is rarely what was meant.
  if (!counted_twice.empty()) {
    const Node& n = *counted_twice.front();
    if (n.op == Op::pvary && n.attrs.has("gradient_of")) {
      throw Error(fmt::format(
          "[compile] '{}': the gradient of the all_reduce over mesh axis '{}' at {} varies over "
          "it: the sum, the same on every process, meets values that vary over '{}' with no "
          "pvary between, so the gradient would miss the other processes' uses of it; pvary "
          "the sum where it meets them",
          function, n.attrs.s("axis"), n.loc.str(), n.attrs.s("axis")));
    }
    if (n.op == Op::pvary) {
      throw Error(fmt::format(
          "[compile] '{}': pvary over mesh axis '{}' at {} of a value that already varies over "
          "it: its gradient, the sum of the processes' cotangents, would add up different "
          "values' uses; pvary only a value every process of '{}' holds the same",
          function, n.attrs.s("axis"), n.loc.str(), n.attrs.s("axis")));
    }
    throw Error(fmt::format(
        "[compile] '{}': {} over mesh axis '{}' at {} of a value that is the same on every "
        "process, so each copy would count once per process; reduce a value that varies over "
        "'{}' (computed from the batch), or multiply by the axis size",
        function, op_name(n.op), n.attrs.s("axis"), n.loc.str(), n.attrs.s("axis")));
  }
  std::vector<AxisSet> out(g.outputs().size());
  for (size_t r = 0; r < results.size(); ++r) {
    const std::vector<std::string> paths = leaf_paths(results[r].structure);
    for (size_t k = results[r].begin; k < results[r].end; ++k) {
      const NodeId id = g.outputs()[k];
      const size_t leaf = k - results[r].begin;
      const AxisSet allowed = declared_axes(o.varying_results, o.varying_result_leaves, r,
                                            leaf < paths.size() ? paths[leaf] : std::string());
      out[k] = varies[static_cast<size_t>(id)];
      for (const std::string& axis : out[k]) {
        if (allowed.count(axis)) continue;
        const NodeId origin = variance_origin(g, varies, id, axis);
        const std::string from =
            origin < 0 ? std::string()
            : g.node(origin).op == Op::parameter
                ? fmt::format(" (it depends on an argument that varies over '{}')", axis)
                : fmt::format(" (from {} at {})", op_name(g.node(origin).op),
                              g.node(origin).loc.str());
        const int32_t alias = g.output_alias(k);
        throw Error(fmt::format(
            "[compile] '{}' result {} leaf '{}' varies over mesh axis '{}' but is returned as "
            "the same on every process{}: computed at {}{}; missing all_reduce over {} (or "
            "declare the result per-process in CompileOptions::varying_results)",
            function, r, leaf < paths.size() ? paths[leaf] : std::to_string(leaf), axis,
            alias >= 0 ? fmt::format(", updating replicated argument leaf {}", alias) : "",
            g.node(id).loc.str(), from, axis));
      }
    }
  }
  return out;
}

void check_partial(const Graph& g, const std::string& function,
                   const std::vector<LeafRange>& arguments, const CompileOptions& o) {
  std::vector<PartialMisuse> misuse;
  const std::vector<AxisSet> params = parameter_axes(g, arguments, o);
  const std::vector<AxisSet> partial = partial_axes(g, &misuse, &params);
  auto made = [&](NodeId id, const std::string& axis) {
    const NodeId origin = partial_origin(g, partial, id, axis);
    return origin < 0 ? std::string()
                      : fmt::format(" (the product at {})", g.node(origin).loc.str());
  };
  if (!misuse.empty()) {
    const PartialMisuse& m = misuse.front();
    throw Error(fmt::format(
        "[compile] '{}': {} at {} {}, but its input {} at {} is this process's share of a sum "
        "over mesh axis '{}' (matmul_partial); all_reduce it over '{}' first",
        function, op_name(m.node->op), m.node->loc.str(), m.why, op_name(m.input->op),
        m.input->loc.str(), m.axis, m.axis));
  }
  for (size_t k = 0; k < g.outputs().size(); ++k) {
    const NodeId id = g.outputs()[k];
    const AxisSet& axes = partial[static_cast<size_t>(id)];
    if (axes.empty()) continue;
    const std::string& axis = *axes.begin();
    throw Error(fmt::format(
        "[compile] '{}' result leaf {} ({} at {}) is this process's share of a sum over mesh "
        "axis '{}'{}, returned before its all_reduce over '{}'",
        function, k, op_name(g.node(id).op), g.node(id).loc.str(), axis, made(id, axis), axis));
  }
}

}  // namespace keel::detail
