// Type rules for every op; the op semantics are documented in docs/ops.md.
#include <fmt/format.h>

#include <algorithm>

#include "ir/attention.h"
#include "ir/collective.h"
#include "ir/error.h"
#include "ir/graph.h"
#include "ir/scan.h"
#include "ir/sparse_attention.h"

namespace keel {
namespace {

[[noreturn]] void fail(std::string msg) {
  throw Error(std::move(msg));
}

void require(bool ok, std::string_view msg) {
  if (!ok) fail(std::string(msg));
}

void require_numeric(const TensorType& t, size_t i) {
  if (t.dtype == DType::boolean) fail(fmt::format("input {} is bool; expected a number type", i));
}

void require_float(const TensorType& t, size_t i) {
  if (!is_float(t.dtype)) {
    fail(fmt::format("input {} is {}; expected f32 or bf16 (cast first)", i, dtype_name(t.dtype)));
  }
}

void require_int(const TensorType& t, std::string_view what) {
  if (!is_int(t.dtype))
    fail(fmt::format("{} is {}; expected i32 or i64", what, dtype_name(t.dtype)));
}

void require_same_dtype(std::span<const TensorType> in, size_t first = 0) {
  for (size_t i = first + 1; i < in.size(); ++i) {
    if (in[i].dtype != in[first].dtype) {
      fail(fmt::format("input {} is {} but input {} is {}; cast one of them", first,
                       dtype_name(in[first].dtype), i, dtype_name(in[i].dtype)));
    }
  }
}

// Dimension arithmetic on attribute values: overflow is a type error, not undefined behaviour.
int64_t dim_add(int64_t a, int64_t b) {
  int64_t r = 0;
  if (__builtin_add_overflow(a, b, &r)) fail("a dimension overflows int64");
  return r;
}

int64_t checked_numel(const Shape& s) {
  int64_t n = 1;
  for (int64_t d : s) {
    if (__builtin_mul_overflow(n, d, &n)) {
      fail(fmt::format("shape {} has too many elements", shape_str(s)));
    }
  }
  return n;
}

void require_dims_nonneg(const Shape& s) {
  for (int64_t d : s)
    require(d >= 0, fmt::format("shape {} has a negative dimension", shape_str(s)));
}

// Axes must be distinct and in [0, rank).
void require_axes(const std::vector<int64_t>& axes, size_t rank, std::string_view what) {
  std::vector<bool> seen(rank, false);
  for (int64_t a : axes) {
    if (a < 0 || a >= static_cast<int64_t>(rank)) {
      fail(fmt::format("{} axis {} is out of range for rank {}", what, a, rank));
    }
    if (seen[a]) fail(fmt::format("{} axis {} is listed twice", what, a));
    seen[a] = true;
  }
}

int64_t single_axis(const Attrs& a, const TensorType& t) {
  int64_t axis = a.i("axis");
  require(axis >= 0 && axis < static_cast<int64_t>(t.shape.size()),
          fmt::format("axis {} is out of range for rank {}", axis, t.shape.size()));
  return axis;
}

TensorType infer_reduce(std::span<const TensorType> in, const Attrs& a) {
  require_numeric(in[0], 0);
  const auto& axes = a.ints("axes");
  require_axes(axes, in[0].shape.size(), "reduction");
  bool keep = a.i("keepdims") != 0;
  Shape out;
  for (size_t d = 0; d < in[0].shape.size(); ++d) {
    bool reduced = std::find(axes.begin(), axes.end(), static_cast<int64_t>(d)) != axes.end();
    if (!reduced) {
      out.push_back(in[0].shape[d]);
    } else if (keep) {
      out.push_back(1);
    }
  }
  return {in[0].dtype, out};
}

TensorType infer_dot(std::span<const TensorType> in, const Attrs& a) {
  const auto& lb = a.ints("lhs_batch");
  const auto& rb = a.ints("rhs_batch");
  const auto& lc = a.ints("lhs_contract");
  const auto& rc = a.ints("rhs_contract");
  require_same_dtype(in);
  require_numeric(in[0], 0);
  // As jax.lax.dot_general's preferred_element_type: bf16 operands, f32 sums and result.
  DType result = in[0].dtype;
  if (const AttrValue* pref = a.find("preferred_element_type")) {
    const DType* t = std::get_if<DType>(pref);
    require(t != nullptr, "preferred_element_type is not a dtype");
    require(*t == in[0].dtype || (*t == DType::f32 && in[0].dtype == DType::bf16),
            fmt::format("preferred_element_type {} for {} operands; expected f32 for bf16 "
                        "operands, or the operands' own type",
                        dtype_name(*t), dtype_name(in[0].dtype)));
    result = *t;
  }
  const Shape& ls = in[0].shape;
  const Shape& rs = in[1].shape;
  require(lb.size() == rb.size(), "lhs_batch and rhs_batch differ in length");
  require(lc.size() == rc.size(), "lhs_contract and rhs_contract differ in length");
  std::vector<int64_t> lall(lb), rall(rb);
  lall.insert(lall.end(), lc.begin(), lc.end());
  rall.insert(rall.end(), rc.begin(), rc.end());
  require_axes(lall, ls.size(), "lhs");
  require_axes(rall, rs.size(), "rhs");
  for (size_t i = 0; i < lb.size(); ++i) {
    require(ls[lb[i]] == rs[rb[i]],
            fmt::format("batch dimension {}: lhs {} has {} but rhs {} has {}", i, shape_str(ls),
                        ls[lb[i]], shape_str(rs), rs[rb[i]]));
  }
  for (size_t i = 0; i < lc.size(); ++i) {
    require(ls[lc[i]] == rs[rc[i]],
            fmt::format("contracting dimension {}: lhs {} has {} but rhs {} has {}", i,
                        shape_str(ls), ls[lc[i]], shape_str(rs), rs[rc[i]]));
  }
  Shape out;
  for (int64_t d : lb) out.push_back(ls[d]);
  for (size_t d = 0; d < ls.size(); ++d) {
    if (std::find(lall.begin(), lall.end(), static_cast<int64_t>(d)) == lall.end())
      out.push_back(ls[d]);
  }
  for (size_t d = 0; d < rs.size(); ++d) {
    if (std::find(rall.begin(), rall.end(), static_cast<int64_t>(d)) == rall.end())
      out.push_back(rs[d]);
  }
  return {result, out};
}

// Shape of gather's output and of scatter_add's updates.
Shape indexed_shape(const Shape& operand, const Shape& indices, int64_t axis) {
  Shape out(operand.begin(), operand.begin() + axis);
  out.insert(out.end(), indices.begin(), indices.end());
  out.insert(out.end(), operand.begin() + axis + 1, operand.end());
  return out;
}

TensorType infer_layout(Op op, std::span<const TensorType> in, const Attrs& a) {
  const TensorType& x = in[0];
  const size_t rank = x.shape.size();
  switch (op) {
    case Op::reshape: {
      const Shape& s = a.ints("shape");
      require_dims_nonneg(s);
      int64_t from = checked_numel(x.shape), to = checked_numel(s);
      require(from == to, fmt::format("cannot reshape {} ({} elements) to {} ({} elements)",
                                      shape_str(x.shape), from, shape_str(s), to));
      return {x.dtype, s};
    }
    case Op::transpose: {
      const auto& perm = a.ints("perm");
      require(perm.size() == rank,
              fmt::format("perm has {} entries for rank {}", perm.size(), rank));
      require_axes(perm, rank, "perm");
      Shape out(rank);
      for (size_t i = 0; i < rank; ++i) out[i] = x.shape[perm[i]];
      return {x.dtype, out};
    }
    case Op::broadcast: {
      const Shape& s = a.ints("shape");
      require_dims_nonneg(s);
      require(broadcastable_to(x.shape, s),
              fmt::format("shape {} does not broadcast to {}", shape_str(x.shape), shape_str(s)));
      return {x.dtype, s};
    }
    case Op::slice: {
      const auto& start = a.ints("start");
      const auto& limit = a.ints("limit");
      const auto& stride = a.ints("stride");
      require(start.size() == rank && limit.size() == rank && stride.size() == rank,
              fmt::format("start, limit and stride need {} entries each", rank));
      Shape out(rank);
      for (size_t d = 0; d < rank; ++d) {
        require(0 <= start[d] && start[d] <= limit[d] && limit[d] <= x.shape[d] && stride[d] >= 1,
                fmt::format("dimension {}: need 0 <= start {} <= limit {} <= size {} and stride {} "
                            ">= 1",
                            d, start[d], limit[d], x.shape[d], stride[d]));
        out[d] = (limit[d] - start[d]) / stride[d] + ((limit[d] - start[d]) % stride[d] != 0);
      }
      return {x.dtype, out};
    }
    case Op::concat: {
      require(rank >= 1, "cannot concatenate scalars; reshape to rank 1 first");
      int64_t axis = single_axis(a, x);
      require_same_dtype(in);
      Shape out = x.shape;
      out[axis] = 0;
      for (size_t i = 0; i < in.size(); ++i) {
        Shape s = in[i].shape;
        require(s.size() == rank,
                fmt::format("input {} has rank {}; expected {}", i, s.size(), rank));
        out[axis] = dim_add(out[axis], s[axis]);
        s[axis] = x.shape[axis];
        require(s == x.shape, fmt::format("input {} has shape {}, which differs from {} outside "
                                          "axis {}",
                                          i, shape_str(in[i].shape), shape_str(x.shape), axis));
      }
      return {x.dtype, out};
    }
    case Op::pad: {
      const auto& lo = a.ints("low");
      const auto& hi = a.ints("high");
      a.f("value");
      require(lo.size() == rank && hi.size() == rank,
              fmt::format("low and high need {} entries each", rank));
      Shape out(rank);
      for (size_t d = 0; d < rank; ++d) {
        require(lo[d] >= 0 && hi[d] >= 0,
                fmt::format("dimension {}: padding must be >= 0 (got {}, {})", d, lo[d], hi[d]));
        out[d] = dim_add(dim_add(x.shape[d], lo[d]), hi[d]);
      }
      return {x.dtype, out};
    }
    default:
      break;
  }
  fail("not a layout op");
}

TensorType infer_index(Op op, std::span<const TensorType> in, const Attrs& a) {
  switch (op) {
    case Op::gather: {
      require(!in[0].shape.empty(), "operand must have rank >= 1");
      int64_t axis = single_axis(a, in[0]);
      require_int(in[1], "indices");
      Shape out = indexed_shape(in[0].shape, in[1].shape, axis);
      require(in[0].shape[axis] > 0 || numel(out) == 0,
              fmt::format("cannot gather from axis {} of size 0", axis));
      return {in[0].dtype, out};
    }
    case Op::scatter_add: {
      require(!in[0].shape.empty(), "operand must have rank >= 1");
      int64_t axis = single_axis(a, in[0]);
      require_int(in[1], "indices");
      require_numeric(in[0], 0);
      require(in[2].dtype == in[0].dtype,
              fmt::format("updates are {} but operand is {}", dtype_name(in[2].dtype),
                          dtype_name(in[0].dtype)));
      Shape want = indexed_shape(in[0].shape, in[1].shape, axis);
      require(in[2].shape == want, fmt::format("updates have shape {}; expected {}",
                                               shape_str(in[2].shape), shape_str(want)));
      return in[0];
    }
    case Op::one_hot: {
      require_int(in[0], "indices");
      int64_t depth = a.i("depth");
      require(depth >= 0, "depth must be >= 0");
      Shape out = in[0].shape;
      out.push_back(depth);
      return {a.dtype("dtype"), out};
    }
    default:
      break;
  }
  fail("not an index op");
}

}  // namespace

TensorType infer_type(Op op, std::span<const TensorType> in, const Attrs& a) {
  const OpInfo& info = op_info(op);
  int n = static_cast<int>(in.size());
  if (n < info.min_inputs || (info.max_inputs >= 0 && n > info.max_inputs)) {
    fail(fmt::format("takes {}{} inputs; got {}", info.min_inputs,
                     info.max_inputs < 0 ? " or more" : "", n));
  }
  switch (info.kind) {
    case OpKind::Leaf:
      if (op == Op::constant) {
        const Array& v = a.array("value");
        return {v.dtype(), v.shape()};
      }
      if (op == Op::iota) {
        Shape s = a.ints("shape");
        require_dims_nonneg(s);
        DType t = a.dtype("dtype");
        require(t != DType::boolean, "iota cannot be bool");
        require(a.i("dim") >= 0 && a.i("dim") < static_cast<int64_t>(s.size()),
                fmt::format("dim {} is out of range for shape {}", a.i("dim"), shape_str(s)));
        return {t, s};
      }
      fail("parameters carry their own type");
    case OpKind::Random: {
      for (size_t i = 0; i < 2; ++i) {
        require(in[i].dtype == DType::i64 && in[i].shape.empty(),
                fmt::format("input {} ({}) must be an i64 scalar (seed, counter)", i, in[i].str()));
      }
      Shape s = a.ints("shape");
      require_dims_nonneg(s);
      DType t = a.dtype("dtype");
      require(is_float(t), "rng_uniform produces f32 or bf16");
      return {t, s};
    }
    case OpKind::Unary:
      if (op == Op::neg || op == Op::abs) {
        require_numeric(in[0], 0);
      } else if (op == Op::pvary) {
        return infer_collective(op, in, a);  // the axis attributes
      } else if (op != Op::stop_gradient) {
        require_float(in[0], 0);
      }
      return in[0];
    case OpKind::Binary:
      require_same_dtype(in);
      require_numeric(in[0], 0);
      if (op == Op::pow) require_float(in[0], 0);
      return {in[0].dtype, broadcast_shapes(in[0].shape, in[1].shape)};
    case OpKind::Compare: {
      const std::string& dir = a.s("direction");
      require(parse_compare(dir).has_value(),
              fmt::format("direction '{}' is not one of eq, ne, lt, le, gt, ge", dir));
      require_same_dtype(in);
      return {DType::boolean, broadcast_shapes(in[0].shape, in[1].shape)};
    }
    case OpKind::Select:
      require(in[0].dtype == DType::boolean,
              fmt::format("predicate is {}; expected bool", dtype_name(in[0].dtype)));
      require_same_dtype(in, 1);
      return {in[1].dtype,
              broadcast_shapes(broadcast_shapes(in[0].shape, in[1].shape), in[2].shape)};
    case OpKind::Cast:
      return {a.dtype("dtype"), in[0].shape};
    case OpKind::Layout:
      return infer_layout(op, in, a);
    case OpKind::Index:
      return infer_index(op, in, a);
    case OpKind::Reduce:
      if (op == Op::argmax) {
        require_numeric(in[0], 0);
        int64_t axis = single_axis(a, in[0]);
        require(in[0].shape[axis] > 0, "argmax over an empty axis");
        Shape out = in[0].shape;
        if (a.i("keepdims") != 0) {
          out[axis] = 1;
        } else {
          out.erase(out.begin() + axis);
        }
        return {DType::i64, out};
      }
      return infer_reduce(in, a);
    case OpKind::Cumulative:
      require_numeric(in[0], 0);
      single_axis(a, in[0]);
      a.i("reverse");
      return in[0];
    case OpKind::TopK: {
      require_numeric(in[0], 0);
      require(!in[0].shape.empty(), "top_k needs rank >= 1");
      int64_t k = a.i("k");
      int64_t last = in[0].shape.back();
      require(k >= 1 && k <= last, fmt::format("k = {} must be in [1, {}]", k, last));
      Shape out = in[0].shape;
      out.back() = k;
      return {op == Op::top_k_values ? in[0].dtype : DType::i64, out};
    }
    case OpKind::Contraction:
      return infer_dot(in, a);
    case OpKind::Attention:
      return infer_attention(op, in, a);
    case OpKind::SparseAttention:
      return infer_sparse_attention(op, in, a);
    case OpKind::Collective:
      return infer_collective(op, in, a);
    case OpKind::Scan:
      if (op == Op::scan) return infer_scan(in, a);
      fail("scan_result takes its type from its scan (Graph::emit and the verifier look it up)");
  }
  fail("unknown op");
}

}  // namespace keel
