// Fused causal attention with bf16 products (matmul_precision = bf16): the f32 passes' 64 x 64
// tiles (the forward's online softmax over passes of up to 1024 keys), with every tile product
// (q·kᵀ, p·v, dout·vᵀ, doutᵀ·p, qᵀ·ds, ds·k) on bf16 operands with f32 sums, run by AMX tile
// instructions or, on CPUs with AVX512-BF16 and no AMX (AMD Zen 4), by vdpbf16ps. The softmax,
// masks and row statistics stay f32. One thread computes each output element in a fixed order
// (forward: a task per query block; backward: a task per batch and kv head), so the bytes do not
// depend on the thread count.
#include <atomic>
#include <cmath>
#include <cstring>
#include <memory>

#include "backend/cpu/kernel_attention.h"
#include "backend/cpu/kernel_ops.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <cpuid.h>
#include <immintrin.h>
#include <sys/syscall.h>
#include <unistd.h>
#define KEEL_BF16_ATTENTION 1
#include "backend/cpu/simd_transpose.h"
#endif

namespace keel::cpu::detail::attn {

namespace {
std::atomic<int> forced_way{-1};  // a Bf16Tiles, or -1: the fastest the host has
}  // namespace

void force_bf16_tiles(std::optional<Bf16Tiles> way) {
  forced_way = way ? static_cast<int>(*way) : -1;
}

#ifdef KEEL_BF16_ATTENTION
namespace {

#define KEEL_BF16_TARGET \
  __attribute__((target("amx-tile,amx-bf16,avx512bf16,avx512f,avx512bw,avx512vl,avx512dq,fma")))

bool amx_granted() {
  static const bool granted = [] {
    unsigned a = 0, b = 0, c = 0, d = 0;
    if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return false;
    const bool tile = (d >> 24) & 1u, bf16 = (d >> 22) & 1u, avx512 = (b >> 16) & 1u;
    if (!tile || !bf16 || !avx512) return false;
    // Linux hands out the 8 KB tile state only on request (as oneDNN asks for it too).
    constexpr long kReqXcompPerm = 0x1023, kXfeatureTileData = 18;
    return ::syscall(SYS_arch_prctl, kReqXcompPerm, kXfeatureTileData) == 0;
  }();
  return granted;
}

// AVX512-BF16 (CPUID leaf 7, subleaf 1, EAX bit 5) with the AVX-512 state enabled by the OS.
bool dot_bf16_supported() {
  static const bool supported = [] {
    unsigned a = 0, b = 0, c = 0, d = 0;
    if (!__get_cpuid_count(7, 1, &a, &b, &c, &d)) return false;
    return ((a >> 5) & 1u) && __builtin_cpu_supports("avx512f") &&
           __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl") &&
           __builtin_cpu_supports("avx512dq");
  }();
  return supported;
}

// Palette 1, all eight tiles 16 rows of 64 bytes: 0-3 f32 sums (16 x 16), 4-5 bf16 rows of the
// left operand (16 x 32), 6-7 the right operand in pairs (16 pairs of rows x 16 columns).
struct alignas(64) TileConfig {
  uint8_t palette = 1, start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t colsb[16] = {64, 64, 64, 64, 64, 64, 64, 64};
  uint8_t rows[16] = {16, 16, 16, 16, 16, 16, 16, 16};
};

// With AMX, holds the tile configuration for one task and releases the tile state after it.
struct TileScope {
  KEEL_BF16_TARGET explicit TileScope(Bf16Tiles way) : amx_(way == Bf16Tiles::amx) {
    static const TileConfig config;
    if (amx_) _tile_loadconfig(&config);
  }
  KEEL_BF16_TARGET ~TileScope() {
    if (amx_) _tile_release();
  }
  TileScope(const TileScope&) = delete;
  TileScope& operator=(const TileScope&) = delete;

