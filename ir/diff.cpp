// Explains why two graphs hash differently, in the terms a user changed: an input's shape,
// a constant, an attribute, an added or removed op.
#include "ir/diff.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>

#include "ir/hash.h"
#include "ir/text.h"

namespace keel {
namespace {

constexpr size_t kLookahead = 4;  // how far to search for the node an insertion displaced

bool same_node(const Node& a, const Node& b) {
  return a.op == b.op && a.inputs == b.inputs && a.type == b.type && a.attrs == b.attrs;
}

std::string refs(const std::vector<NodeId>& v) {
  std::string s;
  for (NodeId i : v) s += fmt::format("{}%{}", s.empty() ? "" : ", ", i);
  return "(" + s + ")";
}

// The program input number of a parameter node.
int64_t input_number(const Graph& g, NodeId id) {
  auto it = std::find(g.params().begin(), g.params().end(), id);
  if (it != g.params().end()) return it - g.params().begin();
  const AttrValue* idx = g.node(id).attrs.find("index");
  return idx && std::holds_alternative<int64_t>(*idx) ? std::get<int64_t>(*idx) : -1;
}

// "input 3", or "input 3 (argument 1 leaf 'tokens')" where the caller named the inputs.
std::string input_label(const Graph& g, NodeId id, const std::vector<std::string>& names) {
  const int64_t k = input_number(g, id);
  if (k < 0 || static_cast<size_t>(k) >= names.size() || names[size_t(k)].empty()) {
    return fmt::format("input {}", k);
  }
  return fmt::format("input {} ({})", k, names[size_t(k)]);
}

std::string short_array(const Array& a) {
  if (a.numel() <= 4) return attr_value_str(a);
  return fmt::format("{}{}{{...}}", dtype_name(a.dtype()), shape_str(a.shape()));
}

std::string short_value(const AttrValue& v) {
  if (const GraphRef* g = std::get_if<GraphRef>(&v)) {
    return *g ? fmt::format("graph of {} nodes", (*g)->size()) : "an empty graph";
  }
  const Array* a = std::get_if<Array>(&v);
  return a ? short_array(*a) : attr_value_str(v);
}

std::string value_change(const Array& a, const Array& b) {
  if (a.dtype() != b.dtype() || a.shape() != b.shape()) {
    return short_array(a) + " -> " + short_array(b);
  }
  if (a.numel() == 1) return array_element_str(a, 0) + " -> " + array_element_str(b, 0);
  size_t width = dtype_size(a.dtype());
  int64_t differ = 0;
  for (int64_t i = 0; i < a.numel(); ++i) {
    differ += std::memcmp(a.data() + i * width, b.data() + i * width, width) != 0;
  }
  return fmt::format("{}{}{{...}} ({} of {} elements differ)", dtype_name(a.dtype()),
                     shape_str(a.shape()), differ, a.numel());
}

// The first attribute key (in sorted order) whose value differs.
std::string attr_change(const Attrs& a, const Attrs& b) {
  const auto &x = a.items(), &y = b.items();
  size_t i = 0, j = 0;
  while (i < x.size() || j < y.size()) {
    if (j == y.size() || (i < x.size() && x[i].first < y[j].first)) {
      return fmt::format("attribute {} removed (was {})", x[i].first, short_value(x[i].second));
    }
    if (i == x.size() || y[j].first < x[i].first) {
      return fmt::format("attribute {} added: {}", y[j].first, short_value(y[j].second));
    }
    if (!attr_equal(x[i].second, y[j].second)) {
      // A changed subgraph (a scan's body) is explained in its own terms.
      const GraphRef* gx = std::get_if<GraphRef>(&x[i].second);
      const GraphRef* gy = std::get_if<GraphRef>(&y[j].second);
      if (gx && gy && *gx && *gy) {
        return fmt::format("in its {}: {}", x[i].first, explain_difference(**gx, **gy));
      }
      return fmt::format("attribute {} {} -> {}", x[i].first, short_value(x[i].second),
                         short_value(y[j].second));
    }
    ++i, ++j;
  }
  return "attributes differ";
}

std::string added_or_removed(const Graph& g, NodeId id, bool added,
                             const std::vector<std::string>& names) {
  const Node& n = g.node(id);
  const char* what = added ? "added" : "removed";
  if (n.op == Op::parameter) {
    return fmt::format("{} {} at {}: {}", input_label(g, id, names), what, n.loc.str(),
                       n.type.str());
  }
  return fmt::format("op {} at {}: {}", what, n.loc.str(), op_name(n.op));
}

// Nodes at the same position that differ in place.
std::string modified(const Graph& before, const Graph& after, NodeId id,
                     const std::vector<std::string>& names) {
  const Node &a = before.node(id), &b = after.node(id);
  std::string_view op = op_name(b.op);
  if (a.op != b.op) {
    return fmt::format("node %{} differs: {} -> {} at {}", id, op_name(a.op), op, b.loc.str());
  }
  if (a.op == Op::parameter && a.type != b.type) {
    const char* what = a.type.shape == b.type.shape ? "dtype" : "shape";
    return fmt::format("{} {} {} -> {}", input_label(after, id, names), what, a.type.str(),
                       b.type.str());
  }
  const AttrValue *va = a.attrs.find("value"), *vb = b.attrs.find("value");
  if (a.op == Op::constant && va && vb && std::holds_alternative<Array>(*va) &&
      std::holds_alternative<Array>(*vb) && !attr_equal(*va, *vb)) {
    return fmt::format("constant at {} changed {}", b.loc.str(),
                       value_change(std::get<Array>(*va), std::get<Array>(*vb)));
  }
  if (!(a.attrs == b.attrs)) {
    return fmt::format("{} at {}: {}", op, b.loc.str(), attr_change(a.attrs, b.attrs));
  }
  if (a.inputs != b.inputs) {
    return fmt::format("node %{} differs: {} at {}: inputs {} -> {}", id, op, b.loc.str(),
                       refs(a.inputs), refs(b.inputs));
  }
  return fmt::format("node %{} differs: {} at {}: type {} -> {}", id, op, b.loc.str(), a.type.str(),
                     b.type.str());
}

}  // namespace

std::string explain_difference(const Graph& before, const Graph& after,
                               const std::vector<std::string>& input_names) {
  const std::vector<std::string> unnamed;  // the inputs of `before` have no names here
  Hash128 hb = graph_hash(before), ha = graph_hash(after);
  if (hb == ha) return "";
  const auto &x = before.nodes(), &y = after.nodes();
  size_t n = std::min(x.size(), y.size());
  for (size_t k = 0; k < n; ++k) {
    if (same_node(x[k], y[k])) continue;
    // With more nodes on one side, an exact match a few nodes on (or, when the ops here
    // differ, the same op and attributes) means nodes were inserted or removed.
    auto id = static_cast<NodeId>(k);
    bool ops_differ = x[k].op != y[k].op;
    for (int exact = 1; exact >= 0; --exact) {
      auto match = [&](const Node& a, const Node& b) {
        return exact ? same_node(a, b) : ops_differ && a.op == b.op && a.attrs == b.attrs;
      };
      for (size_t d = 1; d <= kLookahead; ++d) {
        if (y.size() > x.size() && k + d < y.size() && match(x[k], y[k + d])) {
          return added_or_removed(after, id, true, input_names);
        }
        if (x.size() > y.size() && k + d < x.size() && match(x[k + d], y[k])) {
          return added_or_removed(before, id, false, unnamed);
        }
      }
    }
    return modified(before, after, id, input_names);
  }
  if (y.size() > n) return added_or_removed(after, static_cast<NodeId>(n), true, input_names);
  if (x.size() > n) return added_or_removed(before, static_cast<NodeId>(n), false, unnamed);
  if (before.outputs() != after.outputs()) {
    return fmt::format("outputs {} -> {}", refs(before.outputs()), refs(after.outputs()));
  }
  for (size_t k = 0; k < after.outputs().size(); ++k) {
    const int32_t a = before.output_alias(k), b = after.output_alias(k);
    if (a == b) continue;
    auto say = [](int32_t p) {
      return p < 0 ? std::string("a fresh buffer") : fmt::format("parameter {}", p);
    };
    return fmt::format("output {} written into {} -> {} (donation)", k, say(a), say(b));
  }
  return fmt::format("graphs differ (hash {} -> {})", hb.hex(), ha.hex());
}

}  // namespace keel
