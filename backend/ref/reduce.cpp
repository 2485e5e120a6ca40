// Reductions: reduce_sum / reduce_max / reduce_mean over a set of axes, and argmax over one.
// Floats accumulate in double and round once on store; integers accumulate in int64, wrapping.
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "backend/ref/indexing.h"
#include "backend/ref/kernels.h"

namespace keel::ref {
namespace {

Array reduce(const Node& node, const Array& x) {
  const auto& axes = node.attrs.ints("axes");
  const bool keep = node.attrs.i("keepdims") != 0;
  const size_t rank = x.shape().size();
  std::vector<bool> reduced(rank, false);
  int64_t count = 1;  // elements folded into each output
  for (int64_t a : axes) {
    reduced[a] = true;
    count *= x.shape()[a];
  }
  Array out(node.type.dtype, node.type.shape);
  const int64_t n = out.numel();
  const bool fl = is_float(out.dtype());
  const bool is_max = node.op == Op::reduce_max;
  // Empty reductions keep these starting values: sum 0, max -inf (int: lowest).
  std::vector<double> facc(n, is_max ? -INFINITY : 0.0);
  const int64_t lowest = out.dtype() == DType::i32 ? std::numeric_limits<int32_t>::min()
                                                   : std::numeric_limits<int64_t>::min();
  std::vector<int64_t> iacc(n, is_max ? lowest : 0);

  Index out_idx;
  for_each_index(x.shape(), [&](const Index& idx, int64_t i) {
    out_idx.clear();
    for (size_t d = 0; d < rank; ++d) {
      if (!reduced[d]) {
        out_idx.push_back(idx[d]);
      } else if (keep) {
        out_idx.push_back(0);
      }
    }
    const int64_t o = flat_offset(out_idx, out.shape());
    if (fl) {
      facc[o] = is_max ? float_max(facc[o], x.get_f64(i)) : facc[o] + x.get_f64(i);
    } else {
      iacc[o] = is_max ? std::max(iacc[o], x.get_i64(i)) : wrap_add(iacc[o], x.get_i64(i));
    }
  });

  for (int64_t o = 0; o < n; ++o) {
    if (fl) {
      // Mean of nothing is 0/0 = NaN, as docs/ops.md asks.
      double v = node.op == Op::reduce_mean ? facc[o] / static_cast<double>(count) : facc[o];
      out.set_f64(o, v);
    } else if (node.op == Op::reduce_mean) {
      out.set_i64(o, count == 0 ? 0 : iacc[o] / count);  // truncates toward zero
    } else {
      out.set_i64(o, iacc[o]);  // an i32 sum wraps to 32 bits here
    }
  }
  return out;
}

// True when `v` should replace the current best: strictly larger, with NaN above everything
// (so the first NaN wins and ties keep the lowest index).
bool beats(const Array& x, int64_t v, int64_t best) {
  if (is_float(x.dtype())) {
    double a = x.get_f64(v), b = x.get_f64(best);
    if (std::isnan(b)) return false;
    return std::isnan(a) || a > b;
  }
  return x.get_i64(v) > x.get_i64(best);
}

Array argmax(const Node& node, const Array& x) {
  const AxisSplit s = split_at(x.shape(), node.attrs.i("axis"));
  Array out(node.type.dtype, node.type.shape);  // same (outer, inner) layout, keepdims or not
  for (int64_t o = 0; o < s.outer; ++o) {
    for (int64_t k = 0; k < s.inner; ++k) {
      int64_t best = 0;
      for (int64_t j = 1; j < s.n; ++j) {
        if (beats(x, s.at(o, j, k), s.at(o, best, k))) best = j;
      }
      out.set_i64(o * s.inner + k, best);
    }
  }
  return out;
}

}  // namespace

Array eval_reduce(const Node& node, const Array& x) {
  switch (node.op) {
    case Op::reduce_sum:
    case Op::reduce_max:
    case Op::reduce_mean:
      return reduce(node, x);
    case Op::argmax:
      return argmax(node, x);
    default:
      fail(node, "is not a reduction");
  }
}

}  // namespace keel::ref
