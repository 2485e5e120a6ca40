// Fused causal attention and its gradients (ir/attention.h), and attention over listed keys
// (ir/sparse_attention.h), straight from the definition: every score of a row in double, then
// the softmax, then the sums. Slow and exact; the oracle.
#include <cmath>
#include <limits>
#include <vector>

#include "backend/ref/kernels.h"
#include "ir/attention.h"
#include "ir/sparse_attention.h"

namespace keel::ref {
namespace {

struct Dims {
  AttentionDims d;
  int64_t group = 1;  // query heads per kv head
  // Element offsets of q-shaped [b, h, t, 0] and kv-shaped [b, kv, s, 0] rows (query head h),
  // in the op's layout.
  int64_t qrow(int64_t b, int64_t h, int64_t t) const { return row(b, h, t, d.heads); }
  int64_t kvrow(int64_t b, int64_t h, int64_t s) const { return row(b, h / group, s, d.kv_heads); }
  int64_t row(int64_t b, int64_t h, int64_t t, int64_t heads) const {
    if (d.layout == AttentionLayout::bthd) return ((b * d.seq + t) * heads + h) * d.head_dim;
    return ((b * heads + h) * d.seq + t) * d.head_dim;
  }
};

Dims dims_of(const Node& node, std::span<const Array> in) {
  std::vector<TensorType> types;
  for (const Array& a : in) types.push_back({a.dtype(), a.shape()});
  Dims out;
  out.d = attention_dims(node.op, types, attention_layout(node.attrs));
  out.group = out.d.heads / out.d.kv_heads;
  return out;
}

// Keys query t of row b may attend: s <= t in its document.
std::vector<int64_t> keys_of(const Dims& m, const Array* doc, int64_t b, int64_t t) {
  std::vector<int64_t> keys;
  for (int64_t s = 0; s <= t; ++s) {
    if (!doc || doc->get_i64(b * m.d.seq + s) == doc->get_i64(b * m.d.seq + t)) keys.push_back(s);
  }
  return keys;
}

double dot(const Array& a, int64_t ia, const Array& b, int64_t ib, int64_t n) {
  double acc = 0.0;
  for (int64_t i = 0; i < n; ++i) acc += a.get_f64(ia + i) * b.get_f64(ib + i);
  return acc;
}

}  // namespace

Array eval_attention(const Node& node, std::span<const Array> in) {
  const Dims m = dims_of(node, in);
  const AttentionDims& d = m.d;
  const double scale = node.attrs.f("scale");
  const Op op = node.op;
  const Array &q = in[0], &k = in[1];
  const Array* doc = d.docs ? &in.back() : nullptr;
  const bool grad = op == Op::attention_dq || op == Op::attention_dk || op == Op::attention_dv;
  Array out(node.type.dtype, node.type.shape);
  std::vector<double> acc(static_cast<size_t>(out.numel()), 0.0);
  const int64_t D = d.head_dim;
  for (int64_t b = 0; b < d.batch; ++b) {
    for (int64_t h = 0; h < d.heads; ++h) {
      for (int64_t t = 0; t < d.seq; ++t) {
        const std::vector<int64_t> keys = keys_of(m, doc, b, t);
        const int64_t qi = m.qrow(b, h, t);
        std::vector<double> x;
        for (int64_t s : keys) x.push_back(scale * dot(q, qi, k, m.kvrow(b, h, s), D));
        double lse = 0.0;
        if (grad) {
          lse = in[5].get_f64((b * d.heads + h) * d.seq + t);
        } else {
          double mx = -std::numeric_limits<double>::infinity();
          for (double v : x) mx = std::max(mx, v);
          double l = 0.0;
          for (double v : x) l += std::exp(v - mx);
          lse = mx + std::log(l);
        }
        if (op == Op::attention_lse) {
          acc[static_cast<size_t>((b * d.heads + h) * d.seq + t)] = lse;
          continue;
        }
        const Array& v = in[2];
        // delta = rowsum(dout · out): the softmax's Jacobian applied to dp.
        const double delta = grad ? dot(in[4], qi, in[3], qi, D) : 0.0;
        for (size_t j = 0; j < keys.size(); ++j) {
          const int64_t kj = m.kvrow(b, h, keys[j]);
          const double p = std::exp(x[j] - lse);
          if (op == Op::attention) {
            for (int64_t e = 0; e < D; ++e) acc[size_t(qi + e)] += p * v.get_f64(kj + e);
          } else if (op == Op::attention_dv) {
            for (int64_t e = 0; e < D; ++e) acc[size_t(kj + e)] += p * in[4].get_f64(qi + e);
          } else {
            const double ds = p * (dot(in[4], qi, v, kj, D) - delta) * scale;
            for (int64_t e = 0; e < D; ++e) {
              if (op == Op::attention_dq) {
                acc[size_t(qi + e)] += ds * k.get_f64(kj + e);
              } else {
                acc[size_t(kj + e)] += ds * q.get_f64(qi + e);
              }
            }
          }
        }
      }
    }
  }
  for (int64_t i = 0; i < out.numel(); ++i) out.set_f64(i, acc[static_cast<size_t>(i)]);
  return out;
}

Array eval_sparse_attention(const Node& node, std::span<const Array> in) {
  std::vector<TensorType> types;
  for (const Array& a : in) types.push_back({a.dtype(), a.shape()});
  const Op op = node.op;
  const SparseAttentionDims d = sparse_attention_dims(op, types);
  const double scale = node.attrs.f("scale");
  const Array &q = in[0], &k = in[1], &keys = in.back();
  const int64_t D = d.head_dim, S = d.keys, group = d.heads / d.kv_heads;
  Array out(node.type.dtype, node.type.shape);
  std::vector<double> acc(static_cast<size_t>(out.numel()), 0.0);
  for (int64_t b = 0; b < d.batch; ++b) {
    for (int64_t t = 0; t < d.seq; ++t) {
      // The entries that select a key: their index in the list and the key's position.
      std::vector<int64_t> entry, pos;
      for (int64_t s = 0; s < S; ++s) {
        const int64_t j = keys.get_i64((b * d.seq + t) * S + s);
        if (j >= 0 && j < d.seq) {
          entry.push_back(s);
          pos.push_back(j);
        }
      }
      for (int64_t h = 0; h < d.heads; ++h) {
        const int64_t qi = ((b * d.seq + t) * d.heads + h) * D;
        auto kv_row = [&](int64_t j) { return ((b * d.seq + j) * d.kv_heads + h / group) * D; };
        std::vector<double> x;
        double mx = -std::numeric_limits<double>::infinity();
        for (int64_t j : pos) {
          x.push_back(scale * dot(q, qi, k, kv_row(j), D));
          mx = std::max(mx, x.back());
        }
        double l = 0.0;
        for (double v : x) l += std::exp(v - mx);
        const double lse = mx + std::log(l);
        std::vector<double> p;
        for (double v : x) p.push_back(std::exp(v - lse));
        if (op == Op::sparse_attention_weights) {
          for (size_t e = 0; e < p.size(); ++e) {
            acc[size_t((b * d.seq + t) * S + entry[e])] += p[e] / static_cast<double>(d.heads);
          }
          continue;
        }
        if (op == Op::sparse_attention) {
          for (size_t e = 0; e < p.size(); ++e) {
            for (int64_t c = 0; c < D; ++c)
              acc[size_t(qi + c)] += p[e] * in[2].get_f64(kv_row(pos[e]) + c);
          }
          continue;
        }
        const Array &v = in[2], &dout = in[3];
        std::vector<double> dp;
        double delta = 0.0;  // rowsum(dout · out) = sum_e p_e dp_e
        for (size_t e = 0; e < p.size(); ++e) {
          dp.push_back(dot(dout, qi, v, kv_row(pos[e]), D));
          delta += p[e] * dp.back();
        }
        for (size_t e = 0; e < p.size(); ++e) {
          const int64_t kj = kv_row(pos[e]);
          const double ds = p[e] * (dp[e] - delta) * scale;
          for (int64_t c = 0; c < D; ++c) {
            if (op == Op::sparse_attention_dq) {
              acc[size_t(qi + c)] += ds * k.get_f64(kj + c);
            } else if (op == Op::sparse_attention_dk) {
              acc[size_t(kj + c)] += ds * q.get_f64(qi + c);
            } else {
              acc[size_t(kj + c)] += p[e] * dout.get_f64(qi + c);
            }
          }
        }
      }
    }
  }
  for (int64_t i = 0; i < out.numel(); ++i) out.set_f64(i, acc[static_cast<size_t>(i)]);
  return out;
}

}  // namespace keel::ref
