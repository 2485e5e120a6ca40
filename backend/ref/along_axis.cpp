// Ops that walk one axis in order: cumsum and top_k (the scan loop is interpreter.cpp's).
#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "backend/ref/indexing.h"
#include "backend/ref/kernels.h"

namespace keel::ref {

// Inclusive prefix sums; the running total stays in double / int64 and each output rounds once.
Array eval_cumsum(const Node& node, const Array& x) {
  const AxisSplit s = split_at(x.shape(), node.attrs.i("axis"));
  const bool reverse = node.attrs.i("reverse") != 0;
  const bool fl = is_float(x.dtype());
  Array out(node.type.dtype, node.type.shape);
  for (int64_t o = 0; o < s.outer; ++o) {
    for (int64_t k = 0; k < s.inner; ++k) {
      double facc = 0.0;
      int64_t iacc = 0;
      for (int64_t step = 0; step < s.n; ++step) {
        const int64_t at = s.at(o, reverse ? s.n - 1 - step : step, k);
        if (fl) {
          facc += x.get_f64(at);
          out.set_f64(at, facc);
        } else {
          iacc = wrap_add(iacc, x.get_i64(at));
          out.set_i64(at, iacc);
        }
      }
    }
  }
  return out;
}

// Along the last axis: the k largest, descending. A stable sort keeps equal values in index
// order (ties: lower index first); NaN ranks above every number, as in argmax.
Array eval_top_k(const Node& node, const Array& x) {
  const int64_t k = node.attrs.i("k");
  const int64_t n = x.shape().back();
  const int64_t rows = n == 0 ? 0 : x.numel() / n;
  const bool fl = is_float(x.dtype());
  Array out(node.type.dtype, node.type.shape);
  std::vector<int64_t> order(n);
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t base = r * n;
    auto greater = [&](int64_t i, int64_t j) {
      if (fl) {
        double a = x.get_f64(base + i), b = x.get_f64(base + j);
        if (std::isnan(a) || std::isnan(b)) return std::isnan(a) && !std::isnan(b);
        return a > b;
      }
      return x.get_i64(base + i) > x.get_i64(base + j);
    };
    std::iota(order.begin(), order.end(), int64_t{0});
    std::stable_sort(order.begin(), order.end(), greater);
    for (int64_t j = 0; j < k; ++j) {
      if (node.op == Op::top_k_values) {
        copy_element(out, r * k + j, x, base + order[j]);
      } else {
        out.set_i64(r * k + j, order[j]);
      }
    }
  }
  return out;
}

}  // namespace keel::ref