 private:
  bool amx_;
};

// c[m][n] (+)= a[m][k] · b[k][n]: c f32 at ldc floats, a bf16 rows at lda elements, b in pairs
// (word [p][j] holds b[2p][j] low and b[2p+1][j] high) at ldb words; m, n, k multiples of 32.
// Each sum runs over k in increasing chunks of 32.
KEEL_BF16_TARGET void amx_product(float* c, int64_t ldc, const uint16_t* a, int64_t lda,
                                  const uint32_t* b, int64_t ldb, int64_t m, int64_t n, int64_t k,
                                  bool accumulate) {
  const int64_t cs = ldc * 4, as = lda * 2, bs = ldb * 4;
  for (int64_t i = 0; i < m; i += 32) {
    for (int64_t j = 0; j < n; j += 32) {
      float* c0 = c + i * ldc + j;
      float* c1 = c0 + 16 * ldc;
      if (accumulate) {
        _tile_loadd(0, c0, cs);
        _tile_loadd(1, c0 + 16, cs);
        _tile_loadd(2, c1, cs);
        _tile_loadd(3, c1 + 16, cs);
      } else {
        _tile_zero(0);
        _tile_zero(1);
        _tile_zero(2);
        _tile_zero(3);
      }
      for (int64_t p = 0; p < k; p += 32) {
        _tile_loadd(4, a + i * lda + p, as);
        _tile_loadd(5, a + (i + 16) * lda + p, as);
        _tile_loadd(6, b + (p / 2) * ldb + j, bs);
        _tile_loadd(7, b + (p / 2) * ldb + j + 16, bs);
        _tile_dpbf16ps(0, 4, 6);
        _tile_dpbf16ps(1, 4, 7);
        _tile_dpbf16ps(2, 5, 6);
        _tile_dpbf16ps(3, 5, 7);
      }
      _tile_stored(0, c0, cs);
      _tile_stored(1, c0 + 16, cs);
      _tile_stored(2, c1, cs);
      _tile_stored(3, c1 + 16, cs);
    }
  }
}

// amx_product's contract with vdpbf16ps: each sum takes its products a pair of k at a time, in
// increasing k. Blocks of 8 rows by 32 columns keep their sums in 16 registers; each pair of b's
// rows loaded feeds 16 instructions.
KEEL_BF16_TARGET void dot_product(float* c, int64_t ldc, const uint16_t* a, int64_t lda,
                                  const uint32_t* b, int64_t ldb, int64_t m, int64_t n, int64_t k,
                                  bool accumulate) {
  constexpr int64_t kRows = 8;
  for (int64_t i = 0; i < m; i += kRows) {
    for (int64_t j = 0; j < n; j += 32) {
      __m512 acc[kRows][2];
      for (int64_t r = 0; r < kRows; ++r) {
        const float* cr = c + (i + r) * ldc + j;
        acc[r][0] = accumulate ? _mm512_loadu_ps(cr) : _mm512_setzero_ps();
        acc[r][1] = accumulate ? _mm512_loadu_ps(cr + 16) : _mm512_setzero_ps();
      }
      for (int64_t p = 0; p < k / 2; ++p) {
        const auto b0 = (__m512bh)_mm512_loadu_si512(b + p * ldb + j);
        const auto b1 = (__m512bh)_mm512_loadu_si512(b + p * ldb + j + 16);
        for (int64_t r = 0; r < kRows; ++r) {
          int32_t pair;
          std::memcpy(&pair, a + (i + r) * lda + 2 * p, sizeof pair);
          const auto x = (__m512bh)_mm512_set1_epi32(pair);
          acc[r][0] = _mm512_dpbf16_ps(acc[r][0], x, b0);
          acc[r][1] = _mm512_dpbf16_ps(acc[r][1], x, b1);
        }
      }
      for (int64_t r = 0; r < kRows; ++r) {
        float* cr = c + (i + r) * ldc + j;
        _mm512_storeu_ps(cr, acc[r][0]);
        _mm512_storeu_ps(cr + 16, acc[r][1]);
      }
    }
  }
}

KEEL_BF16_TARGET void product(Bf16Tiles way, float* c, int64_t ldc, const uint16_t* a, int64_t lda,
                              const uint32_t* b, int64_t ldb, int64_t m, int64_t n, int64_t k,
                              bool accumulate) {
  if (way == Bf16Tiles::amx) return amx_product(c, ldc, a, lda, b, ldb, m, n, k, accumulate);
  dot_product(c, ldc, a, lda, b, ldb, m, n, k, accumulate);
}

// One head's operand in the three bf16 forms the products read, tp = whole blocks of positions
// (zeros past the sequence): rows [tp][D]; rows transposed [D][tp] (a left operand summing over
// positions); pairs of positions [tp/2][D] (a right operand summing over positions); pairs of
// features [D/2][tp] (a right operand summing over features, i.e. the operand transposed).
constexpr int64_t kPrefetchRows = 8;
KEEL_BF16_TARGET void pack_rows(const InRows& x, int64_t b, int64_t h, int64_t seq, int64_t tp,
                                int64_t dim, uint16_t* rows) {
  for (int64_t t = 0; t < tp; ++t) {
    uint16_t* o = rows + t * dim;
    if (t >= seq) {
      std::fill_n(o, dim, uint16_t{0});
      continue;
    }
    // Rows of a fused projection lie a page or more apart, beyond the hardware prefetchers'
    // reach: ask for a row a few ahead.
    if (t + kPrefetchRows < seq) {
      const char* ahead = reinterpret_cast<const char*>(x.row(b, h, t + kPrefetchRows));
      for (int64_t at = 0; at < dim * 4; at += 64) __builtin_prefetch(ahead + at);
    }
    const float* r = x.row(b, h, t);
    for (int64_t e = 0; e < dim; ++e) o[e] = static_cast<uint16_t>(bf16_bits(r[e]));
  }
}
KEEL_BF16_TARGET void transpose_rows(const uint16_t* rows, int64_t tp, int64_t dim, uint16_t* out) {
  for (int64_t t0 = 0; t0 < tp; t0 += 32) {
    for (int64_t e = 0; e < dim; ++e) {
      for (int64_t t = t0; t < t0 + 32; ++t) out[e * tp + t] = rows[t * dim + e];
    }
  }
}
KEEL_BF16_TARGET void position_pairs(const uint16_t* rows, int64_t tp, int64_t dim, uint32_t* out) {
  for (int64_t p = 0; p < tp / 2; ++p) {
    const uint16_t *lo = rows + 2 * p * dim, *hi = lo + dim;
    for (int64_t e = 0; e < dim; ++e) out[p * dim + e] = lo[e] | (uint32_t{hi[e]} << 16);
  }
}
KEEL_BF16_TARGET void feature_pairs(const uint16_t* rows, int64_t tp, int64_t dim, uint32_t* out) {
  const int64_t pairs = dim / 2;
  for (int64_t t0 = 0; t0 < tp; t0 += 32) {
    for (int64_t p = 0; p < pairs; ++p) {
      for (int64_t t = t0; t < t0 + 32; ++t) {
        uint32_t w;
        std::memcpy(&w, rows + t * dim + 2 * p, sizeof w);
        out[p * tp + t] = w;
      }
    }
  }
}

// A kBlock x kBlock f32 tile's rows [0, rows) as bf16 rows (a left operand), or in pairs of
// rows (a right operand); rows past `rows` are 0.
KEEL_BF16_TARGET void tile_rows_bf16(const float* s, int64_t rows, uint16_t* out) {
  for (int64_t i = 0; i < rows * kBlock; ++i) out[i] = static_cast<uint16_t>(bf16_bits(s[i]));
  std::fill(out + rows * kBlock, out + kBlock * kBlock, uint16_t{0});
}
KEEL_BF16_TARGET void tile_pairs_bf16(const float* s, int64_t rows, uint32_t* out) {
  for (int64_t p = 0; p < kBlock / 2; ++p) {
    const int64_t r = 2 * p;
    const float *lo = s + r * kBlock, *hi = lo + kBlock;
    uint32_t* o = out + p * kBlock;
    if (r + 1 < rows) {
      for (int64_t c = 0; c < kBlock; ++c) o[c] = bf16_bits(lo[c]) | (bf16_bits(hi[c]) << 16);
    } else if (r < rows) {
      for (int64_t c = 0; c < kBlock; ++c) o[c] = bf16_bits(lo[c]);
    } else {
      std::fill_n(o, kBlock, 0u);
    }
  }
}

// Rows s0 .. s0 + n of a kv head's dk or dv from their transposed sums t[D][kBlock], times
// `scale`, in 16 x 16 blocks (a scalar walk down t's columns was 1-2 % of a gpt2-s bf16 step).
KEEL_BF16_TARGET void store_transposed(const float* t, int64_t dim, float scale, const OutRows& out,
                                       int64_t b, int64_t kvh, int64_t s0, int64_t n) {
  const __m512 k = _mm512_set1_ps(scale);
  __m512 r[16];
  for (int64_t i0 = 0; i0 < n; i0 += 16) {
    for (int64_t e0 = 0; e0 < dim; e0 += 16) {
      for (int64_t e = 0; e < 16; ++e) r[e] = _mm512_loadu_ps(t + (e0 + e) * kBlock + i0);
      transpose16(r);
      for (int64_t i = 0; i < 16 && i0 + i < n; ++i)
        _mm512_storeu_ps(out.row(b, kvh, s0 + i0 + i) + e0, _mm512_mul_ps(r[i], k));
    }
  }
}

// Scores of a tile (rows at stride ld) scaled, and masked where needed: rows [0, rows) of s.
KEEL_BF16_TARGET void scale_and_mask(const Problem& pb, int64_t b, int64_t i0, int64_t rows,
                                     int64_t s0, int64_t n, float* s, int64_t ld = kBlock) {
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < kBlock; ++c) s[r * ld + c] *= pb.scale;
  }
  if (needs_mask(pb, b, i0, s0, n)) mask_tile(pb, b, i0, rows, s0, n, s, ld);
}

