// Kernels that index: one thread per output element, its coordinates split from the flat
// index, each input read where the op's rule points (iota, rng_uniform, one_hot, pad, concat,
// gather). Inputs are stored row-major: the CUDA target folds no view into these readers.
#include "backend/c_source/c_source.h"
#include "backend/cuda/codegen.h"
#include "backend/cuda/codegen_internal.h"

namespace keel::cuda::gen {
namespace {

// Declares o0..o<r-1>, the coordinates of flat index i over `shape`.
std::string coordinates(const Shape& shape, const std::string& indent) {
  std::string s;
  int64_t below = 1;
  for (size_t d = shape.size(); d-- > 0;) {
    s += fmt::format("{}const int64_t o{} = (i / {}) % {};\n", indent, d, below, shape[d]);
    below *= shape[d];
  }
  return s;
}

// sum idx[d] * row-major stride of `shape`; "0" for a scalar.
std::string row_major(const std::vector<std::string>& idx, const Shape& shape) {
  std::string s;
  const std::vector<int64_t> st = passes::row_major_strides(shape);
  for (size_t d = 0; d < idx.size(); ++d) {
    if (shape[d] == 1) continue;
    s += fmt::format("{}{} * {}", s.empty() ? "" : " + ", idx[d], st[d]);
  }
  return s.empty() ? "0" : s;
}

std::vector<std::string> names(size_t from, size_t to) {
  std::vector<std::string> out;
  for (size_t d = from; d < to; ++d) out.push_back(fmt::format("o{}", d));
  return out;
}

// `value` (a double attribute) in `t`, as a literal of its compute type.
std::string value_literal(double value, DType t) {
  return c_source::literal(Array::full({}, value, t), 0);
}

// Where element `idx` of a concat operand or output `id` is: a view's strides, else row-major.
std::string place_of(const passes::FusionPlan& f, const Graph& g, NodeId id,
                     const std::vector<std::string>& idx) {
  const Shape& shape = g.node(id).type.shape;
  if (!f.is_view(id) || f.views[id].contiguous) return row_major(idx, shape);
  std::string s;
  const std::vector<int64_t>& st = f.views[id].strides;
  for (size_t d = 0; d < idx.size(); ++d) {
    if (st[d] == 0 || shape[d] == 1) continue;
    s += fmt::format("{}{} * {}", s.empty() ? "" : " + ", idx[d], st[d]);
  }
  return s.empty() ? "0" : s;
}

}  // namespace

bool has_index_kernel(Op op) {
  return op == Op::iota || op == Op::rng_uniform || op == Op::one_hot || op == Op::pad ||
         op == Op::concat || op == Op::gather || op == Op::scatter_add;
}

std::string emit_index_kernel(Kernel& k, NodeId id) {
  const Graph& g = k.graph();
  const Node& n = g.node(id);
  const Shape& os = n.type.shape;
  const DType t = n.type.dtype;
  const int64_t total = numel(os);
  k.launch().block = kBlockThreads;
  k.launch().what = c_source::describe(g, id);
  if (total == 0) {
    k.launch().grid = 0;
    return "";
  }
  std::string in = coordinates(os, "    ");
  const std::vector<std::string> o = names(0, os.size());
  std::string value;  // in compute type
  switch (n.op) {
    case Op::iota: {
      const std::string at = fmt::format("o{}", n.attrs.i("dim"));
      value = is_float(t) ? fmt::format("float(double({}))", at)
                          : fmt::format("{}({})", c_source::storage_type(t), at);
      break;
    }
    case Op::rng_uniform: {
      const std::string seed = k.pointer(n.inputs[0], false);
      const std::string counter = k.pointer(n.inputs[1], false);
      value = fmt::format("keel_rng_uniform01(uint64_t({}[0]), uint64_t({}[0]), uint64_t(i))", seed,
                          counter);
      break;
    }
    case Op::one_hot: {
      const NodeId x = n.inputs[0];
      const std::string idx = k.pointer(x, false);
      const std::vector<std::string> outer = names(0, os.size() - 1);
      value = fmt::format("(int64_t({}[{}]) == o{} ? {} : {})", idx,
                          row_major(outer, g.node(x).type.shape), os.size() - 1,
                          value_literal(1, t), value_literal(0, t));
      break;
    }
    case Op::pad: {
      const NodeId x = n.inputs[0];
      const Shape& xs = g.node(x).type.shape;
      const std::vector<int64_t>& low = n.attrs.ints("low");
      std::vector<std::string> j;
      std::string inside = "true";
      for (size_t d = 0; d < xs.size(); ++d) {
        j.push_back(fmt::format("j{}", d));
        in += fmt::format("    const int64_t j{} = o{} - {};\n", d, d, low[d]);
        inside += fmt::format(" && j{0} >= 0 && j{0} < {1}", d, xs[d]);
      }
      const std::string src = k.pointer(x, false);
      value = fmt::format("({} ? {} : {})", inside,
                          c_source::load_expr(t, fmt::format("{}[{}]", src, row_major(j, xs))),
                          value_literal(n.attrs.f("value"), t));
      break;
    }
    case Op::gather: {
      const NodeId x = n.inputs[0], ids = n.inputs[1];
      const Shape &xs = g.node(x).type.shape, &is = g.node(ids).type.shape;
      const auto axis = static_cast<size_t>(n.attrs.i("axis"));
      if (xs[axis] == 0) fail("internal: {} gathers from an empty axis", c_source::describe(g, id));
      const std::vector<std::string> at = names(axis, axis + is.size());
      in += fmt::format("    int64_t g = int64_t({}[{}]);\n", k.pointer(ids, false),
                        row_major(at, is));
      in += fmt::format("    g = g < 0 ? 0 : g > {0} ? {0} : g;\n", xs[axis] - 1);
      std::vector<std::string> src = names(0, axis);
      src.push_back("g");
      for (size_t d = axis + is.size(); d < os.size(); ++d) src.push_back(fmt::format("o{}", d));
      value =
          c_source::load_expr(t, fmt::format("{}[{}]", k.pointer(x, false), row_major(src, xs)));
      break;
    }
    case Op::scatter_add: {
      // Each output element sums, in index order, the updates whose clamped index lands on it:
      // no atomics, so every run adds in the same order.
      const NodeId x = n.inputs[0], ids = n.inputs[1], up = n.inputs[2];
      const Shape &xs = g.node(x).type.shape, &is = g.node(ids).type.shape;
      const Shape& us = g.node(up).type.shape;
      const auto axis = static_cast<size_t>(n.attrs.i("axis"));
      const std::string acc_type = is_float(t) ? "float" : "uint64_t";
      const std::string v = c_source::load_expr(t, fmt::format("{}[i]", k.pointer(x, false)));
      in += fmt::format("    {} acc = {}({});\n", acc_type, acc_type, v);
      in += fmt::format("    for (int64_t p = 0; p < {}LL; ++p) {{\n", numel(is));
      in += fmt::format("      int64_t g = int64_t({}[p]);\n", k.pointer(ids, false));
      in += fmt::format("      g = g < 0 ? 0 : g > {0} ? {0} : g;\n", xs[axis] - 1);
      // The update at (o[:axis], p's coordinates over the indices, o[axis+1:]).
      std::vector<std::string> at = names(0, axis);
      int64_t below = 1;
      std::vector<std::string> p_idx(is.size());
      for (size_t d = is.size(); d-- > 0;) {
        p_idx[d] = fmt::format("((p / {}) % {})", below, is[d]);
        below *= is[d];
      }
      at.insert(at.end(), p_idx.begin(), p_idx.end());
      for (size_t d = axis + 1; d < os.size(); ++d) at.push_back(fmt::format("o{}", d));
      const std::string u =
          c_source::load_expr(t, fmt::format("{}[{}]", k.pointer(up, false), row_major(at, us)));
      in += fmt::format("      if (g == o{}) acc += {}({});\n    }}\n", axis, acc_type,
                        is_float(t) ? u : fmt::format("int64_t({})", u));
      value = is_float(t)       ? std::string("acc")
              : t == DType::i32 ? std::string("int32_t(uint32_t(acc))")
                                : std::string("int64_t(acc)");
      break;
    }
    case Op::concat: {
      // Each operand a producer stored in place (concat_in_place) is already there.
      const auto axis = static_cast<size_t>(n.attrs.i("axis"));
      const passes::FusionPlan& f = k.fusion();
      const std::string out = k.pointer(id, true);
      std::string body;
      int64_t start = 0;
      for (NodeId x : n.inputs) {
        const Shape& xs = g.node(x).type.shape;
        const int64_t end = start + xs[axis];
        if (xs[axis] > 0 && f.storage_of(x) != f.storage_of(id)) {
          std::vector<std::string> idx = o;
          idx[axis] = fmt::format("(o{} - {})", axis, start);
          body += fmt::format("    if (o{0} >= {1} && o{0} < {2}) {3}[{4}] = {5}[{6}];\n", axis,
                              start, end, out, place_of(f, g, id, o), k.pointer(x, false),
                              place_of(f, g, x, idx));
        }
        start = end;
      }
      if (body.empty()) {  // every operand was written in place
        k.launch().grid = 0;
        return "";
      }
      return loop_kernel(k, total, "", in + body);
    }
    default:
      fail("internal: {} has no index kernel", c_source::describe(g, id));
  }
  in += fmt::format("    {}[i] = {};\n", k.pointer(id, true), c_source::store_expr(t, value));
  return loop_kernel(k, total, "", in);
}

}  // namespace keel::cuda::gen
