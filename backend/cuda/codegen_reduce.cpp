// Reduction kernels: one block per output element (grid-stride over outputs); its threads walk
// the reduced elements in a fixed stride, computing the fused producers and storing those read
// later, then combine through warp shuffles and shared memory in a fixed tree, so every run adds
// in the same order. Float sums accumulate in float, integer sums in uint64 (wrapping as the
// reference's); max propagates NaN; mean divides at the end.
#include <algorithm>

#include "backend/c_source/c_source.h"
#include "backend/cuda/codegen.h"
#include "backend/cuda/codegen_body.h"

namespace keel::cuda::gen {
namespace {

// How one output accumulates: C type, start value, combine of two partials ({0}, {1}) and the
// stored value ({0}: the accumulator).
struct Acc {
  std::string type, init, combine, final;
};

Acc make_acc(const Node& r, int64_t count) {
  const DType t = r.type.dtype;
  const bool fl = is_float(t);
  if (r.op == Op::reduce_max) {
    const char* init = fl                ? "__uint_as_float(0xff800000u)"
                       : t == DType::i32 ? "(-2147483647 - 1)"
                                         : "(-9223372036854775807LL - 1)";
    return {std::string(c_source::compute_type(t)), init,
            fl ? "keel_fmax({0}, {1})" : "({1} > {0} ? {1} : {0})", c_source::store_expr(t, "{0}")};
  }
  const bool mean = r.op == Op::reduce_mean;
  if (fl) {
    const std::string fin = !mean        ? "{0}"
                            : count == 0 ? "keel_nanf()"
                                         : fmt::format("float(double({{0}}) / {}.0)", count);
    return {"float", "0.0f", "({0} + {1})", c_source::store_expr(t, fin)};
  }
  // Integers sum in uint64: wraps like the reference's int64 sum, without signed overflow.
  const std::string v = !mean        ? "int64_t({0})"
                        : count == 0 ? "int64_t(0)"
                                     : fmt::format("(int64_t({{0}}) / {})", count);
  return {"uint64_t", "0", "({0} + {1})", t == DType::i32 ? "int32_t(uint32_t(" + v + "))" : v};
}

std::string fill(const std::string& f, const std::string& a, const std::string& b = "") {
  return fmt::format(fmt::runtime(f), a, b);
}

}  // namespace

std::string emit_reduce(Kernel& k, const c_source::Unit& u) {
  const Graph& g = k.graph();
  const Node& r = g.node(u.root);
  const NodeId in = r.inputs[0];
  const Shape& in_shape = g.node(in).type.shape;
  const int64_t n_out = numel(r.type.shape);
  std::vector<bool> reduced(in_shape.size(), false);
  int64_t count = 1;
  for (int64_t a : r.attrs.ints("axes")) {
    reduced[static_cast<size_t>(a)] = true;
    count *= in_shape[static_cast<size_t>(a)];
  }
  // A warp when each output reduces few elements: most of a 256-thread block would idle.
  const int32_t block = count <= 32 ? 32 : kBlockThreads;
  k.launch().block = block;
  k.launch().what = fmt::format("reduction {}", c_source::describe(g, u.root));
  k.launch().synchronizes = true;
  if (n_out == 0) {
    k.launch().grid = 0;
    return "";
  }
  const Acc acc = make_acc(r, count);
  Body body(k, u);
  const c_source::Nest nest = c_source::build_nest(in_shape, reduced, body.accesses());
  std::vector<size_t> kept, over;
  for (size_t d = 0; d < nest.size.size(); ++d) (nest.reduced[d] ? over : kept).push_back(d);
  std::string s;
  const std::vector<std::string> kept_idx = c_source::split_index(nest, kept, "o");
  const std::vector<std::string> over_idx = c_source::split_index(nest, over, "q");
  std::vector<std::string> offset;
  for (const auto& strides : nest.strides) {
    const std::string a = kept.empty() ? "0" : c_source::offset_expr(strides, kept, kept_idx);
    const std::string b = over.empty() ? "0" : c_source::offset_expr(strides, over, over_idx);
    offset.push_back(a == "0" ? b : b == "0" ? a : fmt::format("({}) + ({})", a, b));
  }
  // The reduced value: computed in the kernel, or loaded.
  const std::string value = fmt::format("t{}", in);
  const std::string hoisted = body.hoisted("  ");
  std::string step = body.compute(offset, "      ") + body.store(offset, "      ");
  step += fmt::format("      acc = {};\n", fill(acc.combine, "acc", value));
  const std::string out = k.pointer(u.root, true);
  s += fmt::format("  __shared__ {} partial[{}];\n", acc.type, std::max(1, block / 32));
  s += hoisted;
  s += fmt::format(
      "  for (int64_t o = blockIdx.x; o < {}LL; o += gridDim.x) {{\n"
      "    {} acc = {};\n"
      "    for (int64_t q = threadIdx.x; q < {}LL; q += {}) {{\n",
      n_out, acc.type, acc.init, count, block);
  s += step + "    }\n";
  // Lanes combine in a butterfly, warps through shared memory; thread 0 holds the result.
  // Each lane shuffles exactly once per step: a combine may name its operand twice.
  const std::string shuffle =
      fmt::format("const {} other = __shfl_xor_sync(0xffffffffu, acc, m); acc = {};", acc.type,
                  fill(acc.combine, "acc", "other"));
  s += "    for (int m = 16; m > 0; m >>= 1) {\n";
  s += fmt::format("      {}\n", shuffle);
  s += "    }\n";
  if (block > 32) {
    s += "    if ((threadIdx.x & 31) == 0) partial[threadIdx.x >> 5] = acc;\n";
    s += "    __syncthreads();\n";
    s += "    if (threadIdx.x < 32) {\n";
    s += fmt::format("      acc = threadIdx.x < {} ? partial[threadIdx.x] : {};\n", block / 32,
                     acc.init);
    s += "      for (int m = 16; m > 0; m >>= 1) {\n";
    s += fmt::format("        {}\n", shuffle);
    s += "      }\n    }\n";
  }
  s += fmt::format("    if (threadIdx.x == 0) {}[o] = {};\n", out, fill(acc.final, "acc"));
  if (block > 32) s += "    __syncthreads();  // partial is reused by the next output\n";
  s += "  }\n";
  k.launch().grid = std::min(n_out, kMaxGrid);
  return fmt::format("{} {{\n{}}}\n\n", k.signature(), s);
}

}  // namespace keel::cuda::gen