int64_t padded_seq(int64_t seq) {
  return (seq + kBlock - 1) / kBlock * kBlock;
}

// The forward's operands for every head, bf16: q rows, k in pairs of features (for q·kᵀ), v in
// pairs of positions (for p·v).
struct ForwardOperands {
  int64_t tp = 0;
  std::vector<uint16_t> q;
  std::vector<uint32_t> k, v;
};

ForwardOperands forward_operands(const Problem& pb, bool with_v) {
  ForwardOperands f;
  const int64_t D = pb.dim, tp = padded_seq(pb.seq);
  f.tp = tp;
  f.q.resize(static_cast<size_t>(pb.batch * pb.heads * tp * D));
  f.k.resize(static_cast<size_t>(pb.batch * pb.kv_heads * tp * D / 2));
  if (with_v) f.v.resize(f.k.size());
  const int64_t heads = pb.batch * (pb.heads + pb.kv_heads);
  for_tasks(heads, heads * tp * D, [&](int64_t task) {
    if (task < pb.batch * pb.heads) {
      pack_rows(pb.q, task / pb.heads, task % pb.heads, pb.seq, tp, D, f.q.data() + task * tp * D);
      return;
    }
    const int64_t bk = task - pb.batch * pb.heads, b = bk / pb.kv_heads, kv = bk % pb.kv_heads;
    std::vector<uint16_t> rows(static_cast<size_t>(tp * D));
    pack_rows(pb.k, b, kv, pb.seq, tp, D, rows.data());
    feature_pairs(rows.data(), tp, D, f.k.data() + bk * tp * D / 2);
    if (!with_v) return;
    pack_rows(pb.v, b, kv, pb.seq, tp, D, rows.data());
    position_pairs(rows.data(), tp, D, f.v.data() + bk * tp * D / 2);
  });
  return f;
}

