// The fused causal attention family as keel's own kernels, one warp per row: a query row for
// attention, attention_lse and attention_dq, a key row for attention_dk and attention_dv. Each
// lane holds head_dim / 32 of the row's elements in registers; dot products are warp sums in a
// fixed butterfly, the keys (or queries) are walked in order, so every run adds in the same
// order and nothing is atomic. The forward keeps an online softmax (running max and sum); the
// gradients recompute each probability from the saved row statistics (lse). Plain f32 FMA, not
// yet tensor cores. The per-lane loops are unrolled so the row stays in registers.
#include "backend/cuda/codegen_attention.h"
#include "backend/c_source/c_source.h"
#include "backend/cuda/codegen.h"

namespace keel::cuda::gen {
namespace {

struct Shapes {
  AttentionDims d;
  RowRegisters row;
  std::string scale;
};

// The offset of row (b, h, t) of a [B, heads, T, D] (or [B, T, heads, D]) operand.
std::string row_at(const Shapes& s, const std::string& b, const std::string& h,
                   const std::string& t, int64_t heads) {
  if (s.d.layout == AttentionLayout::bthd) {
    return fmt::format("((({} * {} + {}) * {} + {}) * {})", b, s.d.seq, t, heads, h, s.d.head_dim);
  }
  return fmt::format("((({} * {} + {}) * {} + {}) * {})", b, heads, h, s.d.seq, t, s.d.head_dim);
}

}  // namespace

// Loads a row into registers r[nj]: lane holds elements lane, lane + 32, ...
std::string load_row(const RowRegisters& s, const std::string& reg, const std::string& ptr,
                     const std::string& at, const std::string& indent) {
  return fmt::format(
      "{0}float {1}[{2}];\n{0}#pragma unroll\n{0}for (int j = 0; j < {2}; ++j) {{\n"
      "{0}  const int64_t d = lane + 32 * j;\n"
      "{0}  {1}[j] = d < {3} ? {4}[{5} + d] : 0.0f;\n{0}}}\n",
      indent, reg, s.nj, s.head_dim, ptr, at);
}

// The warp's sum of r[j] * ptr[at + d] over the row.
std::string dot_row(const RowRegisters& s, const std::string& name, const std::string& reg,
                    const std::string& ptr, const std::string& at, const std::string& indent) {
  return fmt::format(
      "{0}float {1} = 0.0f;\n{0}#pragma unroll\n{0}for (int j = 0; j < {2}; ++j) {{\n"
      "{0}  const int64_t d = lane + 32 * j;\n"
      "{0}  if (d < {3}) {1} += {4}[j] * {5}[{6} + d];\n{0}}}\n"
      "{0}{1} = keel_warp_sum({1});\n",
      indent, name, s.nj, s.head_dim, reg, ptr, at);
}

// Registers r[j] += factor * ptr[at + d].
std::string add_row(const RowRegisters& s, const std::string& reg, const std::string& factor,
                    const std::string& ptr, const std::string& at, const std::string& indent) {
  return fmt::format(
      "{0}#pragma unroll\n{0}for (int j = 0; j < {1}; ++j) {{\n{0}  const int64_t d = lane + 32 * "
      "j;\n"
      "{0}  if (d < {2}) {3}[j] += {4} * {5}[{6} + d];\n{0}}}\n",
      indent, s.nj, s.head_dim, reg, factor, ptr, at);
}

std::string store_row(const RowRegisters& s, const std::string& ptr, const std::string& at,
                      const std::string& value, const std::string& indent) {
  return fmt::format(
      "{0}#pragma unroll\n{0}for (int j = 0; j < {1}; ++j) {{\n{0}  const int64_t d = lane + 32 * "
      "j;\n"
      "{0}  if (d < {2}) {3}[{4} + d] = {5};\n{0}}}\n",
      indent, s.nj, s.head_dim, ptr, at, value);
}

std::string zero_row(const RowRegisters& s, const std::string& reg, const std::string& indent) {
  return fmt::format(
      "{0}float {1}[{2}];\n{0}#pragma unroll\n{0}for (int j = 0; j < {2}; ++j) {1}[j] = 0.0f;\n",
      indent, reg, s.nj);
}

bool begin_row_kernel(Kernel& k, NodeId id, int64_t rows, int64_t head_dim) {
  k.launch().block = kBlockThreads;
  k.launch().synchronizes = true;
  k.launch().what = c_source::describe(k.graph(), id);
  if (rows > 0 && head_dim > 0) return true;
  k.launch().grid = 0;
  return false;
}

std::string row_kernel(Kernel& k, int64_t rows, const std::string& body) {
  k.launch().grid = grid_for(rows, kRowKernelWarps);
  return fmt::format(
      "{} {{\n  const int lane = threadIdx.x & 31;\n"
      "  for (int64_t row = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) >> 5;\n"
      "       row < {}LL; row += (static_cast<int64_t>(gridDim.x) * blockDim.x) >> 5) {{\n{}  }}\n"
      "}}\n\n",
      k.signature(), rows, body);
}

std::string emit_attention(Kernel& k, NodeId id, bool tensor_cores) {
  const Graph& g = k.graph();
  const Node& n = g.node(id);
  std::vector<TensorType> types;
  for (NodeId in : n.inputs) types.push_back(g.node(in).type);
  Shapes s;
  s.d = attention_dims(n.op, types, attention_layout(n.attrs));
  s.row = {s.d.head_dim, (s.d.head_dim + 31) / 32};
  s.scale = c_source::literal(Array::full({}, n.attrs.f("scale"), DType::f32), 0);
  const AttentionDims& d = s.d;
  const int64_t group = d.heads / d.kv_heads;
  const bool by_key = n.op == Op::attention_dk || n.op == Op::attention_dv;
  const int64_t rows = d.batch * (by_key ? d.kv_heads : d.heads) * d.seq;
  if (!begin_row_kernel(k, id, rows, d.head_dim)) return "";
  const std::string q = k.pointer(n.inputs[0], false), kk = k.pointer(n.inputs[1], false);
  const std::string doc =
      d.docs ? k.pointer(n.inputs[static_cast<size_t>(attention_fixed_inputs(n.op))], false) : "";
  std::string v, out, dout, lse;
  if (n.op != Op::attention_lse) v = k.pointer(n.inputs[2], false);
  if (attention_fixed_inputs(n.op) == 6) {
    out = k.pointer(n.inputs[3], false);
    dout = k.pointer(n.inputs[4], false);
    lse = k.pointer(n.inputs[5], false);
  }
  const std::string result = k.pointer(id, true);
  if (tensor_cores && tensor_core_attention_fits(d)) {
    return emit_attention_tensor_cores(k, id, {q, kk, v, out, dout, lse, doc, result}, d, s.scale);
  }
  const std::string ind = "    ", in2 = "      ", in3 = "        ";
  std::string b;
  // Rows in (b, head, position) order whatever the layout.
  const int64_t heads = by_key ? d.kv_heads : d.heads;
  b += fmt::format("{}const int64_t b = row / {}, h = (row / {}) % {}, t = row % {};\n", ind,
                   heads * d.seq, d.seq, heads, d.seq);
  auto same_doc = [&](const std::string& x, const std::string& y) {
    return d.docs ? fmt::format(" || {0}[b * {1} + {2}] != {0}[b * {1} + {3}]", doc, d.seq, x, y)
                  : std::string();
  };
  if (!by_key) {
    const std::string qo = row_at(s, "b", "h", "t", d.heads);
    b += fmt::format("{}const int64_t qo = {}, kh = h / {};\n", ind, qo, group);
    b += load_row(s.row, "qr", q, "qo", ind);
    const std::string ko = row_at(s, "b", "kh", "s", d.kv_heads);
    if (n.op == Op::attention || n.op == Op::attention_lse) {
      b += fmt::format("{}float m = __uint_as_float(0xff800000u), l = 0.0f;\n", ind);
      if (n.op == Op::attention) b += zero_row(s.row, "acc", ind);
      b += fmt::format("{}for (int64_t s = 0; s <= t; ++s) {{\n", ind);
      b += fmt::format("{}if (false{}) continue;\n", in2, same_doc("s", "t"));
      b += fmt::format("{}const int64_t ko = {};\n", in2, ko);
      b += dot_row(s.row, "score", "qr", kk, "ko", in2);
      b += fmt::format("{}score *= {};\n", in2, s.scale);
      b += fmt::format("{}const float mx = score > m ? score : m;\n", in2);
      b += fmt::format("{}const float corr = expf(m - mx), p = expf(score - mx);\n", in2);
      b += fmt::format("{}l = l * corr + p;\n{}m = mx;\n", in2, in2);
      if (n.op == Op::attention) {
        b += fmt::format("{0}#pragma unroll\n{0}for (int j = 0; j < {1}; ++j) acc[j] *= corr;\n",
                         in2, s.row.nj);
        b += add_row(s.row, "acc", "p", v, "ko", in2);
      }
      b += ind + "}\n";
      if (n.op == Op::attention) {
        b += store_row(s.row, result, "qo", "acc[j] / l", ind);
      } else {
        b += fmt::format("{}if (lane == 0) {}[(b * {} + h) * {} + t] = m + logf(l);\n", ind, result,
                         d.heads, d.seq);
      }
    } else {  // attention_dq
      b += load_row(s.row, "dr", dout, "qo", ind);
      b += dot_row(s.row, "delta", "dr", out, "qo", ind);
      b += fmt::format("{}const float lse_t = {}[(b * {} + h) * {} + t];\n", ind, lse, d.heads,
                       d.seq);
      b += zero_row(s.row, "acc", ind);
      b += fmt::format("{}for (int64_t s = 0; s <= t; ++s) {{\n", ind);
      b += fmt::format("{}if (false{}) continue;\n", in2, same_doc("s", "t"));
      b += fmt::format("{}const int64_t ko = {};\n", in2, ko);
      b += dot_row(s.row, "score", "qr", kk, "ko", in2);
      b += fmt::format("{}const float p = expf(score * {} - lse_t);\n", in2, s.scale);
      b += dot_row(s.row, "dp", "dr", v, "ko", in2);
      b += fmt::format("{}const float ds = p * (dp - delta) * {};\n", in2, s.scale);
      b += add_row(s.row, "acc", "ds", kk, "ko", in2);
      b += ind + "}\n";
      b += store_row(s.row, result, "qo", "acc[j]", ind);
    }
  } else {  // attention_dk, attention_dv: h is the kv head, t the key's position
    const std::string ko = row_at(s, "b", "h", "t", d.kv_heads);
    b += fmt::format("{}const int64_t ko = {};\n", ind, ko);
    b += load_row(s.row, "kr", kk, "ko", ind);
    if (n.op == Op::attention_dk) b += load_row(s.row, "vr", v, "ko", ind);
    b += zero_row(s.row, "acc", ind);
    b += fmt::format("{0}for (int64_t qh = h * {1}; qh < (h + 1) * {1}; ++qh) {{\n", ind, group);
    b += fmt::format("{}for (int64_t u = t; u < {}; ++u) {{\n", in2, d.seq);
    b += fmt::format("{}if (false{}) continue;\n", in3, same_doc("u", "t"));
    b += fmt::format("{}const int64_t qo = {};\n", in3, row_at(s, "b", "qh", "u", d.heads));
    b += dot_row(s.row, "score", "kr", q, "qo", in3);
    b += fmt::format("{}const float p = expf(score * {} - {}[(b * {} + qh) * {} + u]);\n", in3,
                     s.scale, lse, d.heads, d.seq);
    if (n.op == Op::attention_dv) {
      b += add_row(s.row, "acc", "p", dout, "qo", in3);
    } else {
      b += dot_row(s.row, "dp", "vr", dout, "qo", in3);
      b += fmt::format(
          "{0}float delta = 0.0f;\n{0}#pragma unroll\n{0}for (int j = 0; j < {1}; ++j) {{\n", in3,
          s.row.nj);
      b += fmt::format("{}  const int64_t d = lane + 32 * j;\n", in3);
      b += fmt::format("{}  if (d < {}) delta += {}[qo + d] * {}[qo + d];\n{}}}\n", in3, d.head_dim,
                       dout, out, in3);
      b += fmt::format("{}delta = keel_warp_sum(delta);\n", in3);
      b += fmt::format("{}const float ds = p * (dp - delta) * {};\n", in3, s.scale);
      b += add_row(s.row, "acc", "ds", q, "qo", in3);
    }
    b += in2 + "}\n" + ind + "}\n";
    b += store_row(s.row, result, "ko", "acc[j]", ind);
  }
  return row_kernel(k, rows, b);
}

}  // namespace keel::cuda::gen
