// An elementwise loop nest: a flat loop when every access walks the shape as one (same shape
// or scalar), otherwise rows over the outer merged dims and a vectorised inner loop.
#include "backend/cpu/codegen_internal.h"

namespace keel::cpu::gen {
namespace {

std::string inner_offset(const std::string& base, int64_t stride, const std::string& i) {
  std::string term = stride == 0 ? "" : stride == 1 ? i : fmt::format("{} * {}", i, stride);
  if (base.empty()) return term.empty() ? "0" : term;
  return term.empty() ? base : base + " + " + term;
}

std::string header(const Graph& g, const Unit& u, const char* what) {
  std::string s = fmt::format("  // group {} ({}):", u.group, what);
  for (NodeId id : u.compute) s += fmt::format(" %{}={}", id, op_name(g.node(id).op));
  s += "; stores";
  for (NodeId id : u.stores) s += fmt::format(" %{}", id);
  return s + "\n";
}

}  // namespace

std::string emit_loop(const Graph& g, const Buffers& b, const Unit& u, TeamUse& team_use) {
  const Shape& shape = g.node(u.root).type.shape;
  const int64_t total = numel(shape);
  std::string s = header(g, u, "loop");
  team_use = TeamUse::single;
  if (total == 0 || u.stores.empty()) return s + "  // nothing to compute: no elements\n";
  const Body body(g, b, u);
  const Nest nest = build_nest(shape, std::vector<bool>(shape.size(), false), body.accesses());
  const size_t m = nest.size.size();
  const size_t n_access = nest.strides.size();
  const bool par = total >= kParallelMin;
  if (par) team_use = TeamUse::team;
  s += std::string(par ? "" : "#pragma omp single\n") + "  {\n" + body.hoisted() +
       body.restrict_aliases("    ");
  std::vector<std::string> offset(n_access);
  if (m == 1) {
    for (size_t a = 0; a < n_access; ++a) offset[a] = inner_offset("", nest.strides[a][0], "i");
    s += par ? "#pragma omp for simd\n" : "#pragma omp simd\n";
    s += fmt::format("    for (int64_t i = 0; i < {}; ++i) {{\n", nest.size[0]);
    s += body.compute(offset, "      ") + body.store(offset, "      ") + "    }\n  }\n";
    return s;
  }
  std::vector<size_t> outer;
  int64_t rows = 1;
  for (size_t d = 0; d + 1 < m; ++d) {
    outer.push_back(d);
    rows *= nest.size[d];
  }
  const bool par_rows = par && rows >= 4;
  if (par_rows) s += "#pragma omp for\n";
  s += fmt::format("    for (int64_t r = 0; r < {}; ++r) {{\n", rows);
  const std::vector<std::string> idx = split_index(nest, outer, "r");
  for (size_t a = 0; a < n_access; ++a) {
    const std::string base = offset_expr(nest.strides[a], outer, idx);
    std::string name;
    if (base != "0") {
      name = fmt::format("b{}", a);
      s += fmt::format("      const int64_t {} = {};\n", name, base);
    }
    offset[a] = inner_offset(name, nest.strides[a][m - 1], "i");
  }
  s += par && !par_rows ? "#pragma omp for simd\n" : "#pragma omp simd\n";
  s += fmt::format("      for (int64_t i = 0; i < {}; ++i) {{\n", nest.size[m - 1]);
  s += body.compute(offset, "        ") + body.store(offset, "        ");
  s += "      }\n    }\n  }\n";
  return s;
}

}  // namespace keel::cpu::gen