// Keys per softmax pass of the forward: at most this many (gpt2-s's 256 in one pass) get one
// row max, one exp pass and one sum per row, and one p·v product; longer rows rescale between
// passes (the online softmax).
constexpr int64_t kChunk = 16 * kBlock;

// Per-thread floats of bf16_forward_task: scores, sums, row max and sum, the bf16 probabilities.
int64_t forward_floats(int64_t dim) {
  return kBlock * kChunk + kBlock * dim + 2 * kBlock + kBlock * kChunk / 2;
}

// One query block of one head: the f32 forward_task's online softmax over passes of up to
// kChunk keys, with bf16 products (AMX or dot products).
KEEL_BF16_TARGET void bf16_forward_task(const Problem& pb, Bf16Tiles way, const ForwardOperands& f,
                                        int64_t task, float* work, const OutRows& out, float* lse) {
  const int64_t D = pb.dim, tp = f.tp;
  const auto [qb, h, b, i0, rows] = query_block(pb, task);
  const int64_t kv = b * pb.kv_heads + h / pb.group;
  float* s = work;
  float* acc = s + kBlock * kChunk;
  float* m = acc + kBlock * D;
  float* l = m + kBlock;
  auto* p16 = reinterpret_cast<uint16_t*>(l + kBlock);
  const uint16_t* q = f.q.data() + ((b * pb.heads + h) * tp + i0) * D;
  std::fill_n(m, kBlock, kNegInf);
  std::fill_n(l, kBlock, 0.0f);
  std::fill_n(acc, kBlock * D, 0.0f);
  const TileScope tiles(way);
  for (int64_t c0 = 0; c0 <= i0; c0 += kChunk) {
    const int64_t width = std::min(i0 + kBlock, c0 + kChunk) - c0;  // whole blocks of keys
    bool any = false;
    for (int64_t s0 = c0; s0 < c0 + width; s0 += kBlock) {
      float* tile = s + (s0 - c0);
      if (!pb.live(b, i0, i0 + rows, s0)) {  // no query of the block sees these keys
        for (int64_t r = 0; r < kBlock; ++r) std::fill_n(tile + r * width, kBlock, kNegInf);
        continue;
      }
      any = true;
      product(way, tile, width, q, D, f.k.data() + kv * tp * D / 2 + s0, tp, kBlock, kBlock, D,
              false);
      scale_and_mask(pb, b, i0, rows, s0, std::min(kBlock, pb.seq - s0), tile, width);
    }
    if (!any) continue;
    for (int64_t r = 0; r < rows; ++r) {
      float* row = s + r * width;
      const float mx = row_max(row, m[r], width);
      if (mx == kNegInf) {  // nothing visible yet: this pass adds nothing to the row
        std::fill(row, row + width, 0.0f);
        continue;
      }
      const float alpha = exp_approx(m[r] - mx);
      for (int64_t c = 0; c < width; ++c) row[c] = exp_approx(row[c] - mx);
      l[r] = l[r] * alpha + row_sum(row, width);
      m[r] = mx;
      if (out.data && alpha != 1.0f) {
        float* a = acc + r * D;
        for (int64_t e = 0; e < D; ++e) a[e] *= alpha;
      }
    }
    if (!out.data) continue;
    for (int64_t r = 0; r < kBlock; ++r) {
      uint16_t* o = p16 + r * width;
      if (r >= rows) {
        std::fill_n(o, width, uint16_t{0});
        continue;
      }
      for (int64_t c = 0; c < width; ++c) o[c] = static_cast<uint16_t>(bf16_bits(s[r * width + c]));
    }
    product(way, acc, D, p16, width, f.v.data() + kv * tp * D / 2 + (c0 / 2) * D, D, kBlock, D,
            width, true);
  }
  finish_rows(pb, b, h, i0, rows, acc, m, l, out, lse);
}

