// Layout, indexing, reduction and contraction op functions; negative axes are normalised here.
#include <fmt/format.h>

#include <algorithm>
#include <numeric>

#include "ir/error.h"
#include "trace/emit.h"
#include "trace/ops.h"

namespace keel {

using detail::emit;

static int64_t axis_of(int64_t axis, const Tensor& x, const SourceLoc& loc, const char* op) {
  try {
    return normalize_axis(axis, x.rank());
  } catch (const Error& e) {
    throw Error(
        fmt::format("[trace] {} at {}: {} (input is {})", op, loc.str(), e.what(), x.type().str()));
  }
}

static Axes axes_of(const Axes& axes, const Tensor& x, const SourceLoc& loc, const char* op) {
  Axes out;
  if (axes.empty()) {
    out.resize(x.rank());
    std::iota(out.begin(), out.end(), 0);
    return out;
  }
  for (int64_t a : axes) out.push_back(axis_of(a, x, loc, op));
  std::sort(out.begin(), out.end());
  return out;
}

Tensor reshape(const Tensor& x, const Shape& shape, SourceLoc loc) {
  Shape s = shape;
  auto hole = std::find(s.begin(), s.end(), -1);
  if (hole != s.end()) {
    int64_t known = 1;
    for (int64_t d : s) known *= d == -1 ? 1 : d;
    if (known == 0 || x.numel() % known != 0) {
      throw Error(fmt::format("[trace] reshape at {}: cannot infer -1 in {} for {}", loc.str(),
                              shape_str(shape), x.type().str()));
    }
    *hole = x.numel() / known;
  }
  if (s == x.shape()) return x;
  return emit(Op::reshape, {x}, {{"shape", s}}, loc);
}

Tensor transpose(const Tensor& x, const Axes& perm, SourceLoc loc) {
  Axes p;
  for (int64_t a : perm) p.push_back(axis_of(a, x, loc, "transpose"));
  return emit(Op::transpose, {x}, {{"perm", p}}, loc);
}

Tensor broadcast_to(const Tensor& x, const Shape& shape, SourceLoc loc) {
  if (x.shape() == shape) return x;
  return emit(Op::broadcast, {x}, {{"shape", shape}}, loc);
}

Tensor slice(const Tensor& x, const Axes& start, const Axes& limit, const Axes& stride,
             SourceLoc loc) {
  Axes st = stride.empty() ? Axes(x.rank(), 1) : stride;
  return emit(Op::slice, {x}, {{"start", start}, {"limit", limit}, {"stride", st}}, loc);
}

Tensor concat(const std::vector<Tensor>& xs, int64_t axis, SourceLoc loc) {
  if (xs.empty()) throw Error(fmt::format("[trace] concat at {}: no inputs", loc.str()));
  int64_t a = axis_of(axis, xs[0], loc, "concat");
  return emit(Op::concat, xs, {{"axis", a}}, loc);
}

Tensor pad(const Tensor& x, const Axes& low, const Axes& high, double value, SourceLoc loc) {
  return emit(Op::pad, {x}, {{"low", low}, {"high", high}, {"value", value}}, loc);
}

Tensor take(const Tensor& operand, const Tensor& indices, int64_t axis, SourceLoc loc) {
  int64_t a = axis_of(axis, operand, loc, "take");
  return emit(Op::gather, {operand, indices}, {{"axis", a}}, loc);
}

Tensor scatter_add(const Tensor& operand, const Tensor& indices, const Tensor& updates,
                   int64_t axis, SourceLoc loc) {
  int64_t a = axis_of(axis, operand, loc, "scatter_add");
  return emit(Op::scatter_add, {operand, indices, updates}, {{"axis", a}}, loc);
}

Tensor one_hot(const Tensor& indices, int64_t depth, DType dtype, SourceLoc loc) {
  return emit(Op::one_hot, {indices}, {{"depth", depth}, {"dtype", dtype}}, loc);
}

static Tensor reduce(Op op, const Tensor& x, const Axes& axes, bool keepdims, SourceLoc loc) {
  Axes a = axes_of(axes, x, loc, op_name(op).data());
  return emit(op, {x}, {{"axes", a}, {"keepdims", int64_t{keepdims}}}, loc);
}

Tensor sum(const Tensor& x, const Axes& axes, bool keepdims, SourceLoc loc) {
  return reduce(Op::reduce_sum, x, axes, keepdims, std::move(loc));
}
Tensor max(const Tensor& x, const Axes& axes, bool keepdims, SourceLoc loc) {
  return reduce(Op::reduce_max, x, axes, keepdims, std::move(loc));
}
Tensor mean(const Tensor& x, const Axes& axes, bool keepdims, SourceLoc loc) {
  return reduce(Op::reduce_mean, x, axes, keepdims, std::move(loc));
}

Tensor argmax(const Tensor& x, int64_t axis, bool keepdims, SourceLoc loc) {
  int64_t a = axis_of(axis, x, loc, "argmax");
  return emit(Op::argmax, {x}, {{"axis", a}, {"keepdims", int64_t{keepdims}}}, loc);
}

Tensor cumsum(const Tensor& x, int64_t axis, bool reverse, SourceLoc loc) {
  int64_t a = axis_of(axis, x, loc, "cumsum");
  return emit(Op::cumsum, {x}, {{"axis", a}, {"reverse", int64_t{reverse}}}, loc);
}

std::pair<Tensor, Tensor> top_k(const Tensor& x, int64_t k, SourceLoc loc) {
  return {emit(Op::top_k_values, {x}, {{"k", k}}, loc),
          emit(Op::top_k_indices, {x}, {{"k", k}}, loc)};
}

Tensor dot_general(const Tensor& a, const Tensor& b, const DotDims& d, SourceLoc loc) {
  return emit(Op::dot_general, {a, b},
              {{"lhs_batch", d.lhs_batch},
               {"rhs_batch", d.rhs_batch},
               {"lhs_contract", d.lhs_contract},
               {"rhs_contract", d.rhs_contract}},
              loc);
}

DotDims matmul_dims(const Tensor& a, const Tensor& b, const SourceLoc& loc) {
  int64_t ra = static_cast<int64_t>(a.rank());
  int64_t rb = static_cast<int64_t>(b.rank());
  if (ra < 2 || rb < 2 || (rb != 2 && rb != ra)) {
    throw Error(
        fmt::format("[trace] matmul at {}: needs a[..., m, k] and b[k, n] or b[..., k, n] "
                    "with a's batch dims; got {} and {}",
                    loc.str(), a.type().str(), b.type().str()));
  }
  if (rb == 2) return {{}, {}, {ra - 1}, {0}};
  Axes batch(ra - 2);
  std::iota(batch.begin(), batch.end(), 0);
  return {batch, batch, {ra - 1}, {ra - 2}};
}

Tensor matmul(const Tensor& a, const Tensor& b, SourceLoc loc) {
  const DotDims dims = matmul_dims(a, b, loc);
  return dot_general(a, b, dims, std::move(loc));
}

Tensor causal_attention(const Tensor& q, const Tensor& k, const Tensor& v, double scale,
                        const Tensor& doc_ids, AttentionLayout layout, SourceLoc loc) {
  std::vector<Tensor> in = {q, k, v};
  if (doc_ids.defined()) in.push_back(doc_ids);
  Attrs attrs{{"scale", scale}};
  if (layout != AttentionLayout::bhtd) attrs.set("layout", attention_layout_name(layout));
  return emit(Op::attention, in, std::move(attrs), loc);
}

Tensor sparse_attention(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& keys,
                        double scale, SourceLoc loc) {
  return emit(Op::sparse_attention, {q, k, v, keys}, Attrs{{"scale", scale}}, loc);
}

Tensor sparse_attention_weights(const Tensor& q, const Tensor& k, const Tensor& keys, double scale,
                                SourceLoc loc) {
  return emit(Op::sparse_attention_weights, {q, k, keys}, Attrs{{"scale", scale}}, loc);
}

}  // namespace keel
