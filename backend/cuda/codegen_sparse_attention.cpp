// Attention over listed keys (ir/sparse_attention.h) as warp-per-row kernels, in the manner of
// codegen_attention.cpp: a query row (b, t, h) for the attention and dq, a query position
// (b, t) for the weights, a key row (b, key, kv head kh) for dk and dv. Each walks its entries
// (and, by key, every query's entries) in order, so sums are in a fixed order and nothing is
// atomic. The gradients recompute each query's S scores, as the op defines: no log-sum-exp is kept.
#include <fmt/format.h>

#include <algorithm>

#include "backend/c_source/c_source.h"
#include "backend/cuda/codegen.h"
#include "backend/cuda/codegen_attention.h"
#include "ir/sparse_attention.h"

namespace keel::cuda::gen {
namespace {

// The sizes and C names one kernel's text is made from.
struct SparseText {
  SparseAttentionDims d;
  RowRegisters row;
  int64_t group = 1;  // query heads a kv head serves, at least 1 (a divisor in the text)
  std::string scale, q, k, v, dout, keys;
};

// Code running `body` for each entry e of row kb that selects a key, with pos (the key's
// position) and ko (its k and v row) set.
std::string walk_entries(const SparseText& x, const std::string& ind, const std::string& body) {
  const std::string in2 = ind + "  ";
  std::string b = fmt::format("{}for (int64_t e = 0; e < {}; ++e) {{\n", ind, x.d.keys);
  b += fmt::format("{}const int64_t pos = static_cast<int64_t>({}[kb + e]);\n", in2, x.keys);
  b += fmt::format("{}if (pos < 0 || pos >= {}) continue;\n", in2, x.d.seq);
  b += fmt::format("{}const int64_t ko = ((b * {} + pos) * {} + kh) * {};\n", in2, x.d.seq,
                   x.d.kv_heads, x.d.head_dim);
  return b + body + ind + "}\n";
}

// Code updating the running max m and sum l with float `score` (scaled), and declaring corr,
// the factor what was summed before is rescaled by, and p, this entry's term.
std::string online_softmax(const std::string& ind) {
  return fmt::format(
      "{0}const float mx = score > m ? score : m;\n"
      "{0}const float corr = expf(m - mx), p = expf(score - mx);\n{0}l = l * corr + p;\n{0}m = "
      "mx;\n",
      ind);
}

// Code setting float `lse` for the query row in registers qr (kv head kh, entries at kb): the
// log-sum-exp of its scaled scores over the entries that select a key (-inf when none does).
std::string lse_of(const SparseText& x, const std::string& ind) {
  const std::string in2 = ind + "  ";
  std::string b = fmt::format("{}float m = __uint_as_float(0xff800000u), l = 0.0f;\n", ind);
  b += walk_entries(x, ind,
                    dot_row(x.row, "score", "qr", x.k, "ko", in2) +
                        fmt::format("{}score *= {};\n", in2, x.scale) + online_softmax(in2));
  return b + fmt::format("{}const float lse = m + logf(l);\n", ind);
}

// Code running `body` for each entry e of row kb that selects a key: pos, ko, score and p (its
// probability, from lse) are set.
std::string each_entry(const SparseText& x, const std::string& ind, const std::string& body) {
  const std::string in2 = ind + "  ";
  return walk_entries(x, ind,
                      dot_row(x.row, "score", "qr", x.k, "ko", in2) +
                          fmt::format("{}const float p = expf(score * {} - lse);\n", in2, x.scale) +
                          body);
}

// Code declaring float `delta` for the query row in registers qr (dout in dr): the sum over its
// entries of p * (dout . v), which the softmax's gradient subtracts.
std::string delta_of(const SparseText& x, const std::string& ind) {
  const std::string in2 = ind + "  ";
  std::string b = fmt::format("{}float delta = 0.0f;\n", ind);
  return b + each_entry(x, ind,
                        dot_row(x.row, "dp", "dr", x.v, "ko", in2) +
                            fmt::format("{}delta += p * dp;\n", in2));
}

// The query-row kernels: sparse_attention (online softmax) and sparse_attention_dq.
std::string by_query(const SparseText& x, Op op, const std::string& result) {
  const SparseAttentionDims& d = x.d;
  const std::string ind = "    ", in2 = "      ";
  std::string b = fmt::format(
      "{}const int64_t b = row / {}, t = (row / {}) % {}, h = row % {}, qo = row * {};\n", ind,
      d.seq * d.heads, d.heads, d.seq, d.heads, d.head_dim);
  b += fmt::format("{}const int64_t kh = h / {}, kb = (b * {} + t) * {};\n", ind, x.group, d.seq,
                   d.keys);
  b += load_row(x.row, "qr", x.q, "qo", ind);
  if (op == Op::sparse_attention) {
    // One pass: the running max and sum rescale what is added so far.
    b += fmt::format("{}float m = __uint_as_float(0xff800000u), l = 0.0f;\n", ind);
    b += zero_row(x.row, "acc", ind);
    b += walk_entries(
        x, ind,
        dot_row(x.row, "score", "qr", x.k, "ko", in2) +
            fmt::format("{}score *= {};\n", in2, x.scale) + online_softmax(in2) +
            fmt::format("{0}#pragma unroll\n{0}for (int j = 0; j < {1}; ++j) acc[j] *= corr;\n",
                        in2, x.row.nj) +
            add_row(x.row, "acc", "p", x.v, "ko", in2));
    // A query with no key gives 0.
    b += store_row(x.row, result, "qo", "l > 0.0f ? acc[j] / l : 0.0f", ind);
    return b;
  }
  b += load_row(x.row, "dr", x.dout, "qo", ind);
  b += lse_of(x, ind);
  b += delta_of(x, ind);
  b += zero_row(x.row, "acc", ind);
  b += each_entry(x, ind,
                  dot_row(x.row, "dp", "dr", x.v, "ko", in2) +
                      fmt::format("{}const float ds = p * (dp - delta) * {};\n", in2, x.scale) +
                      add_row(x.row, "acc", "ds", x.k, "ko", in2));
  b += store_row(x.row, result, "qo", "acc[j]", ind);
  return b;
}

// sparse_attention_dk and _dv: key row (b, key, kv head kh) walks every query position u, each
// of its entries that lists the key, and the query heads kh serves; each such query's lse (and
// for dk its delta) is computed again.
std::string by_key(const SparseText& x, Op op, const std::string& result) {
  const SparseAttentionDims& d = x.d;
  // The query heads the key row's kv head serves (none when there are no query heads).
  const int64_t group = d.heads / d.kv_heads;
  const std::string ind = "    ", in2 = "      ", in3 = "        ", in4 = "          ";
  std::string b = fmt::format(
      "{}const int64_t b = row / {}, key = (row / {}) % {}, kh = row % {}, own = row * {};\n", ind,
      d.seq * d.kv_heads, d.kv_heads, d.seq, d.kv_heads, d.head_dim);
  if (op == Op::sparse_attention_dk) b += load_row(x.row, "vr", x.v, "own", ind);
  b += zero_row(x.row, "acc", ind);
  b += fmt::format("{}for (int64_t u = 0; u < {}; ++u) {{\n", ind, d.seq);
  b += fmt::format("{}const int64_t kb = (b * {} + u) * {};\n", in2, d.seq, d.keys);
  b += fmt::format("{}for (int64_t listed = 0; listed < {}; ++listed) {{\n", in2, d.keys);
  b += fmt::format("{}if (static_cast<int64_t>({}[kb + listed]) != key) continue;\n", in3, x.keys);
  b += fmt::format("{}for (int64_t h = kh * {}; h < (kh + 1) * {}; ++h) {{\n", in3, group, group);
  b += fmt::format("{}const int64_t qo = ((b * {} + u) * {} + h) * {};\n", in4, d.seq, d.heads,
                   d.head_dim);
  b += load_row(x.row, "qr", x.q, "qo", in4);
  b += lse_of(x, in4);
  b += dot_row(x.row, "mine", "qr", x.k, "own", in4);
  b += fmt::format("{}const float pk = expf(mine * {} - lse);\n", in4, x.scale);
  if (op == Op::sparse_attention_dv) {
    b += add_row(x.row, "acc", "pk", x.dout, "qo", in4);
  } else {
    b += load_row(x.row, "dr", x.dout, "qo", in4);
    b += delta_of(x, in4);
    b += dot_row(x.row, "dpk", "vr", x.dout, "qo", in4);
    b += fmt::format("{}const float ds = pk * (dpk - delta) * {};\n", in4, x.scale);
    b += add_row(x.row, "acc", "ds", x.q, "qo", in4);
  }
  b += in3 + "}\n" + in2 + "}\n" + ind + "}\n";
  b += store_row(x.row, result, "own", "acc[j]", ind);
  return b;
}

// sparse_attention_weights: position (b, t) adds each head's probabilities / H onto its entries,
// heads in order; lane 0 writes, after zeroing the row.
std::string weights(const SparseText& x, const std::string& result) {
  const SparseAttentionDims& d = x.d;
  const std::string ind = "    ", in2 = "      ", in3 = "        ";
  std::string b = fmt::format("{}const int64_t b = row / {}, kb = row * {};\n", ind, d.seq, d.keys);
  b += fmt::format(
      "{}if (lane == 0) {{\n{}for (int64_t e = 0; e < {}; ++e) {}[kb + e] = 0.0f;\n{}}}\n", ind,
      in2, d.keys, result, ind);
  b += fmt::format("{}for (int64_t h = 0; h < {}; ++h) {{\n", ind, d.heads);
  b += fmt::format("{}const int64_t qo = (row * {} + h) * {}, kh = h / {};\n", in2, d.heads,
                   d.head_dim, x.group);
  b += load_row(x.row, "qr", x.q, "qo", in2);
  b += lse_of(x, in2);
  b += each_entry(
      x, in2,
      fmt::format("{}if (lane == 0) {}[kb + e] += p * {};\n", in3, result,
                  c_source::literal(
                      Array::full({}, d.heads > 0 ? 1.0 / double(d.heads) : 0.0, DType::f32), 0)));
  b += ind + "}\n";
  return b;
}

}  // namespace

std::string emit_sparse_attention(Kernel& k, NodeId id) {
  const Graph& g = k.graph();
  const Node& n = g.node(id);
  std::vector<TensorType> types;
  for (NodeId in : n.inputs) types.push_back(g.node(in).type);
  SparseText x;
  x.d = sparse_attention_dims(n.op, types);
  // At least one register a lane (a head_dim of 0 reads nothing), and a group of at least one
  // query head (no heads: the loops over them run no iteration).
  x.row = {x.d.head_dim, std::max<int64_t>(1, (x.d.head_dim + 31) / 32)};
  x.group = std::max<int64_t>(1, x.d.kv_heads > 0 ? x.d.heads / x.d.kv_heads : 1);
  x.scale = c_source::literal(Array::full({}, n.attrs.f("scale"), DType::f32), 0);
  const SparseAttentionDims& d = x.d;
  const bool keyed = n.op == Op::sparse_attention_dk || n.op == Op::sparse_attention_dv;
  const int64_t rows = n.op == Op::sparse_attention_weights ? d.batch * d.seq
                       : keyed                              ? d.batch * d.seq * d.kv_heads
                                                            : d.batch * d.seq * d.heads;
  // The weights [B, T, S] are written whatever the head_dim (all scores 0 when it is 0).
  const bool weights_op = n.op == Op::sparse_attention_weights;
  if (!begin_row_kernel(k, id, rows, weights_op ? d.keys : d.head_dim)) return "";
  x.q = k.pointer(n.inputs[0], false);
  x.k = k.pointer(n.inputs[1], false);
  if (n.op != Op::sparse_attention_weights) x.v = k.pointer(n.inputs[2], false);
  if (n.inputs.size() == 5) x.dout = k.pointer(n.inputs[3], false);
  x.keys = k.pointer(n.inputs.back(), false);
  const std::string result = k.pointer(id, true);
  const std::string body = n.op == Op::sparse_attention_weights ? weights(x, result)
                           : keyed                              ? by_key(x, n.op, result)
                                                                : by_query(x, n.op, result);
  return row_kernel(k, rows, body);
}

}  // namespace keel::cuda::gen
