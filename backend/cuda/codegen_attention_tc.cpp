// The attention family on tensor cores, for matmul_precision = bf16 and head_dim a multiple of
// 16 up to 128: a warp per 16-row tile (queries for attention, attention_lse and attention_dq;
// keys for attention_dk and attention_dv), its tiles in shared memory as bf16, each 16 x 16 x 16
// product one wmma (the prelude's keel_mma). The forward takes two passes over the keys: the
// rows' max and sum first, then the probabilities, exact, times V, so no accumulator is rescaled;
// the gradients recompute probabilities from the saved lse. Lanes 0-15 own a row each for the
// softmax. Keys (or queries) are walked in order and nothing is atomic: deterministic. As the
// CPU's bf16 attention: q, k, v, dout and the probabilities and score gradients are rounded to
// bf16, the softmax and every sum are f32.
#include "backend/cuda/codegen_attention.h"

namespace keel::cuda::gen {
namespace {

struct Tc {
  AttentionDims d;
  std::string scale, doc;
  int64_t warps = 4;  // per block: the shared tiles of four warps fit in 48 KB up to D = 64
  int64_t tiles_per_seq = 1;
};

// Where row t0 of head `h` of batch `b` starts in an operand with `heads` heads, and the
// distance between its rows.
std::string row_at(const Tc& s, const std::string& b, const std::string& h, const std::string& t0,
                   int64_t heads) {
  if (s.d.layout == AttentionLayout::bthd) {
    return fmt::format("((({} * {} + {}) * {} + {}) * {})", b, s.d.seq, t0, heads, h, s.d.head_dim);
  }
  return fmt::format("((({} * {} + {}) * {} + {}) * {})", b, heads, h, s.d.seq, t0, s.d.head_dim);
}
int64_t row_stride(const Tc& s, int64_t heads) {
  return s.d.layout == AttentionLayout::bthd ? heads * s.d.head_dim : s.d.head_dim;
}

// `tile` (shared, bf16, ld D) <- 16 rows of `ptr` from `at`, rows past `rows` zero.
std::string load_tile(const Tc& s, const std::string& tile, const std::string& ptr,
                      const std::string& at, int64_t heads, const std::string& rows) {
  return fmt::format("    keel_tile_load({}, {} + {}, {}, {}, {}, lane);\n", tile, ptr, at,
                     row_stride(s, heads), rows, s.d.head_dim);
}

// acc (16 x 16) = a-tile (16 x D, row-major) times b-tile^T (b-tile 16 x D, row-major).
std::string product_t(const Tc& s, const std::string& acc, const std::string& a,
                      const std::string& b) {
  return fmt::format(
      "    keel_mma_zero({0});\n#pragma unroll\n    for (int kk = 0; kk < {3}; ++kk) {{\n"
      "      keel_mma_a fa;\n      keel_mma_b_col fb;\n"
      "      keel_mma_load(fa, {1} + kk * 16, {4});\n      keel_mma_load(fb, {2} + kk * 16, {4});\n"
      "      keel_mma({0}, fa, fb);\n    }}\n",
      acc, a, b, s.d.head_dim / 16, s.d.head_dim);
}

// acc[dj] += p-tile (16 x 16 bf16) times rows-tile (16 x D, row-major).
std::string accumulate(const Tc& s, const std::string& p, const std::string& rows) {
  return fmt::format(
      "    {{\n      keel_mma_a fp;\n      keel_mma_load(fp, {0}, 16);\n#pragma unroll\n"
      "      for (int dj = 0; dj < {2}; ++dj) {{\n        keel_mma_b_row fr;\n"
      "        keel_mma_load(fr, {1} + dj * 16, {3});\n        keel_mma(acc[dj], fp, fr);\n"
      "      }}\n    }}\n",
      p, rows, s.d.head_dim / 16, s.d.head_dim);
}

// The accumulators' rows (r < rows) into `ptr` from `at`, through the warp's f32 tile.
std::string store_rows(const Tc& s, const std::string& ptr, const std::string& at, int64_t heads,
                       const std::string& rows) {
  return fmt::format(
      "#pragma unroll\n  for (int dj = 0; dj < {0}; ++dj) {{\n    keel_mma_store(ss, acc[dj], "
      "16);\n"
      "    __syncwarp();\n    for (int i = lane; i < 256; i += 32) {{\n"
      "      if (i / 16 < {4}) {1}[{2} + (i / 16) * {3} + dj * 16 + i % 16] = ss[i];\n    }}\n"
      "    __syncwarp();\n  }}\n",
      s.d.head_dim / 16, ptr, at, row_stride(s, heads), rows);
}

// Whether key `ki` is seen by query `qi` (both in range): causal, same document.
std::string visible(const Tc& s, const std::string& qi, const std::string& ki) {
  std::string v = fmt::format("{0} < {2}LL && {1} < {2}LL && {1} <= {0}", qi, ki, s.d.seq);
  if (!s.doc.empty())
    v += fmt::format(" && {0}[b * {1} + {2}] == {0}[b * {1} + {3}]", s.doc, s.d.seq, ki, qi);
  return v;
}

std::string shared_tiles(const Tc& s, const std::vector<std::string>& bf16_tiles) {
  std::string out;
  for (const std::string& t : bf16_tiles) {
    out += fmt::format("  __shared__ __align__(32) uint16_t sh_{}[{}][{}];\n", t, s.warps,
                       16 * s.d.head_dim);
  }
  out += fmt::format(
      "  __shared__ __align__(32) float sh_s[{0}][256];\n"
      "  __shared__ __align__(32) float sh_t[{0}][256];\n"
      "  __shared__ __align__(32) uint16_t sh_p[{0}][256];\n"
      "  __shared__ float sh_stat[{0}][2][16];\n",
      s.warps);
  out += "  float* ss = sh_s[warp];\n  float* st = sh_t[warp];\n  uint16_t* sp = sh_p[warp];\n";
  for (const std::string& t : bf16_tiles)
    out += fmt::format("  uint16_t* s{0} = sh_{0}[warp];\n", t);
  return out;
}

}  // namespace

bool tensor_core_attention_fits(const AttentionDims& d) {
  return d.head_dim % 16 == 0 && d.head_dim > 0 && d.head_dim <= 128 && d.seq > 0;
}

std::string emit_attention_tensor_cores(Kernel& k, NodeId id, const AttentionPointers& p,
                                        const AttentionDims& dims, const std::string& scale) {
  const Node& n = k.graph().node(id);
  Tc s{dims, scale, p.doc, dims.head_dim > 64 ? 2 : 4, (dims.seq + 15) / 16};
  const AttentionDims& d = s.d;
  const int64_t group = d.heads / d.kv_heads;
  const bool by_key = n.op == Op::attention_dk || n.op == Op::attention_dv;
  const int64_t heads = by_key ? d.kv_heads : d.heads;
  const int64_t tiles = d.batch * heads * s.tiles_per_seq;
  k.launch().block = static_cast<int32_t>(32 * s.warps);
  k.launch().synchronizes = true;
  const std::string nd = std::to_string(d.head_dim / 16);
  std::string b;
  b += fmt::format(
      "  for (int64_t tile = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) >> 5;\n"
      "       tile < {0}LL; tile += (static_cast<int64_t>(gridDim.x) * blockDim.x) >> 5) {{\n"
      "  const int64_t b = tile / {1}, h = (tile / {2}) % {3}, t0 = (tile % {2}) * 16;\n"
      "  const int rows = {4}LL - t0 < 16 ? static_cast<int>({4}LL - t0) : 16;\n",
      tiles, heads * s.tiles_per_seq, s.tiles_per_seq, heads, d.seq);
  const std::string qi = "(t0 + lane)", ki = "(k0 + c)";
  if (!by_key) {
    b += fmt::format("  const int64_t kh = h / {};\n", group);
    b += load_tile(s, "sq", p.q, row_at(s, "b", "h", "t0", d.heads), d.heads, "rows");
    if (n.op == Op::attention_dq) {
      b += load_tile(s, "sd", p.dout, row_at(s, "b", "h", "t0", d.heads), d.heads, "rows");
      // The row's lse and delta = rounded dout . out, as the CPU's bf16 attention takes it.
      b += fmt::format(
          "  float lse_r = 0.0f, delta_r = 0.0f;\n  if (lane < rows) {{\n"
          "    lse_r = {0}[(b * {1} + h) * {2} + t0 + lane];\n"
          "    const int64_t at = {3} + lane * {4};\n"
          "    for (int e = 0; e < {5}; ++e) delta_r += keel_rbf({6}[at + e]) * {7}[at + e];\n  "
          "}}\n",
          p.lse, d.heads, d.seq, row_at(s, "b", "h", "t0", d.heads), row_stride(s, d.heads),
          d.head_dim, p.dout, p.out);
    } else {
      b += "  float m = __uint_as_float(0xff800000u), l = 0.0f;\n";
    }
    b += "  __syncwarp();\n";
    const std::string key_tile = fmt::format(
        "    const int64_t k0 = kt * 16;\n"
        "    const int krows = {0}LL - k0 < 16 ? static_cast<int>({0}LL - k0) : 16;\n",
        d.seq);
    if (n.op != Op::attention_dq) {  // pass 1: each row's max and sum
      b += "  for (int64_t kt = 0; kt * 16 <= t0; ++kt) {\n" + key_tile;
      b += load_tile(s, "sk", p.k, row_at(s, "b", "kh", "k0", d.kv_heads), d.kv_heads, "krows");
      b += "    __syncwarp();\n    keel_mma_acc sacc;\n" + product_t(s, "sacc", "sq", "sk");
      b += "    keel_mma_store(ss, sacc, 16);\n    __syncwarp();\n";
      b += fmt::format(
          "    if (lane < 16) {{\n      for (int c = 0; c < 16; ++c) {{\n"
          "        if (!({0})) continue;\n        const float sc = ss[lane * 16 + c] * {1};\n"
          "        const float mx = sc > m ? sc : m;\n"
          "        l = l * expf(m - mx) + expf(sc - mx);\n        m = mx;\n      }}\n    }}\n"
          "    __syncwarp();\n  }}\n",
          visible(s, qi, ki), s.scale);
    }
    if (n.op == Op::attention_lse) {
      b += fmt::format("  if (lane < rows) {}[(b * {} + h) * {} + t0 + lane] = m + logf(l);\n",
                       p.result, d.heads, d.seq);
    } else {
      b += "  keel_mma_acc acc[" + nd + "];\n#pragma unroll\n  for (int dj = 0; dj < " + nd +
           "; ++dj) keel_mma_zero(acc[dj]);\n";
      b += "  for (int64_t kt = 0; kt * 16 <= t0; ++kt) {\n" + key_tile;
      b += load_tile(s, "sk", p.k, row_at(s, "b", "kh", "k0", d.kv_heads), d.kv_heads, "krows");
      b += load_tile(s, "sv", p.v, row_at(s, "b", "kh", "k0", d.kv_heads), d.kv_heads, "krows");
      b += "    __syncwarp();\n    keel_mma_acc sacc;\n" + product_t(s, "sacc", "sq", "sk");
      b += "    keel_mma_store(ss, sacc, 16);\n";
      if (n.op == Op::attention_dq) {
        b += product_t(s, "sacc", "sd", "sv") + "    keel_mma_store(st, sacc, 16);\n";
      }
      b += "    __syncwarp();\n    if (lane < 16) {\n      for (int c = 0; c < 16; ++c) {\n";
      if (n.op == Op::attention) {
        b += fmt::format(
            "        const float pr = ({0}) ? expf(ss[lane * 16 + c] * {1} - m) / l : 0.0f;\n",
            visible(s, qi, ki), s.scale);
      } else {
        b += fmt::format(
            "        const float pr = ({0}) ? expf(ss[lane * 16 + c] * {1} - lse_r) : 0.0f;\n"
            "        const float pr_ds = pr * (st[lane * 16 + c] - delta_r) * {1};\n",
            visible(s, qi, ki), s.scale);
      }
      b += fmt::format(
          "        sp[lane * 16 + c] = keel_f2bf({});\n      }}\n    }}\n    __syncwarp();\n",
          n.op == Op::attention ? "pr" : "pr_ds");
      b += accumulate(s, "sp", n.op == Op::attention ? "sv" : "sk");
      b += "    __syncwarp();\n  }\n";
      b += store_rows(s, p.result, row_at(s, "b", "h", "t0", d.heads), d.heads, "rows");
    }
  } else {  // a tile of 16 keys of kv head h; every query head of its group, queries u >= key
    b += load_tile(s, "sk", p.k, row_at(s, "b", "h", "t0", d.kv_heads), d.kv_heads, "rows");
    if (n.op == Op::attention_dk) {
      b += load_tile(s, "sv", p.v, row_at(s, "b", "h", "t0", d.kv_heads), d.kv_heads, "rows");
    }
    b += "  keel_mma_acc acc[" + nd + "];\n#pragma unroll\n  for (int dj = 0; dj < " + nd +
         "; ++dj) keel_mma_zero(acc[dj]);\n";
    b += fmt::format("  for (int64_t qh = h * {0}; qh < (h + 1) * {0}; ++qh) {{\n", group);
    b += fmt::format(
        "  for (int64_t u0 = t0; u0 < {0}LL; u0 += 16) {{\n"
        "    const int urows = {0}LL - u0 < 16 ? static_cast<int>({0}LL - u0) : 16;\n",
        d.seq);
    b += "    __syncwarp();\n";
    b += load_tile(s, "sq", p.q, row_at(s, "b", "qh", "u0", d.heads), d.heads, "urows");
    b += load_tile(s, "sd", p.dout, row_at(s, "b", "qh", "u0", d.heads), d.heads, "urows");
    // Each query row's lse and delta, for the key rows' lanes.
    // Rows past the tile's end get zeros: shared memory starts as anything, and 0 * NaN is NaN.
    b += fmt::format(
        "    if (lane < 16) {{\n      const int64_t at = {0} + lane * {1};\n"
        "      float delta_u = 0.0f, lse_u = 0.0f;\n      if (lane < urows) {{\n",
        row_at(s, "b", "qh", "u0", d.heads), row_stride(s, d.heads));
    if (n.op == Op::attention_dk) {
      b += fmt::format(
          "      for (int e = 0; e < {0}; ++e) delta_u += keel_rbf({1}[at + e]) * {2}[at + e];\n",
          d.head_dim, p.dout, p.out);
    }
    b += fmt::format(
        "        lse_u = {0}[(b * {1} + qh) * {2} + u0 + lane];\n      }}\n"
        "      sh_stat[warp][0][lane] = lse_u;\n"
        "      sh_stat[warp][1][lane] = delta_u;\n    }}\n    __syncwarp();\n",
        p.lse, d.heads, d.seq);
    b += "    keel_mma_acc sacc;\n" + product_t(s, "sacc", "sk", "sq");
    b += "    keel_mma_store(ss, sacc, 16);\n";
    if (n.op == Op::attention_dk) {
      b += product_t(s, "sacc", "sv", "sd") + "    keel_mma_store(st, sacc, 16);\n";
    }
    b += "    __syncwarp();\n    if (lane < 16) {\n      for (int c = 0; c < 16; ++c) {\n";
    b += fmt::format(
        "        const bool seen = {0};\n"
        "        const float pr = seen ? expf(ss[lane * 16 + c] * {1} - sh_stat[warp][0][c]) : "
        "0.0f;\n",
        visible(s, "(u0 + c)", "(t0 + lane)"), s.scale);
    if (n.op == Op::attention_dk) {
      b += fmt::format(
          "        sp[lane * 16 + c] = keel_f2bf(seen ? pr * (st[lane * 16 + c] - "
          "sh_stat[warp][1][c]) * {} : 0.0f);\n",
          s.scale);
    } else {
      b += "        sp[lane * 16 + c] = keel_f2bf(pr);\n";
    }
    b += "      }\n    }\n    __syncwarp();\n";
    b += accumulate(s, "sp", n.op == Op::attention_dk ? "sq" : "sd");
    b += "  }\n  }\n";
    b += store_rows(s, p.result, row_at(s, "b", "h", "t0", d.kv_heads), d.kv_heads, "rows");
  }
  b += "  }\n";
  const std::vector<std::string> needed =
      n.op == Op::attention_lse  ? std::vector<std::string>{"q", "k"}
      : n.op == Op::attention    ? std::vector<std::string>{"q", "k", "v"}
      : n.op == Op::attention_dv ? std::vector<std::string>{"q", "k", "d"}
                                 : std::vector<std::string>{"q", "k", "v", "d"};
  k.launch().grid = grid_for(tiles, s.warps);
  return fmt::format(
      "{} {{\n  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;\n{}{}}}\n\n",
      k.signature(), shared_tiles(s, needed), b);
}

}  // namespace keel::cuda::gen