// One (batch, kv head)'s backward operands and tiles, per thread. Per query head of the group:
// q and dout as rows and transposed, and dq's running sums [tp][D]; the kv head's k in pairs of
// features (q·kᵀ) and of positions (ds·k), v in pairs of features (dout·vᵀ).
struct GradWork {
  std::vector<uint16_t> q, qt, dout, dout_t, scratch_rows;
  std::vector<uint32_t> k_features, k_positions, v_features;
  std::vector<float> dq, s, dp, dk_t, dv_t;
  std::vector<uint16_t> ds_rows;
  std::vector<uint32_t> p_pairs, ds_pairs;

  GradWork(const Problem& pb, int64_t tp) {
    const auto per_head = static_cast<size_t>(tp * pb.dim), group = static_cast<size_t>(pb.group);
    for (auto* v : {&q, &qt, &dout, &dout_t}) v->resize(group * per_head);
    scratch_rows.resize(per_head);
    for (auto* v : {&k_features, &k_positions, &v_features}) v->resize(per_head / 2);
    dq.resize(group * per_head);
    const auto tile = static_cast<size_t>(kBlock * kBlock);
    s.resize(tile);
    dp.resize(tile);
    dk_t.resize(static_cast<size_t>(pb.dim * kBlock));
    dv_t.resize(dk_t.size());
    ds_rows.resize(tile);
    p_pairs.resize(tile / 2);
    ds_pairs.resize(tile / 2);
  }
};

KEEL_BF16_TARGET void pack_grad_operands(const Problem& pb, const Grad& g, int64_t b, int64_t kvh,
                                         int64_t tp, GradWork& w) {
  const int64_t D = pb.dim, per_head = tp * D;
  for (int64_t j = 0; j < pb.group; ++j) {
    const int64_t h = kvh * pb.group + j;
    pack_rows(pb.q, b, h, pb.seq, tp, D, w.q.data() + j * per_head);
    transpose_rows(w.q.data() + j * per_head, tp, D, w.qt.data() + j * per_head);
    pack_rows(g.dout, b, h, pb.seq, tp, D, w.dout.data() + j * per_head);
    transpose_rows(w.dout.data() + j * per_head, tp, D, w.dout_t.data() + j * per_head);
  }
  uint16_t* rows = w.scratch_rows.data();
  pack_rows(pb.k, b, kvh, pb.seq, tp, D, rows);
  feature_pairs(rows, tp, D, w.k_features.data());
  position_pairs(rows, tp, D, w.k_positions.data());
  pack_rows(pb.v, b, kvh, pb.seq, tp, D, rows);
  feature_pairs(rows, tp, D, w.v_features.data());
}

