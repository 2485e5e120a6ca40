// Kernels that walk one axis in order, a thread per line (argmax, cumsum) or per element of a
// line (top-k, which ranks each element against its line): each line's order is fixed, so the
// results are those of the reference, ties and NaN included.
#include "backend/c_source/c_source.h"
#include "backend/cuda/codegen.h"
#include "backend/cuda/codegen_internal.h"

namespace keel::cuda::gen {
namespace {

// The input seen as [outer, n, inner] around `axis`.
struct Lines {
  int64_t outer = 1, n = 1, inner = 1;
};
Lines lines_of(const Shape& s, int64_t axis) {
  Lines l;
  for (int64_t d = 0; d < static_cast<int64_t>(s.size()); ++d) {
    const int64_t size = s[static_cast<size_t>(d)];
    if (d < axis) l.outer *= size;
    if (d == axis) l.n = size;
    if (d > axis) l.inner *= size;
  }
  return l;
}

// Whether element value `a` (at index ia) comes before `b` (at ib) in descending order: NaN
// first, ties by lower index.
std::string before(DType t, const std::string& a, const std::string& b, const std::string& ia,
                   const std::string& ib) {
  if (!is_float(t)) return fmt::format("({0} > {1} || ({0} == {1} && {2} < {3}))", a, b, ia, ib);
  return fmt::format(
      "(({0} != {0}) ? (({1} == {1}) || {2} < {3}) : ({1} == {1}) && ({0} > {1} || ({0} == {1} "
      "&& {2} < {3})))",
      a, b, ia, ib);
}

}  // namespace

bool has_axis_kernel(Op op) {
  return op == Op::argmax || op == Op::cumsum || op == Op::top_k_values || op == Op::top_k_indices;
}

std::string emit_axis_kernel(Kernel& k, NodeId id) {
  const Graph& g = k.graph();
  const Node& n = g.node(id);
  const NodeId x = n.inputs[0];
  const Shape& xs = g.node(x).type.shape;
  const DType xt = g.node(x).type.dtype;
  const bool top_k = n.op == Op::top_k_values || n.op == Op::top_k_indices;
  const int64_t axis = top_k ? static_cast<int64_t>(xs.size()) - 1 : n.attrs.i("axis");
  const Lines l = lines_of(xs, axis);
  k.launch().block = kBlockThreads;
  k.launch().what = c_source::describe(g, id);
  const int64_t threads = top_k ? l.outer * l.n : l.outer * l.inner;
  if (threads == 0 || numel(n.type.shape) == 0) {
    k.launch().grid = 0;
    return "";
  }
  const std::string in = k.pointer(x, false), out = k.pointer(id, true);
  const std::string ct(c_source::compute_type(xt));
  auto load = [&](const std::string& at) {
    return c_source::load_expr(xt, fmt::format("{}[{}]", in, at));
  };
  std::string s;
  if (n.op == Op::argmax) {
    s += fmt::format("    const int64_t a = i / {0}, b = i % {0};\n", l.inner);
    s += fmt::format("    const int64_t base = a * {} + b;\n", l.n * l.inner);
    s += fmt::format("    {} best = {};\n    int64_t at = 0;\n", ct, load("base"));
    s += fmt::format("    for (int64_t j = 1; j < {}; ++j) {{\n", l.n);
    s += fmt::format("      const {} v = {};\n", ct, load(fmt::format("base + j * {}", l.inner)));
    s += fmt::format("      if ({}) {{\n        best = v;\n        at = j;\n      }}\n",
                     before(xt, "v", "best", "j", "at"));
    s += fmt::format("    }}\n    {}[i] = at;\n", out);
  } else if (n.op == Op::cumsum) {
    // The running total in double (floats) or wrapping int64, each output rounded once.
    const bool reverse = n.attrs.i("reverse") != 0;
    const bool fl = is_float(xt);
    s += fmt::format("    const int64_t a = i / {0}, b = i % {0};\n", l.inner);
    s += fmt::format("    const int64_t base = a * {} + b;\n", l.n * l.inner);
    s += fmt::format("    {} acc = 0;\n", fl ? "double" : "uint64_t");
    s += fmt::format("    for (int64_t step = 0; step < {}; ++step) {{\n", l.n);
    s += fmt::format("      const int64_t at = base + ({}) * {};\n",
                     reverse ? fmt::format("{} - step", l.n - 1) : std::string("step"), l.inner);
    s += fmt::format("      acc += {};\n", fl ? fmt::format("double({})", load("at"))
                                              : fmt::format("uint64_t(int64_t({}))", load("at")));
    const DType t = n.type.dtype;
    const std::string value = fl                ? "float(acc)"
                              : t == DType::i32 ? "int32_t(uint32_t(acc))"
                                                : "int64_t(acc)";
    s += fmt::format("      {}[at] = {};\n    }}\n", out, c_source::store_expr(t, value));
  } else {  // top_k: element j of row r goes to position rank (when below k)
    const int64_t kk = n.attrs.i("k");
    s += fmt::format("    const int64_t r = i / {0}, j = i % {0};\n", l.n);
    s += fmt::format("    const {} v = {};\n", ct, load(fmt::format("r * {} + j", l.n)));
    s += "    int64_t rank = 0;\n";
    s += fmt::format("    for (int64_t m = 0; m < {}; ++m) {{\n", l.n);
    s += fmt::format("      const {} w = {};\n", ct, load(fmt::format("r * {} + m", l.n)));
    s += fmt::format("      rank += {} ? 1 : 0;\n    }}\n", before(xt, "w", "v", "m", "j"));
    const std::string value =
        n.op == Op::top_k_indices ? std::string("j") : fmt::format("{}[r * {} + j]", in, l.n);
    s += fmt::format("    if (rank < {}) {}[r * {} + rank] = {};\n", kk, out, kk, value);
  }
  return loop_kernel(k, threads, "", s);
}

}  // namespace keel::cuda::gen
