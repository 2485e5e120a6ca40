#pragma once
// Internal to the fused attention kernels (kernel_attention*.cpp): the problem as the kernels see
// it and the tile routines they share. Tiles are kBlock query rows by kBlock keys, fixed, so
// every value is computed in the same order whatever the thread count.
#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <optional>
#include <vector>

#include "backend/cpu/kernel_util.h"

#define KEEL_ATTN_INLINE inline __attribute__((always_inline))

namespace keel::cpu::detail::attn {

constexpr int64_t kBlock = 64;
constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// A [B, H, T, D] operand as the kernels index it: rows of D contiguous floats at any strides,
// so a head slice of a [B, T, 3C] projection or a [B, T, H, D] result is read where it lies.
template <class T>
struct HeadRows {
  T* data = nullptr;
  int64_t sb = 0, sh = 0, st = 0;  // strides of batch, head and position, in elements
  KEEL_ATTN_INLINE T* row(int64_t b, int64_t h, int64_t t) const {
    return data + b * sb + h * sh + t * st;
  }
};
using InRows = HeadRows<const float>;
using OutRows = HeadRows<float>;

// q [B, H, T, D], k and v [B, KV, T, D], doc ids [B, T] widened to int64 (empty: none).
struct Problem {
  int64_t batch = 0, heads = 0, kv_heads = 0, seq = 0, dim = 0, group = 1;
  InRows q, k, v;
  std::vector<int64_t> doc;
  float scale = 1.0f;
  // matmul_precision = bf16 on the rounding way: q, k, v (and dout) are rounded copies, and the
  // tiles round probabilities and score gradients before their products (round_tile).
  bool round_tiles = false;

  int64_t blocks() const { return (seq + kBlock - 1) / kBlock; }
  std::vector<int64_t> doc_lo, doc_hi;  // per (batch, block): its least and greatest doc id