// dq, dk and dv (any may be null) of one (batch, kv head): key blocks outermost, then the
// group's heads and the query blocks in order (as the f32 one-pass backward).
KEEL_BF16_TARGET void bf16_grad_task(const Problem& pb, Bf16Tiles way, const Grad& g, int64_t task,
                                     GradWork& w, const OutRows& dq, const OutRows& dk,
                                     const OutRows& dv) {
  const int64_t kvh = task % pb.kv_heads, b = task / pb.kv_heads, D = pb.dim;
  const int64_t tp = padded_seq(pb.seq), per_head = tp * D, nb = pb.blocks();
  pack_grad_operands(pb, g, b, kvh, tp, w);
  std::fill(w.dq.begin(), w.dq.end(), 0.0f);
  const bool score_grads = dq.data || dk.data;
  float *s = w.s.data(), *dp = w.dp.data();
  const TileScope tiles(way);
  for (int64_t kb = 0; kb < nb; ++kb) {
    const int64_t s0 = kb * kBlock, n = std::min(kBlock, pb.seq - s0);
    std::fill(w.dk_t.begin(), w.dk_t.end(), 0.0f);
    std::fill(w.dv_t.begin(), w.dv_t.end(), 0.0f);
    for (int64_t j = 0; j < pb.group; ++j) {
      const int64_t h = kvh * pb.group + j, bh = b * pb.heads + h;
      for (int64_t qb = kb; qb < nb; ++qb) {
        const int64_t i0 = qb * kBlock, rows = std::min(kBlock, pb.seq - i0);
        if (!pb.live(b, i0, i0 + rows, s0)) continue;
        product(way, s, kBlock, w.q.data() + j * per_head + i0 * D, D, w.k_features.data() + s0, tp,
                kBlock, kBlock, D, false);
        scale_and_mask(pb, b, i0, rows, s0, n, s);
        const float* lse = g.lse + bh * pb.seq + i0;
        for (int64_t r = 0; r < rows; ++r) {
          float* row = s + r * kBlock;
          for (int64_t c = 0; c < kBlock; ++c) row[c] = exp_approx(row[c] - lse[r]);
        }
        if (dv.data) {  // dvᵀ[e][c] += Σ_r doutᵀ[e][r] p[r][c]
          tile_pairs_bf16(s, rows, w.p_pairs.data());
          product(way, w.dv_t.data(), kBlock, w.dout_t.data() + j * per_head + i0, tp,
                  w.p_pairs.data(), kBlock, D, kBlock, kBlock, true);
        }
        if (!score_grads) continue;
        product(way, dp, kBlock, w.dout.data() + j * per_head + i0 * D, D, w.v_features.data() + s0,
                tp, kBlock, kBlock, D, false);
        const float* delta = g.delta + bh * pb.seq + i0;
        for (int64_t r = 0; r < rows; ++r) {
          for (int64_t c = 0; c < kBlock; ++c) {
            s[r * kBlock + c] *= dp[r * kBlock + c] - delta[r];
          }
        }
        if (dk.data) {  // dkᵀ[e][c] += Σ_r qᵀ[e][r] ds[r][c]
          tile_pairs_bf16(s, rows, w.ds_pairs.data());
          product(way, w.dk_t.data(), kBlock, w.qt.data() + j * per_head + i0, tp,
                  w.ds_pairs.data(), kBlock, D, kBlock, kBlock, true);
        }
        if (dq.data) {  // dq[r][e] += Σ_c ds[r][c] k[c][e]
          tile_rows_bf16(s, rows, w.ds_rows.data());
          product(way, w.dq.data() + j * per_head + i0 * D, D, w.ds_rows.data(), kBlock,
                  w.k_positions.data() + (s0 / 2) * D, D, kBlock, D, kBlock, true);
        }
      }
    }
    if (dk.data) store_transposed(w.dk_t.data(), D, pb.scale, dk, b, kvh, s0, n);
    if (dv.data) store_transposed(w.dv_t.data(), D, 1.0f, dv, b, kvh, s0, n);
  }
  if (!dq.data) return;
  for (int64_t j = 0; j < pb.group; ++j) {
    for (int64_t t = 0; t < pb.seq; ++t) {
      float* row = dq.row(b, kvh * pb.group + j, t);
      const float* acc = w.dq.data() + j * per_head + t * D;
      for (int64_t e = 0; e < D; ++e) row[e] = acc[e] * pb.scale;
    }
  }
}

}  // namespace

