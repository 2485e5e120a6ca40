#include "ir/scan.h"

#include <fmt/format.h>

#include "ir/error.h"

namespace keel {

ScanInfo scan_info(const Attrs& a, size_t num_inputs) {
  ScanInfo s;
  s.body = &a.graph("body");
  s.carries = a.i("carries");
  s.xs = a.i("xs");
  s.length = a.i("length");
  s.reverse = a.i("reverse") != 0;
  s.consts = static_cast<int64_t>(num_inputs) - s.carries - s.xs;
  s.ys = static_cast<int64_t>(s.body->outputs().size()) - s.carries;
  return s;
}

TensorType scan_token_type() {
  return {DType::boolean, {0}};
}

std::vector<TensorType> scan_result_types(const Attrs& a, size_t num_inputs) {
  const ScanInfo s = scan_info(a, num_inputs);
  std::vector<TensorType> out;
  const Graph& b = *s.body;
  for (int64_t k = 0; k < s.results(); ++k) {
    const NodeId o = b.outputs()[static_cast<size_t>(k)];
    // Reached for a scan_result of a scan that failed to verify (a parsed file, say).
    if (o < 0 || static_cast<size_t>(o) >= b.size()) {
      throw Error(fmt::format("body output {} is %{}, which does not exist", k, o));
    }
    TensorType t = b.node(o).type;
    if (k >= s.carries) t.shape.insert(t.shape.begin(), s.length);
    out.push_back(std::move(t));
  }
  return out;
}

TensorType infer_scan(std::span<const TensorType> in, const Attrs& a) {
  const ScanInfo s = scan_info(a, in.size());
  const Graph& b = *s.body;
  const int64_t ri = a.i("reverse");
  if (ri != 0 && ri != 1) throw Error(fmt::format("reverse must be 0 or 1; got {}", ri));
  if (s.carries < 0 || s.xs < 0 || s.consts < 0) {
    throw Error(fmt::format("carries ({}) and xs ({}) must be >= 0 and fit in the {} inputs",
                            s.carries, s.xs, in.size()));
  }
  if (s.length < 1) throw Error(fmt::format("length must be >= 1; got {}", s.length));
  if (b.params().size() != in.size()) {
    throw Error(fmt::format("the body takes {} parameters but the scan has {} inputs",
                            b.params().size(), in.size()));
  }
  for (size_t i = 0; i < in.size(); ++i) {
    const NodeId p = b.params()[i];
    if (p < 0 || static_cast<size_t>(p) >= b.size()) {
      throw Error(fmt::format("body parameter {} is %{}, which does not exist", i, p));
    }
    TensorType want = in[i];
    const bool is_x =
        static_cast<int64_t>(i) >= s.carries && static_cast<int64_t>(i) < s.carries + s.xs;
    if (is_x) {
      if (want.shape.empty() || want.shape[0] != s.length) {
        throw Error(fmt::format("xs input {} is {}; expected a leading dimension of length {}", i,
                                want.str(), s.length));
      }
      want.shape.erase(want.shape.begin());
    }
    if (b.node(p).type != want) {
      throw Error(fmt::format("body parameter {} is {} but the scan passes {}{}", i,
                              b.node(p).type.str(), want.str(),
                              is_x ? " (one slice of the xs input)" : ""));
    }
  }
  if (b.outputs().empty()) throw Error("the body returns nothing; a scan needs a result");
  if (s.ys < 0) {
    throw Error(fmt::format("the body returns {} values; expected at least the {} carries",
                            b.outputs().size(), s.carries));
  }
  for (size_t k = 0; k < b.outputs().size(); ++k) {
    const NodeId o = b.outputs()[k];
    if (o < 0 || static_cast<size_t>(o) >= b.size()) {
      throw Error(fmt::format("body output {} is %{}, which does not exist", k, o));
    }
    if (static_cast<int64_t>(k) < s.carries && b.node(o).type != in[k]) {
      throw Error(fmt::format("body output {} (new carry) is {} but carry {} is {}", k,
                              b.node(o).type.str(), k, in[k].str()));
    }
  }
  return scan_token_type();
}

Attrs scan_attrs(GraphRef body, int64_t carries, int64_t xs, int64_t length, bool reverse) {
  Attrs a;
  a.set("body", std::move(body));
  a.set("carries", carries);
  a.set("xs", xs);
  a.set("length", length);
  a.set("reverse", int64_t{reverse ? 1 : 0});
  return a;
}

std::vector<NodeId> emit_scan(Graph& g, std::vector<NodeId> inputs, Attrs attrs,
                              const SourceLoc& loc, std::string_view api) {
  const size_t count = inputs.size();
  const NodeId s = g.emit(Op::scan, std::move(inputs), std::move(attrs), loc, api);
  const int64_t results = scan_info(g.node(s).attrs, count).results();
  std::vector<NodeId> out;
  for (int64_t k = 0; k < results; ++k) {
    out.push_back(g.emit(Op::scan_result, {s}, Attrs{{"index", k}}, loc, api));
  }
  return out;
}

}  // namespace keel
