#include "ir/collective.h"

#include <fmt/format.h>

#include "ir/error.h"

namespace keel {
namespace {

[[noreturn]] void fail(const std::string& msg) {
  throw Error(msg);
}

int64_t checked_dim(const TensorType& x, const Attrs& a) {
  const int64_t rank = static_cast<int64_t>(x.shape.size());
  const int64_t dim = a.i("dim");
  if (dim < 0 || dim >= rank) {
    fail(fmt::format("dim {} is outside the input's {} dimensions", dim, rank));
  }
  return dim;
}

}  // namespace

std::string_view reduce_kind_name(ReduceKind k) {
  switch (k) {
    case ReduceKind::sum:
      return "sum";
    case ReduceKind::max:
      return "max";
    case ReduceKind::min:
      return "min";
  }
  return "?";
}

ReduceKind parse_reduce_kind(std::string_view s) {
  if (s == "sum") return ReduceKind::sum;
  if (s == "max") return ReduceKind::max;
  if (s == "min") return ReduceKind::min;
  fail(fmt::format("reduce '{}' is not sum, max or min", s));
}

bool gathers_invariant(const Node& n) {
  return n.op == Op::all_gather && n.attrs.has("invariant") && n.attrs.i("invariant") == 1;
}

TensorType infer_collective(Op op, std::span<const TensorType> in, const Attrs& a) {
  const std::string& axis = a.s("axis");
  const int64_t size = a.i("axis_size");
  if (axis.empty()) fail("a collective needs a mesh axis name");
  if (size < 1) fail(fmt::format("axis_size {} of axis '{}' must be >= 1", size, axis));
  if (op == Op::axis_index) return {DType::i32, {}};
  const TensorType& x = in[0];
  if (x.dtype == DType::boolean) fail("input 0 is bool; collectives take numbers");
  switch (op) {
    case Op::all_reduce:
      parse_reduce_kind(a.s("reduce"));
      return x;
    case Op::pvary:
      return x;
    case Op::all_gather: {
      if (a.has("invariant") && a.i("invariant") != 0 && a.i("invariant") != 1) {
        fail(fmt::format("all_gather's invariant is {}, not 0 or 1", a.i("invariant")));
      }
      TensorType out = x;
      const int64_t dim = checked_dim(x, a);
      if (__builtin_mul_overflow(out.shape[dim], size, &out.shape[dim])) {
        fail("all_gather's result dimension overflows int64");
      }
      return out;
    }
    case Op::reduce_scatter: {
      if (!is_float(x.dtype)) fail("reduce_scatter sums f32 or bf16; cast first");
      TensorType out = x;
      const int64_t dim = checked_dim(x, a);
      if (out.shape[dim] % size != 0) {
        fail(
            fmt::format("reduce_scatter's dim {} has {} entries, not a multiple of axis '{}' "
                        "of size {}",
                        dim, out.shape[dim], axis, size));
      }
      out.shape[dim] /= size;
      return out;
    }
    case Op::all_to_all: {
      const int64_t dim = checked_dim(x, a);
      if (x.shape[dim] % size != 0) {
        fail(fmt::format(
            "all_to_all's dim {} has {} entries, not a multiple of axis '{}' of size {}", dim,
            x.shape[dim], axis, size));
      }
      return x;
    }
    default:
      break;
  }
  fail("unknown collective");
}

bool exchanges_with_peers(const Graph& g) {
  for (const Node& n : g.nodes()) {
    if (op_info(n.op).kind == OpKind::Collective && n.op != Op::axis_index &&
        n.attrs.i("axis_size") > 1) {
      return true;
    }
    if (n.op == Op::scan && exchanges_with_peers(n.attrs.graph("body"))) return true;
  }
  return false;
}

namespace {

void add_traffic(const Graph& g, int64_t times, std::map<std::string, CollectiveTraffic>& out) {
  for (const Node& n : g.nodes()) {
    if (n.op == Op::scan) {
      add_traffic(n.attrs.graph("body"), times * n.attrs.i("length"), out);
      continue;
    }
    if (op_info(n.op).kind != OpKind::Collective || n.op == Op::axis_index ||
        n.attrs.i("axis_size") <= 1) {
      continue;
    }
    CollectiveTraffic& t = out[std::string(op_name(n.op))];
    t.calls += times;
    t.bytes += times * g.node(n.inputs.at(0)).type.bytes();
  }
}

}  // namespace

std::map<std::string, CollectiveTraffic> collective_traffic(const Graph& g) {
  std::map<std::string, CollectiveTraffic> out;
  add_traffic(g, 1, out);
  return out;
}

}  // namespace keel
