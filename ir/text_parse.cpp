// Parser for the canonical text form written by text_print.cpp:
//   graph NAME { (%N = OP(%a, ...) [{key=value, ...}] : TYPE [@ "file":line])*
//                return (%x [-> %p], ...) }
// `%x -> %p`: output %x is written into parameter %p's buffer (donation).
// An attribute value may itself be a graph (scan's body), nested with the same grammar.
// Values: 3 (int), 3.0 / 1e-05 / inf / nan (double), "s" (string), [1,2] (ints), f32 (dtype),
// f32[2]{1,2} (array); float spellings are in text_spelling.cpp.
#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <cstring>
#include <limits>
#include <optional>

#include "ir/error.h"
#include "ir/text.h"
#include "ir/verify.h"

namespace keel {
namespace {

template <class T>
std::optional<T> parse_int(std::string_view s) {
  T v{};
  auto r = std::from_chars(s.data(), s.data() + s.size(), v);
  if (r.ec != std::errc() || r.ptr != s.data() + s.size()) return std::nullopt;
  return v;
}

class Parser {
 public:
  Parser(std::string_view text, std::string_view source) : t_(text), src_(source) {}
  Graph graph();

 private:
  Graph graph_inner();
  int depth_ = 0;
  static bool alpha(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
  static bool digit(char c) { return c >= '0' && c <= '9'; }
  static bool word(char c) { return alpha(c) || digit(c) || c == '.'; }

  std::string_view t_, src_;
  size_t pos_ = 0;

  char peek() const { return pos_ < t_.size() ? t_[pos_] : '\0'; }
  bool at_end() const { return pos_ >= t_.size(); }
  void skip_ws() {
    while (!at_end() && (peek() == ' ' || peek() == '\t' || peek() == '\r' || peek() == '\n')) {
      ++pos_;
    }
  }
  size_t here() {
    skip_ws();
    return pos_;
  }

  // The token at `at`, quoted, for "got ..." in errors.
  std::string got(size_t at) const {
    if (at >= t_.size()) return "end of input";
    char c = t_[at];
    size_t end = at + 1;
    if (word(c) || c == '-' || c == '%') {
      while (end < t_.size() && end - at < 24 && (word(t_[end]) || t_[end] == '+')) ++end;
    }
    if (c == '\n') return "end of line";
    auto u = static_cast<unsigned char>(c);
    if (u < 0x20 || u >= 0x7f) return fmt::format("byte 0x{:02x}", u);
    return fmt::format("'{}'", t_.substr(at, end - at));
  }

  [[noreturn]] void fail_at(size_t at, std::string_view expected, std::string got_what = "") const {
    size_t line = 1, line_start = 0;
    for (size_t i = 0; i < at && i < t_.size(); ++i) {
      if (t_[i] == '\n') ++line, line_start = i + 1;
    }
    throw InputError(fmt::format("[ir.parse] {}:{}:{}: expected {}, got {}", src_, line,
                                 at - line_start + 1, expected,
                                 got_what.empty() ? got(at) : got_what));
  }
  [[noreturn]] void fail(std::string_view expected) {
    skip_ws();
    fail_at(pos_, expected);
  }

  bool eat(char c) {
    skip_ws();
    if (peek() != c || at_end()) return false;
    ++pos_;
    return true;
  }
  void expect(char c) {
    if (!eat(c)) fail(fmt::format("'{}'", c));
  }

  std::string_view ident(std::string_view what) {
    skip_ws();
    if (!alpha(peek())) fail(what);
    size_t start = pos_;
    while (!at_end() && word(peek())) ++pos_;
    return t_.substr(start, pos_ - start);
  }

  std::string string_lit() {
    expect('"');
    size_t start = pos_;
    while (peek() != '"') {
      if (at_end() || peek() == '\n') fail_at(pos_, "'\"' closing the string");
      pos_ += peek() == '\\' ? 2 : 1;
    }
    std::optional<std::string> s = unescape_text(t_.substr(start, pos_++ - start));
    if (!s) fail_at(start - 1, "a string with escapes \\\\ \\\" \\n \\t \\xHH");
    return *s;
  }

  std::string name(std::string_view what) {
    skip_ws();
    return peek() == '"' ? string_lit() : std::string(ident(what));
  }

  // A number's characters: -?(digits/./e±digits | inf | nan | nan(0x...)).
  std::string_view number_token(std::string_view what, size_t& start) {
    skip_ws();
    start = pos_;
    if (peek() == '-') ++pos_;
    if (alpha(peek())) {
      while (!at_end() && alpha(peek())) ++pos_;
      if (peek() == '(') {
        while (!at_end() && peek() != ')' && (word(peek()) || peek() == '(')) ++pos_;
        if (peek() == ')') ++pos_;
      }
    } else {
      while (!at_end() && (digit(peek()) || peek() == '.' || peek() == 'e' || peek() == 'E')) {
        char c = t_[pos_++];
        if ((c == 'e' || c == 'E') && (peek() == '+' || peek() == '-')) ++pos_;
      }
    }
    if (pos_ == start) fail(what);
    return t_.substr(start, pos_ - start);
  }

  // A number token converted by `read`, which returns nullopt when it does not fit.
  template <class Read>
  auto number(Read read, std::string_view what) {
    size_t at;
    auto v = read(number_token(what, at));
    if (!v) fail_at(at, what);
    return *v;
  }

  Shape shape() {
    expect('[');
    Shape s;
    if (eat(']')) return s;
    do {
      size_t at = here();
      int64_t d = number(parse_int<int64_t>, "a dimension");
      if (d < 0) fail_at(at, "a dimension >= 0");
      s.push_back(d);
    } while (eat(','));
    expect(']');
    int64_t n = 1;
    for (int64_t d : s) {
      if (d && n > std::numeric_limits<int64_t>::max() / d)
        fail("a shape of fewer than 2^63 elements");
      n *= d;
    }
    return s;
  }

  std::vector<int64_t> int_list() {
    expect('[');
    std::vector<int64_t> v;
    if (eat(']')) return v;
    do v.push_back(number(parse_int<int64_t>, "an integer"));
    while (eat(','));
    expect(']');
    return v;
  }

  void element(DType t, std::vector<std::byte>& raw) {
    auto put = [&raw](auto v) {
      size_t n = raw.size();
      raw.resize(n + sizeof(v));
      std::memcpy(raw.data() + n, &v, sizeof(v));
    };
    switch (t) {
      case DType::f32:
        put(number(parse_f32_text, "an f32"));
        break;
      case DType::bf16:
        put(number(parse_bf16_text, "a bf16"));
        break;
      case DType::i32:
        put(number(parse_int<int32_t>, "an i32"));
        break;
      case DType::i64:
        put(number(parse_int<int64_t>, "an i64"));
        break;
      case DType::boolean: {
        size_t at = here();
        std::string_view b = ident("true or false");
        if (b != "true" && b != "false") fail_at(at, "true or false");
        put(static_cast<uint8_t>(b == "true"));
      }
    }
  }

  Array array(DType t) {
    Shape s = shape();
    expect('{');
    std::vector<std::byte> raw;
    int64_t count = 0;
    if (!eat('}')) {
      do element(t, raw), ++count;
      while (eat(','));
      expect('}');
    }
    if (count != numel(s)) {  // before Array allocates numel(s) elements
      fail_at(pos_ - 1, fmt::format("{} values for {}{}", numel(s), dtype_name(t), shape_str(s)),
              fmt::format("{}", count));
    }
    Array a(t, s);
    if (!raw.empty()) std::memcpy(a.data(), raw.data(), raw.size());
    return a;
  }

  AttrValue value() {
    skip_ws();
    size_t at = pos_;
    if (peek() == '"') return string_lit();
    if (peek() == '[') return int_list();
    if (alpha(peek())) {
      std::string_view id = ident("an attribute value");
      if (id == "graph") {
        pos_ = at;
        if (++depth_ > 64) fail_at(at, "subgraphs nested at most 64 deep");
        GraphRef g = std::make_shared<const Graph>(graph_inner());
        --depth_;
        return g;
      }
      if (auto t = parse_dtype(id)) {
        if (peek() == '[') return array(*t);
        return *t;
      }
      if (id != "inf" && id != "nan") fail_at(at, "an attribute value");
      pos_ = at;
    }
    std::string_view tok = number_token("an attribute value", at);
    pos_ = at;
    if (tok.find_first_of(".eEin") != std::string_view::npos) {
      return number(parse_f64_text, "a number");
    }
    return number(parse_int<int64_t>, "an int64");
  }

  NodeId ref() {
    expect('%');
    size_t at = pos_;
    while (digit(peek())) ++pos_;
    std::optional<NodeId> id = parse_int<NodeId>(t_.substr(at, pos_ - at));
    if (!id) fail_at(at, "a node number");
    return *id;
  }

  std::vector<NodeId> refs() {
    expect('(');
    std::vector<NodeId> out;
    if (eat(')')) return out;
    do out.push_back(ref());
    while (eat(','));
    expect(')');
    return out;
  }

  Node node(NodeId expected_id) {
    size_t at = here();
    if (ref() != expected_id)
      fail_at(at, fmt::format("'%{}' (nodes are numbered in order)", expected_id));
    expect('=');
    Node n;
    at = here();
    std::optional<Op> op = parse_op(ident("an op name"));
    if (!op) fail_at(at, "an op name");
    n.op = *op;
    n.inputs = refs();
    if (eat('{')) {
      do {
        at = here();
        std::string key = name("an attribute name");
        if (n.attrs.has(key)) fail_at(at, "an attribute name not used before on this node");
        expect('=');
        n.attrs.set(std::move(key), value());
      } while (eat(','));
      expect('}');
    }
    expect(':');
    at = here();
    std::optional<DType> t = parse_dtype(ident("a dtype"));
    if (!t) fail_at(at, "a dtype");
    n.type = {*t, shape()};
    if (eat('@')) {
      n.loc.file = string_lit();
      expect(':');
      n.loc.line = number(parse_int<uint32_t>, "a line number");
    }
    return n;
  }
};

Graph Parser::graph() {
  Graph g = graph_inner();
  if ((skip_ws(), !at_end())) fail("end of input");
  return g;
}

Graph Parser::graph_inner() {
  size_t at = here();
  if (ident("'graph'") != "graph") fail_at(at, "'graph'");
  Graph g(name("a graph name"));
  expect('{');
  while ((skip_ws(), peek() == '%')) g.append_unchecked(node(static_cast<NodeId>(g.size())));
  at = pos_;
  if (!alpha(peek()) || ident("'%' or 'return'") != "return") fail_at(at, "a node or 'return'");
  std::vector<std::pair<NodeId, size_t>> aliases;  // (parameter node, where it was written)
  expect('(');
  std::vector<NodeId> outputs;
  if (!eat(')')) {
    do {
      outputs.push_back(ref());
      if (eat('-')) {
        expect('>');
        aliases.emplace_back(-1, (skip_ws(), pos_));
        aliases.back().first = ref();
      } else {
        aliases.emplace_back(-1, 0);
      }
    } while (eat(','));
    expect(')');
  }
  g.set_outputs(std::move(outputs));
  expect('}');
  // Parameters are listed by their index attribute; the verifier checks it matches.
  std::vector<std::pair<int64_t, NodeId>> params;
  for (size_t i = 0; i < g.size(); ++i) {
    const Node& n = g.nodes()[i];
    if (n.op != Op::parameter) continue;
    const AttrValue* idx = n.attrs.find("index");
    const int64_t* k = idx ? std::get_if<int64_t>(idx) : nullptr;
    params.emplace_back(k ? *k : std::numeric_limits<int64_t>::max(), static_cast<NodeId>(i));
  }
  std::stable_sort(params.begin(), params.end(),
                   [](const auto& a, const auto& b) { return a.first < b.first; });
  std::vector<NodeId> ids;
  for (const auto& p : params) ids.push_back(p.second);
  g.set_params(std::move(ids));
  for (size_t k = 0; k < aliases.size(); ++k) {
    const auto [node, at2] = aliases[k];
    if (node < 0) continue;
    auto it = std::find(g.params().begin(), g.params().end(), node);
    if (it == g.params().end())
      fail_at(at2, fmt::format("a parameter for output {} to be written into", k));
    g.set_output_alias(k, static_cast<int32_t>(it - g.params().begin()));
  }
  return g;
}

}  // namespace

Graph parse_graph(std::string_view text, std::string_view source) {
  Graph g = Parser(text, source).graph();
  std::vector<std::string> problems = verify_problems(g);
  if (!problems.empty()) {
    throw InputError(fmt::format("[ir.parse] {}: {}", source, problems.front()));
  }
  return g;
}

}  // namespace keel