  // Whether some query of the block [i0, i1) may see some key of the block starting at s0 in
  // row b: causal, and the doc id ranges of the two blocks overlap.
  bool live(int64_t b, int64_t i0, int64_t i1, int64_t s0) const;
  // Whether both blocks lie in one document (always, without doc ids).
  bool one_document(int64_t b, int64_t i0, int64_t s0) const {
    if (doc.empty()) return true;
    const size_t q = static_cast<size_t>(b * blocks() + i0 / kBlock);
    const size_t k = static_cast<size_t>(b * blocks() + s0 / kBlock);
    return doc_lo[q] == doc_hi[q] && doc_lo[k] == doc_hi[k] && doc_lo[q] == doc_lo[k];
  }
};

// The query block a per-(batch, head, query block) task covers: rows [i0, i0 + rows) of head h.
struct QueryBlock {
  int64_t qb, h, b, i0, rows;
};
inline QueryBlock query_block(const Problem& pb, int64_t task) {
  const int64_t nb = pb.blocks(), qb = task % nb, bh = task / nb;
  const int64_t i0 = qb * kBlock;
  return {qb, bh % pb.heads, bh / pb.heads, i0, std::min(kBlock, pb.seq - i0)};
}

// Checks the views (f32, rank 4, matching dims, doc i32/i64 [B, T] or null) and reads them.
Problem make_problem(const char* op, const keel_view* q, const keel_view* k, const keel_view* v,
                     const keel_view* doc, double scale);
// Fails unless precision is KEEL_MATMUL_F32 or KEEL_MATMUL_BF16.
void check_precision(const char* op, int32_t precision);
// Fails unless `x` is f32 with the given dims; its rows of the last dim contiguous (strided views
// allowed) or, with `flat`, all of it row-major.
void check_result(const char* op, const char* what, const keel_view* x,
                  const std::vector<int64_t>& want, bool flat = false);
// A checked [B, H, T, D] operand (check_result's rules) and its strides.
OutRows rows_of(const char* op, const char* what, const keel_view* x,
                const std::vector<int64_t>& want);
InRows in_rows_of(const char* op, const char* what, const keel_view* x,
                  const std::vector<int64_t>& want);
// k or v of every (batch, kv head) transposed once per call, [B * KV][D][ld] with ld the
// sequence rounded up to whole blocks plus kHeadsPad (zeros past the sequence), so tiles read
// key blocks as bt rows.
struct HeadsT {
  std::vector<float> data;
  int64_t ld = 0;
  const float* block(const Problem& pb, int64_t b, int64_t kv, int64_t s0) const {
    return data.data() + (b * pb.kv_heads + kv) * pb.dim * ld + s0;
  }
};
// A padded sequence is a multiple of 64 floats (4 cache lines): at that row stride every fourth
// row of a block falls in the same L1 sets (at T = 1024 all 64 do), and a score tile ran at 1/2
// to 3/4 of its rate on the AVX2 host. One more line per row puts the 64 rows in distinct sets.
constexpr int64_t kHeadsPad = 16;
HeadsT transpose_heads(const Problem& pb, const InRows& x);
// Per-thread scratch floats of the tile routines for head dim D.
int64_t tile_floats(int64_t dim);

// What the gradient passes read besides the problem: out and dout, the rows' log-sum-exp
// [B, H, T], and delta = dout·out per row [B, H, T]. With bf16 products delta takes the rounded
// dout that dP = dout·vᵀ sees, so each row of dS = P (dP - delta) still sums to about zero: with
// the f32 dout, dq and dk drifted along the mean key and query (a 200-step code-s run in bf16 went
// 0.19 nats above f32 at its peak learning rate, against 0.05 with the rounded dout).
struct Grad {
  InRows out, dout;
  const float* lse = nullptr;
  const float* delta = nullptr;
};

// x rounded to a bf16 value (bf16_bits' rule), kept in f32.
KEEL_ATTN_INLINE float bf16_rounded(float x) {
  return std::bit_cast<float>(bf16_bits(x) << 16);
}
// Rows [0, rows) of a kBlock-wide tile rounded to bf16 values, into dst (may be src).
KEEL_ATTN_INLINE void round_tile(const float* src, int64_t rows, float* dst) {
  for (int64_t i = 0; i < rows * kBlock; ++i) dst[i] = bf16_rounded(src[i]);
}
// A row-major bf16-rounded copy of a [B, heads, T, D] operand (kept in `store`), and its rows.
InRows rounded_rows(const Problem& pb, const InRows& x, int64_t heads, std::vector<float>& store);

// How matmul_precision = bf16 runs the tile products (kernel_attention_bf16.cpp): AMX tiles
// (AMX-BF16, tile state granted by Linux), AVX512-BF16 dot products (vdpbf16ps), or the f32
// tiles on rounded operands. The first two need D a multiple of 32. Each way is deterministic
// and independent of the thread count; they differ in the order of the f32 sums.
enum class Bf16Tiles { amx, dot_products, rounding };
bool bf16_tiles_available(Bf16Tiles way, int64_t dim);
// The fastest way available (or the one forced, where available).
Bf16Tiles bf16_tiles(int64_t dim);
// Tests run every way the host has: a way forces it, nullopt restores the fastest.
void force_bf16_tiles(std::optional<Bf16Tiles> way);
// The two passes with AMX or dot products.
void attention_bf16(const Problem& pb, Bf16Tiles way, const OutRows& out, float* lse);
void attention_grad_bf16(const Problem& pb, Bf16Tiles way, const Grad& g, const OutRows& dq,
                         const OutRows& dk, const OutRows& dv);
// Scratch bytes of those passes beyond the f32 tiles (every processor counted).
int64_t bf16_attention_scratch(int64_t batch, int64_t heads, int64_t seq, int64_t dim);

// e^x for x <= ~88 (Cephes' expf polynomial, within 2 ulp), 0 below -87; plain arithmetic so
// loops over it vectorize.
KEEL_ATTN_INLINE float exp_approx(float x) {
  const bool under = x < -87.0f;
  const float xc = under ? -87.0f : x;
  const float n = (xc * 1.44269504088896341f + 12582912.0f) - 12582912.0f;  // round to nearest
  const float r = (xc - n * 0.693359375f) - n * -2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  const float e = p * r * r + r + 1.0f;
  const float two_n = std::bit_cast<float>((static_cast<int32_t>(n) + 127) << 23);
  return under ? 0.0f : e * two_n;
}

// kt[d][c] = x[c][d] for c < n (rows of x at stride ldx), 0 for n <= c < kBlock: a key (or
// value) block transposed so the score loops run along the keys.
KEEL_ATTN_INLINE void transpose_block(const float* x, int64_t ldx, int64_t n, int64_t dim,
                                      float* kt) {
  for (int64_t d = 0; d < dim; ++d) {
    float* row = kt + d * kBlock;
    for (int64_t c = 0; c < n; ++c) row[c] = x[c * ldx + d];
    for (int64_t c = n; c < kBlock; ++c) row[c] = 0.0f;
  }
}

// The tiles keep their running sums in registers: per row, two vector registers of kLanes
// floats (8 for AVX2, 16 for AVX-512), four rows at a time, so 8 independent FMA chains cover
// the FMA units' latency and each loaded pair feeds 8 FMAs. The registers are GCC vector types
// (loops over plain arrays of sums left them in memory: a load and a store around every FMA).
// Every element still sums in the same order, so both widths give the same bytes.
// (A typedef in a class template: GCC drops vector_size from an alias template.)
template <int64_t kLanes>
struct VecOf {
  typedef float type __attribute__((vector_size(kLanes * 4)));
};
static_assert(sizeof(VecOf<8>::type) == 32 && sizeof(VecOf<16>::type) == 64);

// Loads and stores through memcpy (any alignment; no vector passed or returned by value, whose
// ABI differs between ISA clones).
template <class V>
KEEL_ATTN_INLINE void load_vec(V& v, const float* x) {
  __builtin_memcpy(&v, x, sizeof v);
}
template <class V>
KEEL_ATTN_INLINE void store_vec(float* x, const V& v) {
  __builtin_memcpy(x, &v, sizeof v);
}

// The wider registers when the running clone has them (it is the AVX-512 one).
KEEL_ATTN_INLINE bool wide_vectors() {
#if defined(__x86_64__)
  return __builtin_cpu_supports("avx512f");
#else
  return false;
#endif
}

// Causal tiles: row r of a tile sees keys c <= r + diag, where diag is the query block's start
// minus the key block's (0 on the diagonal); kAllKeys: every key. Skipped keys are those the
// mask sets to -inf (or whose probability is 0), so skipping them changes no result.
constexpr int64_t kAllKeys = kBlock;

// s[r][c] = scale · a[r]·b[c] for r < rows, c < kBlock, with a rows at stride lda and b given
// transposed (bt[d][c], rows of bt at stride ldb); each sum runs over d in increasing order.
// Chunks of columns no row of a group may see (past r + diag) are written as 0.
template <int64_t kLanes>
KEEL_ATTN_INLINE void tile_dot_lanes(const float* a, int64_t lda, int64_t rows, const float* bt,
                                     int64_t ldb, int64_t dim, float scale, float* s,
                                     int64_t diag) {
  using V = typename VecOf<kLanes>::type;
  constexpr int64_t kCols = 2 * kLanes;
  static_assert(kBlock % kCols == 0);
  int64_t r = 0;
  for (; r + 4 <= rows; r += 4) {
    const float* a0 = a + r * lda;
    const int64_t seen = r + 4 + diag;  // keys some row of the group sees: c < seen
    for (int64_t c0 = 0; c0 < kBlock; c0 += kCols) {
      V s0l = {}, s0h = {}, s1l = {}, s1h = {}, s2l = {}, s2h = {}, s3l = {}, s3h = {};
      for (int64_t d = 0; c0 < seen && d < dim; ++d) {
        V bl, bh;
        load_vec(bl, bt + d * ldb + c0);
        load_vec(bh, bt + d * ldb + c0 + kLanes);
        const float x0 = a0[d], x1 = a0[lda + d], x2 = a0[2 * lda + d], x3 = a0[3 * lda + d];
        s0l += x0 * bl;
        s0h += x0 * bh;
        s1l += x1 * bl;
        s1h += x1 * bh;
        s2l += x2 * bl;
        s2h += x2 * bh;
        s3l += x3 * bl;
        s3h += x3 * bh;
      }
      float* out = s + r * kBlock + c0;
      store_vec(out, s0l * scale);
      store_vec(out + kLanes, s0h * scale);
      store_vec(out + kBlock, s1l * scale);
      store_vec(out + kBlock + kLanes, s1h * scale);
      store_vec(out + 2 * kBlock, s2l * scale);
      store_vec(out + 2 * kBlock + kLanes, s2h * scale);
      store_vec(out + 3 * kBlock, s3l * scale);
      store_vec(out + 3 * kBlock + kLanes, s3h * scale);
    }
  }
  for (; r < rows; ++r) {
    for (int64_t c0 = 0; c0 < kBlock; c0 += kLanes) {
      V s0 = {};
      for (int64_t d = 0; c0 < r + 1 + diag && d < dim; ++d) {
        V b;
        load_vec(b, bt + d * ldb + c0);
        s0 += a[r * lda + d] * b;
      }
      store_vec(s + r * kBlock + c0, s0 * scale);
    }
  }
}

KEEL_ATTN_INLINE void tile_dot(const float* a, int64_t lda, int64_t rows, const float* bt,
                               int64_t ldb, int64_t dim, float scale, float* s,
                               int64_t diag = kAllKeys) {
  if (wide_vectors()) return tile_dot_lanes<16>(a, lda, rows, bt, ldb, dim, scale, s, diag);
  tile_dot_lanes<8>(a, lda, rows, bt, ldb, dim, scale, s, diag);
}

// acc[r][e] += sum over c < n of p[r][c] · x[c][e] for r < rows (p at stride kBlock, x rows at
// stride ldx, acc rows at ldacc), c in increasing order. kT: p is read transposed (p[c][r]), so a
// tile of probabilities feeds dV += P^T dO without being transposed first. Head dims that are
// a multiple of 16 run in registers (tile_dot_lanes' scheme); any other dim takes the plain
// loop, in the same order. With diag, a group of rows skips the c whose p is 0 for all of
// them (see first_c and end_c): adding p = 0 is an exact no-op on a sum that starts at +0.
template <bool kT>
KEEL_ATTN_INLINE float tile_p(const float* p, int64_t r, int64_t c) {
  return kT ? p[c * kBlock + r] : p[r * kBlock + c];
}

// The c a group of `group` rows from r needs: p[r][c] is 0 past key r + diag, and p read
// transposed (r a key, c a query) is 0 before query r - diag.
template <bool kT>
KEEL_ATTN_INLINE int64_t first_c(int64_t r, int64_t diag) {
  return kT ? std::max<int64_t>(0, r - diag) : 0;
}
template <bool kT>
KEEL_ATTN_INLINE int64_t end_c(int64_t r, int64_t group, int64_t n, int64_t diag) {
  return kT ? n : std::min(n, r + group + diag);
}

template <int64_t kLanes, bool kT>
KEEL_ATTN_INLINE void tile_acc_lanes(const float* p, int64_t rows, int64_t n, const float* x,
                                     int64_t ldx, int64_t dim, float* acc, int64_t ldacc,
                                     int64_t diag = kAllKeys) {
  using V = typename VecOf<kLanes>::type;
  constexpr int64_t kCols = 2 * kLanes;
  int64_t r = 0;
  for (; r + 4 <= rows; r += 4) {
    for (int64_t e0 = 0; e0 < dim; e0 += kCols) {
      float* a = acc + r * ldacc + e0;
      V a0l, a0h, a1l, a1h, a2l, a2h, a3l, a3h;
      load_vec(a0l, a);
      load_vec(a0h, a + kLanes);
      load_vec(a1l, a + ldacc);
      load_vec(a1h, a + ldacc + kLanes);
      load_vec(a2l, a + 2 * ldacc);
      load_vec(a2h, a + 2 * ldacc + kLanes);
      load_vec(a3l, a + 3 * ldacc);
      load_vec(a3h, a + 3 * ldacc + kLanes);
      for (int64_t c = first_c<kT>(r, diag); c < end_c<kT>(r, 4, n, diag); ++c) {
        V xl, xh;
        load_vec(xl, x + c * ldx + e0);
        load_vec(xh, x + c * ldx + e0 + kLanes);
        const float p0 = tile_p<kT>(p, r, c), p1 = tile_p<kT>(p, r + 1, c);
        const float p2 = tile_p<kT>(p, r + 2, c), p3 = tile_p<kT>(p, r + 3, c);
        a0l += p0 * xl;
        a0h += p0 * xh;
        a1l += p1 * xl;
        a1h += p1 * xh;
        a2l += p2 * xl;
        a2h += p2 * xh;
        a3l += p3 * xl;
        a3h += p3 * xh;
      }
      store_vec(a, a0l);
      store_vec(a + kLanes, a0h);
      store_vec(a + ldacc, a1l);
      store_vec(a + ldacc + kLanes, a1h);
      store_vec(a + 2 * ldacc, a2l);
      store_vec(a + 2 * ldacc + kLanes, a2h);
      store_vec(a + 3 * ldacc, a3l);
      store_vec(a + 3 * ldacc + kLanes, a3h);
    }
  }
  for (; r < rows; ++r) {
    for (int64_t e0 = 0; e0 < dim; e0 += kLanes) {
      float* a = acc + r * ldacc + e0;
      V a0;
      load_vec(a0, a);
      for (int64_t c = first_c<kT>(r, diag); c < end_c<kT>(r, 1, n, diag); ++c) {
        V xc;
        load_vec(xc, x + c * ldx + e0);
        a0 += tile_p<kT>(p, r, c) * xc;
      }
      store_vec(a, a0);
    }
  }
}

template <bool kT = false>
KEEL_ATTN_INLINE void tile_acc(const float* p, int64_t rows, int64_t n, const float* x, int64_t ldx,
                               int64_t dim, float* acc, int64_t ldacc, int64_t diag = kAllKeys) {
  if (dim % 32 == 0 && wide_vectors()) {
    return tile_acc_lanes<16, kT>(p, rows, n, x, ldx, dim, acc, ldacc, diag);
  }
  if (dim % 16 == 0) return tile_acc_lanes<8, kT>(p, rows, n, x, ldx, dim, acc, ldacc, diag);
  for (int64_t r = 0; r < rows; ++r) {
    float* a0 = acc + r * ldacc;
    for (int64_t c = first_c<kT>(r, diag); c < end_c<kT>(r, 1, n, diag); ++c) {
      const float p0 = tile_p<kT>(p, r, c);
      const float* xc = x + c * ldx;
      for (int64_t e = 0; e < dim; ++e) a0[e] += p0 * xc[e];
    }
  }
}

// acc[c][e] += sum over r < rows of p[r][c] · x[r][e] for c < n (acc contiguous, dim a row): the
// transposed product, in the same order as transposing p and calling tile_acc.
KEEL_ATTN_INLINE void tile_acc_t(const float* p, int64_t rows, int64_t n, const float* x,
                                 int64_t ldx, int64_t dim, float* acc, int64_t diag = kAllKeys) {
  tile_acc<true>(p, n, rows, x, ldx, dim, acc, dim, diag);
}

// Max and sum of a tile row in 16 fixed lanes (a fixed order that vectorizes).
constexpr int64_t kLanes = 16;
// n: the row's length, a multiple of kLanes (a tile's kBlock, or the bf16 forward's whole pass).
KEEL_ATTN_INLINE float row_max(const float* row, float init, int64_t n = kBlock) {
  float lane[kLanes];
  for (int64_t j = 0; j < kLanes; ++j) lane[j] = init;
  for (int64_t c = 0; c < n; c += kLanes) {
    for (int64_t j = 0; j < kLanes; ++j) lane[j] = lane[j] > row[c + j] ? lane[j] : row[c + j];
  }
  float m = lane[0];
  for (int64_t j = 1; j < kLanes; ++j) m = m > lane[j] ? m : lane[j];
  return m;
}
KEEL_ATTN_INLINE float row_sum(const float* row, int64_t n = kBlock) {
  float lane[kLanes] = {};
  for (int64_t c = 0; c < n; c += kLanes) {
    for (int64_t j = 0; j < kLanes; ++j) lane[j] += row[c + j];
  }
  float s = 0.0f;
  for (int64_t j = 0; j < kLanes; ++j) s += lane[j];
  return s;
}

// Sets s[r][c] to -inf where query i0 + r may not see key s0 + c (later, another document, or
// past the n keys of the block). Branch-free loops, so they vectorize.
KEEL_ATTN_INLINE void mask_tile(const Problem& pb, int64_t b, int64_t i0, int64_t rows, int64_t s0,
                                int64_t n, float* s, int64_t ld = kBlock) {
  const int64_t* doc = pb.doc.empty() ? nullptr : pb.doc.data() + b * pb.seq;
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t i = i0 + r;
    const int64_t seen = std::clamp<int64_t>(i - s0 + 1, 0, n);  // keys c < seen: not later
    float* row = s + r * ld;
    if (doc) {
      const int64_t di = doc[i];
      const int64_t* dk = doc + s0;
      for (int64_t c = 0; c < seen; ++c) row[c] = dk[c] == di ? row[c] : kNegInf;
    }
    for (int64_t c = seen; c < kBlock; ++c) row[c] = kNegInf;
  }
}

