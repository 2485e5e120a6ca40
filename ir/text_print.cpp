// Printer for the canonical text form; the grammar is in text_parse.cpp.
#include <fmt/format.h>

#include <cstring>

#include "ir/text.h"

namespace keel {
namespace {

bool is_ident(std::string_view s) {
  auto alpha = [](char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; };
  if (s.empty() || !alpha(s[0])) return false;
  for (char c : s) {
    if (!alpha(c) && !(c >= '0' && c <= '9') && c != '.') return false;
  }
  return true;
}

}  // namespace

std::string name_text(std::string_view s) {
  return is_ident(s) ? std::string(s) : quoted_text(s);
}

namespace {

std::string array_str(const Array& a) {
  std::string s = fmt::format("{}{}{{", dtype_name(a.dtype()), shape_str(a.shape()));
  for (int64_t i = 0; i < a.numel(); ++i) {
    if (i) s += ',';
    s += array_element_str(a, i);
  }
  return s + "}";
}

std::string body_str(const Graph& g, bool with_locations, const std::string& indent);

void print_node(std::string& out, NodeId id, const Node& n, bool with_locations,
                const std::string& indent) {
  out += fmt::format("{}  %{} = {}(", indent, id, op_name(n.op));
  for (size_t i = 0; i < n.inputs.size(); ++i) {
    out += fmt::format("{}%{}", i ? ", " : "", n.inputs[i]);
  }
  out += ')';
  const auto& items = n.attrs.items();
  for (size_t i = 0; i < items.size(); ++i) {
    out += i ? ", " : " {";
    out +=
        name_text(items[i].first) + "=" + attr_value_str(items[i].second, with_locations, indent);
  }
  if (!items.empty()) out += '}';
  out += " : " + n.type.str();
  if (with_locations && n.loc != SourceLoc{}) {
    out += fmt::format(" @ {}:{}", quoted_text(n.loc.file), n.loc.line);
  }
  out += '\n';
}

// A subgraph prints as a nested `graph NAME { ... }` indented two more spaces; without
// locations its name is left out (written as `body`), as the hash leaves out graph names.
std::string body_str(const Graph& g, bool with_locations, const std::string& indent) {
  std::string out;
  for (size_t i = 0; i < g.size(); ++i) {
    print_node(out, static_cast<NodeId>(i), g.nodes()[i], with_locations, indent);
  }
  out += indent + "  return (";
  for (size_t i = 0; i < g.outputs().size(); ++i) {
    out += fmt::format("{}%{}", i ? ", " : "", g.outputs()[i]);
    // A donated output names the parameter whose buffer it is written into.
    const int32_t a = g.output_alias(i);
    if (a >= 0 && static_cast<size_t>(a) < g.params().size()) {
      out += fmt::format(" -> %{}", g.params()[static_cast<size_t>(a)]);
    } else if (a >= 0) {
      out +=
          fmt::format(" -> parameter {}", a);  // invalid; printed so the verifier's message shows
    }
  }
  return out + ")\n" + indent + "}";
}

}  // namespace

std::string array_element_str(const Array& a, int64_t i) {
  const std::byte* p = a.data();
  switch (a.dtype()) {
    case DType::f32: {
      float f;
      std::memcpy(&f, p + i * 4, 4);
      return f32_text(f);
    }
    case DType::bf16: {
      uint16_t b;
      std::memcpy(&b, p + i * 2, 2);
      return bf16_text(b);
    }
    case DType::boolean:
      return a.get_i64(i) != 0 ? "true" : "false";
    default:
      return fmt::format("{}", a.get_i64(i));
  }
}

std::string attr_value_str(const AttrValue& v, bool with_locations, const std::string& indent) {
  if (const GraphRef* g = std::get_if<GraphRef>(&v)) {
    if (!*g) return "graph body {\n" + indent + "  return ()\n" + indent + "}";
    const std::string head = "graph " + (with_locations ? name_text((*g)->name()) : "body");
    return head + " {\n" + body_str(**g, with_locations, indent + "  ");
  }
  struct Visitor {
    std::string operator()(int64_t x) const { return fmt::format("{}", x); }
    std::string operator()(double x) const { return f64_text(x); }
    std::string operator()(const std::string& x) const { return quoted_text(x); }
    std::string operator()(const std::vector<int64_t>& x) const { return shape_str(x); }
    std::string operator()(DType x) const { return std::string(dtype_name(x)); }
    std::string operator()(const Array& x) const { return array_str(x); }
    std::string operator()(const GraphRef&) const { return ""; }
  };
  return std::visit(Visitor{}, v);
}

std::string print_graph_body(const Graph& g, bool with_locations) {
  return body_str(g, with_locations, "") + "\n";
}

std::string print_graph(const Graph& g, bool with_locations) {
  return "graph " + name_text(g.name()) + " {\n" + print_graph_body(g, with_locations);
}

}  // namespace keel