bool bf16_tiles_available(Bf16Tiles way, int64_t dim) {
  switch (way) {
    case Bf16Tiles::amx:
      return dim % 32 == 0 && amx_granted();
    case Bf16Tiles::dot_products:
      return dim % 32 == 0 && dot_bf16_supported();
    case Bf16Tiles::rounding:
      return true;
  }
  return false;
}

Bf16Tiles bf16_tiles(int64_t dim) {
  if (const int forced = forced_way; forced >= 0) {
    const auto way = static_cast<Bf16Tiles>(forced);
    return bf16_tiles_available(way, dim) ? way : Bf16Tiles::rounding;
  }
  for (Bf16Tiles way : {Bf16Tiles::amx, Bf16Tiles::dot_products}) {
    if (bf16_tiles_available(way, dim)) return way;
  }
  return Bf16Tiles::rounding;
}

void attention_bf16(const Problem& pb, Bf16Tiles way, const OutRows& out, float* lse) {
  const ForwardOperands f = forward_operands(pb, out.data != nullptr);
  const int64_t per = forward_floats(pb.dim);
  std::vector<float> work(static_cast<size_t>(per * omp_get_max_threads()));
  const int64_t tasks = pb.batch * pb.heads * pb.blocks();
  for_tasks(tasks, pb.batch * pb.heads * pb.seq * pb.seq * pb.dim, [&](int64_t t) {
    bf16_forward_task(pb, way, f, t, work.data() + per * omp_get_thread_num(), out, lse);
  });
}

void attention_grad_bf16(const Problem& pb, Bf16Tiles way, const Grad& g, const OutRows& dq,
                         const OutRows& dk, const OutRows& dv) {
  std::vector<std::unique_ptr<GradWork>> work(static_cast<size_t>(omp_get_max_threads()));
  const int64_t tp = padded_seq(pb.seq), pairs = pb.batch * pb.kv_heads;
  for_tasks(pairs, pb.batch * pb.heads * pb.seq * pb.seq * pb.dim, [&](int64_t t) {
    auto& w = work[static_cast<size_t>(omp_get_thread_num())];
    if (!w) w = std::make_unique<GradWork>(pb, tp);
    bf16_grad_task(pb, way, g, t, *w, dq, dk, dv);
  });
}

int64_t bf16_attention_scratch(int64_t batch, int64_t heads, int64_t seq, int64_t dim) {
  // Forward: q, k and v in bf16 for every head; backward, per thread: GradWork with the whole
  // group (at most every head).
  const int64_t tp = padded_seq(seq), per_head = tp * dim;
  const int64_t forward =
      3 * batch * heads * per_head * 2 + forward_floats(dim) * 4 * omp_get_num_procs();
  const int64_t grad = (heads * per_head * (4 * 2 + 4) + per_head * 2 + 3 * per_head * 2 +
                        6 * kBlock * kBlock * 4 + 2 * dim * kBlock * 4) *
                       omp_get_num_procs();
  return std::max(forward, grad);
}

#else  // not x86-64: the bf16 passes round in the f32 kernels

bool bf16_tiles_available(Bf16Tiles way, int64_t) {
  return way == Bf16Tiles::rounding;
}
Bf16Tiles bf16_tiles(int64_t) {
  return Bf16Tiles::rounding;
}
void attention_bf16(const Problem&, Bf16Tiles, const OutRows&, float*) {
  fail("internal: attention_bf16 called where bf16 tiles do not exist");
}
void attention_grad_bf16(const Problem&, Bf16Tiles, const Grad&, const OutRows&, const OutRows&,
                         const OutRows&) {
  fail("internal: attention_grad_bf16 called where bf16 tiles do not exist");
}
int64_t bf16_attention_scratch(int64_t, int64_t, int64_t, int64_t) {
  return 0;
}

#endif

}  // namespace keel::cpu::detail::attn