// A forward task's last step: each row's log-sum-exp m + log l (when lse) and out = acc / l
// (when out), for rows [i0, i0 + rows) of head h (acc rows of D floats).
KEEL_ATTN_INLINE void finish_rows(const Problem& pb, int64_t b, int64_t h, int64_t i0, int64_t rows,
                                  const float* acc, const float* m, const float* l,
                                  const OutRows& out, float* lse) {
  const int64_t row0 = (b * pb.heads + h) * pb.seq + i0, D = pb.dim;
  for (int64_t r = 0; r < rows; ++r) {
    if (lse) lse[row0 + r] = m[r] + std::log(l[r]);
    if (!out.data) continue;
    const float inv = 1.0f / l[r];
    float* o = out.row(b, h, i0 + r);
    for (int64_t e = 0; e < D; ++e) o[e] = acc[r * D + e] * inv;
  }
}

// Whether mask_tile can change anything for this pair of blocks: the keys reach past the first
// query, the block is partial, or the blocks are not wholly inside one document.
inline bool needs_mask(const Problem& pb, int64_t b, int64_t i0, int64_t s0, int64_t n) {
  return s0 + n - 1 > i0 || n < kBlock || !pb.one_document(b, i0, s0);
}

// delta[r] = dout[r]·out[r] over dim (rows at strides lda, ldb), for the softmax gradient.
// round_a: a's elements rounded to bf16 first.
KEEL_ATTN_INLINE void row_dots(const float* a, int64_t lda, const float* b, int64_t ldb,
                               int64_t rows, int64_t dim, float* out, bool round_a = false) {
  // Eight rows at a time: each row's sum still runs over e in order, but eight chains of
  // dependent adds overlap (one chain at a time was latency-bound: 2 % of a gpt2-s bf16 step).
  constexpr int64_t kRows = 8;
  int64_t r = 0;
  for (; r + kRows <= rows; r += kRows) {
    float acc[kRows] = {};
    for (int64_t e = 0; e < dim; ++e) {
      for (int64_t i = 0; i < kRows; ++i) {
        const float x = a[(r + i) * lda + e];
        acc[i] += (round_a ? bf16_rounded(x) : x) * b[(r + i) * ldb + e];
      }
    }
    for (int64_t i = 0; i < kRows; ++i) out[r + i] = acc[i];
  }
  for (; r < rows; ++r) {
    float acc = 0.0f;
    for (int64_t e = 0; e < dim; ++e) {
      const float x = a[r * lda + e];
      acc += (round_a ? bf16_rounded(x) : x) * b[r * ldb + e];
    }
    out[r] = acc;
  }
}

// Runs f(task) for task in [0, n) over the OpenMP team, dynamically: each task writes its own
// outputs only, so the order tasks run in changes nothing.
template <class F>
void for_tasks(int64_t n, int64_t work, F&& f) {
  const bool parallel = n > 1 && work >= kParallelMin && !omp_in_parallel();
#pragma omp parallel for schedule(dynamic, 1) if (parallel)
  for (int64_t t = 0; t < n; ++t) f(t);
}

}  // namespace keel::cpu::detail::attn
