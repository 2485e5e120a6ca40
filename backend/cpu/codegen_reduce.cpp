// A reduction loop nest with its elementwise producers computed inline. Float sums accumulate
// in float in a fixed blocked order (16 lanes along a row, blocks of 64 across rows), the same
// on every ISA and thread count; integer sums in uint64; max propagates NaN.
#include <algorithm>

#include "backend/cpu/codegen_internal.h"

namespace keel::cpu::gen {
namespace {

// A whole-array sum splits into this many chunks whatever the thread count.
constexpr int64_t kSumChunks = 64;
// A float row sum keeps this many partial sums (element j goes to lane j % kLanes), added
// pairwise at the end; a column sum adds its rows in blocks of kRowBlock.
constexpr int64_t kLanes = 16;
constexpr int64_t kRowBlock = 64;

// How one output accumulates: C type, start value, update and final value ({} = accumulator).
struct Acc {
  std::string type, init, step_fmt, final_fmt;
  bool sum = false;      // may use an OpenMP simd reduction
  bool blocked = false;  // a float sum: lanes and row blocks
  std::string step(const std::string& acc, const std::string& v) const {
    return fmt::format(fmt::runtime(step_fmt), acc, v);
  }
};

Acc make_acc(const Node& r, int64_t count) {
  const DType t = r.type.dtype;
  const bool fl = is_float(t);
  const bool mean = r.op == Op::reduce_mean;
  if (r.op == Op::reduce_max) {
    const char* init = fl                ? "(-__builtin_inff())"
                       : t == DType::i32 ? "(-2147483647 - 1)"
                                         : "(-9223372036854775807LL - 1)";
    return {std::string(compute_type(t)),
            init,
            fl ? "{0} = keel_fmax({0}, {1});" : "{0} = {1} > {0} ? {1} : {0};",
            store_expr(t, "{}"),
            false,
            false};
  }
  if (fl) {
    std::string fin = !mean        ? "float({})"
                      : count == 0 ? "__builtin_nanf(\"\")"
                                   : fmt::format("float(double({{}}) / {}.0)", count);
    return {"float", "0.0f", "{0} += {1};", store_expr(t, fin), true, true};
  }
  // Integers sum in uint64: wraps like the reference's int64 sum, without signed overflow.
  std::string v = !mean        ? "int64_t({})"
                  : count == 0 ? "int64_t(0)"
                               : fmt::format("(int64_t({{}}) / {})", count);
  std::string fin = t == DType::i32 ? cat("int32_t(uint32_t(", v, "))") : v;
  return {"uint64_t", "0", "{0} += uint64_t(int64_t({1}));", fin, true, false};
}

std::string add_offset(const std::string& base, const std::string& more) {
  if (more == "0") return base;
  return base == "0" ? more : cat(base, " + ", more);
}

// Template B's float sums over many rows, in two passes over the team: each block of kRowBlock
// rows (of one output row o) sums every column into its own partial row, walking the input row
// by row (a tile of columns per task read 1 KB runs a row apart: 14 GB/s against 24 for the
// elementwise loops, and gpt2-s's GELU backward took 1.6 times as long); then each tile of
// columns adds its blocks' partials in block order. The sums are those of the one-pass order.
std::string column_sums_by_row_blocks(Buffers& b, const Body& body,
                                      const std::vector<std::string>& offset,
                                      const std::string& out, const std::string& v, const Acc& acc,
                                      int64_t rows, int64_t q_total, int64_t kl, int64_t tile) {
  const int64_t blocks = (q_total + kRowBlock - 1) / kRowBlock, n_tiles = (kl + tile - 1) / tile;
  const int64_t at = b.partials(rows * blocks * kl * 4);
  std::string s =
      fmt::format("    float* __restrict part = reinterpret_cast<float*>(A + {});\n", at);
  s += fmt::format("#pragma omp for\n    for (int64_t w = 0; w < {}; ++w) {{\n", rows * blocks);
  s += fmt::format("      const int64_t o = w / {0}, qb = (w % {0}) * {1}, k0 = 0;\n", blocks,
                   kRowBlock);
  s += fmt::format("      const int64_t qe = qb + {1} < {0} ? qb + {1} : {0};\n", q_total,
                   kRowBlock);
  s += fmt::format("      float* __restrict blk = part + w * {};\n", kl);
  s += fmt::format("      for (int64_t i = 0; i < {}; ++i) blk[i] = 0.0f;\n", kl);
  s += "      for (int64_t q = qb; q < qe; ++q) {\n";
  s += fmt::format("#pragma omp simd\n        for (int64_t i = 0; i < {}; ++i) {{\n", kl);
  s += cat(body.compute(offset, "          "), body.store(offset, "          "));
  s += cat("          ", acc.step("blk[i]", v), "\n        }\n      }\n    }\n");
  s += fmt::format("#pragma omp for\n    for (int64_t w = 0; w < {}; ++w) {{\n", rows * n_tiles);
  s += fmt::format("      const int64_t o = w / {0}, k0 = (w % {0}) * {1};\n", n_tiles, tile);
  s += fmt::format("      const int64_t kn = {0} - k0 < {1} ? {0} - k0 : {1};\n", kl, tile);
  s += fmt::format("      float acc[{}];\n", tile);
  s += "      for (int64_t i = 0; i < kn; ++i) acc[i] = 0.0f;\n";
  s += fmt::format("      for (int64_t c = 0; c < {}; ++c) {{\n", blocks);
  s += fmt::format("        const float* __restrict blk = part + (o * {} + c) * {} + k0;\n", blocks,
                   kl);
  s += "#pragma omp simd\n        for (int64_t i = 0; i < kn; ++i) acc[i] += blk[i];\n      }\n";
  const std::string fin = fmt::format(fmt::runtime(acc.final_fmt), "acc[i]");
  s += fmt::format("      for (int64_t i = 0; i < kn; ++i) {}[o * {} + k0 + i] = {};\n", out, kl,
                   fin);
  return s + "    }\n  }\n";
}

}  // namespace

std::string emit_reduce(const Graph& g, Buffers& b, const Unit& u, TeamUse& team_use) {
  const Node& r = g.node(u.root);
  const NodeId in = r.inputs[0];
  const Shape& in_shape = g.node(in).type.shape;
  const int64_t n_out = numel(r.type.shape);
  std::vector<bool> reduced(in_shape.size(), false);
  int64_t count = 1;
  for (int64_t a : r.attrs.ints("axes")) {
    reduced[a] = true;
    count *= in_shape[a];
  }
  const Acc acc = make_acc(r, count);
  const Body body(g, b, u);
  const std::string out = body.ptr(u.root);
  std::string s = fmt::format("  // group {} (reduction): {}\n", u.group, describe(g, u.root));
  team_use = TeamUse::single;
  const std::string open = cat("  {\n", body.restrict_aliases("    "));
  if (n_out == 0) return s + "#pragma omp single\n" + open + "  }\n";
  if (count == 0) {  // nothing to fold: every output is the empty reduction
    const std::string v = fmt::format(fmt::runtime(acc.final_fmt), acc.init);
    return s + "#pragma omp single\n" + open +
           fmt::format("    for (int64_t o = 0; o < {}; ++o) {}[o] = {};\n  }}\n", n_out, out, v);
  }
  std::vector<Access> shapes = body.accesses();
  const size_t n_body = shapes.size();
  Nest nest = build_nest(in_shape, reduced, shapes);
  if (std::none_of(nest.reduced.begin(), nest.reduced.end(), [](bool x) { return x; })) {
    nest.size.push_back(1);  // every reduced dim has size 1: fold one element
    nest.reduced.push_back(true);
    for (auto& st : nest.strides) st.push_back(0);
  }
  const size_t m = nest.size.size(), last = m - 1;
  std::vector<size_t> kept, red;
  for (size_t d = 0; d < m; ++d) (nest.reduced[d] ? red : kept).push_back(d);
  // Template A (innermost dim reduced): one output per row, the innermost reduced dim
  // vectorised. Template B (innermost dim kept): a tile of outputs accumulates together,
  // vectorised across outputs, while the reduced dims are walked outside.
  const bool a_form = nest.reduced[last];
  std::vector<size_t> row_dims = kept, red_outer = red;
  (a_form ? red_outer : row_dims).pop_back();
  int64_t rows = 1, q_total = 1;
  for (size_t d : row_dims) rows *= nest.size[d];
  for (size_t d : red_outer) q_total *= nest.size[d];
  const int64_t kl = nest.size[last];
  const int64_t tile = a_form ? 1 : std::min<int64_t>(kl, 256),
                n_tiles = a_form ? 1 : (kl + tile - 1) / tile;
  const bool par = numel(in_shape) >= kParallelMin && rows * n_tiles >= 2;

  // One big sum (a loss, a norm): split its terms across threads instead of its outputs, in
  // a fixed number of chunks added in order, so the result does not depend on the thread count.
  // Not a row of a row sum ([1, n] summed over n), which adds like every row of [k, n] does.
  const bool whole_sum = r.attrs.ints("axes").size() == in_shape.size();
  const bool split = a_form && !par && acc.sum && whole_sum && numel(in_shape) >= kParallelMin;
  team_use = par ? TeamUse::team : split ? TeamUse::own_region : TeamUse::single;
  s += cat(team_use == TeamUse::single ? "#pragma omp single\n" : "", open, body.hoisted());
  const auto row_idx = split_index(nest, row_dims, "o");
  const auto q_idx = split_index(nest, red_outer, "q");
  std::vector<std::string> offset(n_body);
  for (size_t a = 0; a < n_body; ++a) {
    const std::string base = add_offset(offset_expr(nest.strides[a], row_dims, row_idx),
                                        offset_expr(nest.strides[a], red_outer, q_idx));
    const int64_t st = nest.strides[a][last];
    const std::string pos = a_form ? "j" : "(k0 + i)";
    offset[a] = add_offset(base, st == 0 ? "0" : st == 1 ? pos : fmt::format("{} * {}", pos, st));
  }
  const std::string v = fmt::format("t{}", in);
  if (!a_form && par && acc.blocked && q_total > kRowBlock) {
    return s + column_sums_by_row_blocks(b, body, offset, out, v, acc, rows, q_total, kl, tile);
  }
  if (par) s += "#pragma omp for\n";
  s += fmt::format("    for (int64_t w = 0; w < {}; ++w) {{\n", rows * n_tiles);
  if (a_form) {
    s += "      const int64_t o = w;\n";
  } else {
    s += fmt::format("      const int64_t o = w / {0}, k0 = (w % {0}) * {1};\n", n_tiles, tile);
    s += fmt::format("      const int64_t kn = {0} - k0 < {1} ? {0} - k0 : {1};\n", kl, tile);
  }
  // The reduced dims outside the vectorised loop, when there are any.
  const bool has_q = !red_outer.empty();
  const std::string q_loop =
      has_q ? fmt::format("      for (int64_t q = 0; q < {}; ++q) {{\n", q_total) : "";
  const std::string q_end = has_q ? "      }\n" : "";
  if (a_form) {
    const int64_t chunks = std::min<int64_t>(kSumChunks, has_q ? q_total : kl);
    if (split) {
      s += fmt::format("      {} part[{}];\n#pragma omp parallel for\n", acc.type, chunks);
      s += fmt::format("      for (int64_t c = 0; c < {}; ++c) {{\n", chunks);
    }
    const int64_t outer = has_q ? q_total : kl;
    const std::string lo = split ? fmt::format("c * {} / {}", outer, chunks) : "0";
    const std::string hi =
        split ? fmt::format("(c + 1) * {} / {}", outer, chunks) : fmt::format("{}", outer);
    const std::string j_lo = has_q ? "0" : lo, j_hi = has_q ? fmt::format("{}", kl) : hi;
    if (acc.blocked) {
      s += fmt::format("      float lane[{0}] = {{}}, blk[{0}] = {{}};\n", kLanes);
      s += "      int64_t groups = 0;\n";
    } else {
      s += cat("      ", acc.type, " a = ", acc.init, ";\n");
    }
    if (has_q) s += fmt::format("      for (int64_t q = {}; q < {}; ++q) {{\n", lo, hi);
    const std::string inner =
        cat(body.compute(offset, "          "), body.store(offset, "          "));
    if (acc.blocked) {
      // Groups of kLanes elements (element j to lane j % kLanes, the row's rest last) add into
      // a block sum, flushed into the lanes' totals every kRowBlock groups.
      const std::string step = cat("          ", acc.step("blk[l]", v), "\n");
      const std::string flush = fmt::format(
          "if (++groups == {}) {{\n            groups = 0;\n            for (int64_t l = 0; l < "
          "{}; ++l) {{\n              lane[l] += blk[l];\n              blk[l] = 0.0f;\n"
          "            }}\n          }}\n",
          kRowBlock, kLanes);
      s += fmt::format("        const int64_t jw = {0} + ({1} - ({0})) / {2} * {2};\n", j_lo, j_hi,
                       kLanes);
      s += fmt::format("        for (int64_t jb = {}; jb < jw; jb += {}) {{\n", j_lo, kLanes);
      s += fmt::format("#pragma omp simd\n          for (int64_t l = 0; l < {}; ++l) {{\n", kLanes);
      s += cat("          const int64_t j = jb + l;\n", inner, step, "          }\n");
      s += cat("          ", flush, "        }\n");
      s += fmt::format("        if (jw < {}) {{\n#pragma omp simd\n", j_hi);
      s += fmt::format("          for (int64_t l = 0; l < {} - jw; ++l) {{\n", j_hi);
      s += cat("          const int64_t j = jw + l;\n", inner, step, "          }\n");
      s += cat("          ", flush, "        }\n", q_end);
      s += fmt::format("      for (int64_t l = 0; l < {}; ++l) lane[l] += blk[l];\n", kLanes);
      s += fmt::format("      for (int64_t h = {} / 2; h > 0; h /= 2) {{\n", kLanes);
      s += "        for (int64_t l = 0; l < h; ++l) lane[l] += lane[l + h];\n      }\n";
      s += "      float a = lane[0];\n";
    } else {
      if (acc.sum) s += "#pragma omp simd reduction(+:a)\n";
      s += fmt::format("        for (int64_t j = {}; j < {}; ++j) {{\n", j_lo, j_hi);
      s += cat(inner, "          ", acc.step("a", v), "\n        }\n", q_end);
    }
    if (split) {
      s += "      part[c] = a;\n      }\n";
      s += cat("      ", acc.type, " a = ", acc.init, ";\n");
      s += fmt::format("      for (int64_t c = 0; c < {}; ++c) a += part[c];\n", chunks);
    }
    s += fmt::format("      {}[o] = {};\n", out, fmt::format(fmt::runtime(acc.final_fmt), "a"));
  } else {
    s += fmt::format("      {} acc[{}];\n", acc.type, tile);
    s += fmt::format("      for (int64_t i = 0; i < kn; ++i) acc[i] = {};\n", acc.init);
    const std::string inner =
        cat(body.compute(offset, "          "), body.store(offset, "          "));
    if (acc.blocked && q_total > kRowBlock) {
      // Rows add into a block sum, and block sums into the total: error grows with
      // kRowBlock + rows / kRowBlock rather than with the row count.
      s += fmt::format("      for (int64_t qb = 0; qb < {0}; qb += {1}) {{\n", q_total, kRowBlock);
      s += fmt::format("      const int64_t qe = qb + {1} < {0} ? qb + {1} : {0};\n", q_total,
                       kRowBlock);
      s += fmt::format("      float blk[{}];\n", tile);
      s += "      for (int64_t i = 0; i < kn; ++i) blk[i] = 0.0f;\n";
      s += "      for (int64_t q = qb; q < qe; ++q) {\n";
      s += "#pragma omp simd\n        for (int64_t i = 0; i < kn; ++i) {\n";
      s += cat(inner, "          ", acc.step("blk[i]", v), "\n        }\n      }\n");
      s += "      for (int64_t i = 0; i < kn; ++i) acc[i] += blk[i];\n      }\n";
    } else {
      s += cat(q_loop, "#pragma omp simd\n        for (int64_t i = 0; i < kn; ++i) {\n");
      s += cat(inner, "          ", acc.step("acc[i]", v), "\n        }\n", q_end);
    }
    const std::string fin = fmt::format(fmt::runtime(acc.final_fmt), "acc[i]");
    s += fmt::format("      for (int64_t i = 0; i < kn; ++i) {}[o * {} + k0 + i] = {};\n", out, kl,
                     fin);
  }
  return s + "    }\n  }\n";
}

}  // namespace keel::cpu::gen
