// Fused causal attention, forward (and the rows' log-sum-exp): flash-attention tiling with an
// online softmax. A task is (batch, head, block of query rows); it walks the key blocks up to
// the diagonal, skipping blocks whose documents cannot meet its rows, so nothing T x T exists.
#include <fmt/ranges.h>

#include <cmath>

#include "backend/cpu/kernel_attention.h"
#include "backend/cpu/kernel_ops.h"

namespace keel::cpu::detail {
namespace attn {

bool Problem::live(int64_t b, int64_t i0, int64_t i1, int64_t s0) const {
  if (s0 >= i1) return false;  // every key after every query
  if (doc.empty()) return true;
  const size_t q = static_cast<size_t>(b * blocks() + i0 / kBlock);
  const size_t k = static_cast<size_t>(b * blocks() + s0 / kBlock);
  return doc_lo[k] <= doc_hi[q] && doc_lo[q] <= doc_hi[k];
}

void check_result(const char* op, const char* what, const keel_view* x,
                  const std::vector<int64_t>& want, bool flat) {
  check_view(*x, op, what, !flat);
  if (x->dtype != static_cast<int32_t>(DType::f32) || dims(*x) != want) {
    fail("{}: {} is {}; expected f32 of the dims {}", op, what, view_str(*x), fmt::join(want, "x"));
  }
  if (x->strided && x->rank > 0 && x->stride[x->rank - 1] != 1 && x->shape[x->rank - 1] > 1) {
    fail("{}: {} {} has last-dim stride {}; expected each row contiguous (stride 1)", op, what,
         view_str(*x), x->stride[x->rank - 1]);
  }
}

OutRows rows_of(const char* op, const char* what, const keel_view* x,
                const std::vector<int64_t>& want) {
  check_result(op, what, x, want);
  OutRows r{static_cast<float*>(x->data), 0, 0, 0};
  if (x->strided) {
    r.sb = x->stride[0];
    r.sh = x->stride[1];
    r.st = x->stride[2];
  } else {
    r.st = want[3];
    r.sh = want[2] * r.st;
    r.sb = want[1] * r.sh;
  }
  return r;
}

InRows in_rows_of(const char* op, const char* what, const keel_view* x,
                  const std::vector<int64_t>& want) {
  const OutRows r = rows_of(op, what, x, want);
  return {r.data, r.sb, r.sh, r.st};
}

Problem make_problem(const char* op, const keel_view* q, const keel_view* k, const keel_view* v,
                     const keel_view* doc, double scale) {
  check_view(*q, op, "q", true);
  check_view(*k, op, "k", true);
  if (q->dtype != static_cast<int32_t>(DType::f32) || q->rank != 4) {
    fail("{}: q is {}; expected f32 [batch, heads, seq, head_dim]", op, view_str(*q));
  }
  Problem p;
  p.batch = q->shape[0];
  p.heads = q->shape[1];
  p.seq = q->shape[2];
  p.dim = q->shape[3];
  if (k->rank != 4 || k->shape[1] < 1) fail("{}: k is {}; expected rank 4", op, view_str(*k));
  p.kv_heads = k->shape[1];
  const std::vector<int64_t> kv = {p.batch, p.kv_heads, p.seq, p.dim};
  p.k = in_rows_of(op, "k", k, kv);
  if (p.heads % p.kv_heads != 0) {
    fail("{}: {} query heads are not a multiple of {} kv heads", op, p.heads, p.kv_heads);
  }
  p.group = p.heads / p.kv_heads;
  p.q = in_rows_of(op, "q", q, dims(*q));
  if (v) p.v = in_rows_of(op, "v", v, kv);
  p.scale = static_cast<float>(scale);
  if (doc) {
    check_view(*doc, op, "doc ids");  // row-major: read flat
    const std::vector<int64_t> want = {p.batch, p.seq};
    if (dims(*doc) != want || !is_int(static_cast<DType>(doc->dtype))) {
      fail("{}: doc ids are {}; expected i32 or i64 [{}, {}]", op, view_str(*doc), p.batch, p.seq);
    }
    p.doc.resize(static_cast<size_t>(p.batch * p.seq));
    for (size_t i = 0; i < p.doc.size(); ++i) {
      p.doc[i] = doc->dtype == static_cast<int32_t>(DType::i32)
                     ? static_cast<const int32_t*>(doc->data)[i]
                     : static_cast<const int64_t*>(doc->data)[i];
    }
    const int64_t nb = p.blocks();
    p.doc_lo.resize(static_cast<size_t>(p.batch * nb));
    p.doc_hi.resize(p.doc_lo.size());
    for (int64_t b = 0; b < p.batch; ++b) {
      for (int64_t blk = 0; blk < nb; ++blk) {
        const int64_t* d = p.doc.data() + b * p.seq + blk * kBlock;
        const auto [lo, hi] = std::minmax_element(d, d + std::min(kBlock, p.seq - blk * kBlock));
        p.doc_lo[static_cast<size_t>(b * nb + blk)] = *lo;
        p.doc_hi[static_cast<size_t>(b * nb + blk)] = *hi;
      }
    }
  }
  return p;
}

namespace {

// dst[d][s] = src[s][d] for one head (rows of src at stride lds), in 16 x 16 squares so reads
// and writes stay in L1.
KEEL_CPU_CLONES
void transpose_head(const float* src, int64_t lds, int64_t seq, int64_t dim, int64_t ld,
                    float* dst) {
  constexpr int64_t kSq = 16;
  for (int64_t s0 = 0; s0 < seq; s0 += kSq) {
    const int64_t s1 = std::min(seq, s0 + kSq);
    for (int64_t d0 = 0; d0 < dim; d0 += kSq) {
      const int64_t d1 = std::min(dim, d0 + kSq);
      for (int64_t d = d0; d < d1; ++d) {
        for (int64_t s = s0; s < s1; ++s) dst[d * ld + s] = src[s * lds + d];
      }
    }
  }
}

}  // namespace

HeadsT transpose_heads(const Problem& pb, const InRows& x) {
  HeadsT t;
  t.ld = pb.blocks() * kBlock + kHeadsPad;
  t.data.assign(static_cast<size_t>(pb.batch * pb.kv_heads * pb.dim * t.ld), 0.0f);
  const int64_t heads = pb.batch * pb.kv_heads;
  for_tasks(heads, heads * pb.seq * pb.dim, [&](int64_t bk) {
    transpose_head(x.row(bk / pb.kv_heads, bk % pb.kv_heads, 0), x.st, pb.seq, pb.dim, t.ld,
                   t.data.data() + bk * pb.dim * t.ld);
  });
  return t;
}

InRows rounded_rows(const Problem& pb, const InRows& x, int64_t heads, std::vector<float>& store) {
  const int64_t per_head = pb.seq * pb.dim;
  store.resize(static_cast<size_t>(pb.batch * heads * per_head));
  for_tasks(pb.batch * heads, pb.batch * heads * per_head, [&](int64_t bh) {
    float* dst = store.data() + bh * per_head;
    for (int64_t t = 0; t < pb.seq; ++t) {
      const float* row = x.row(bh / heads, bh % heads, t);
      for (int64_t e = 0; e < pb.dim; ++e) dst[t * pb.dim + e] = bf16_rounded(row[e]);
    }
  });
  return {store.data(), heads * per_head, per_head, pb.dim};
}

int64_t tile_floats(int64_t dim) {
  return 4 * kBlock * dim + 3 * kBlock * kBlock + 4 * kBlock;
}

namespace {

// One query block of one head: out rows (when `out`) and their log-sum-exp (when `lse`).
KEEL_CPU_CLONES
void forward_task(const Problem& pb, const HeadsT& kt, int64_t task, float* work,
                  const OutRows& out, float* lse) {
  const int64_t D = pb.dim;
  const auto [qb, h, b, i0, rows] = query_block(pb, task);
  float* s = work;
  float* acc = s + kBlock * kBlock;
  float* m = acc + kBlock * D;
  float* l = m + kBlock;
  const float* qrows = pb.q.row(b, h, i0);
  for (int64_t r = 0; r < rows; ++r) {
    m[r] = kNegInf;
    l[r] = 0.0f;
  }
  if (out.data) std::fill(acc, acc + rows * D, 0.0f);
  for (int64_t kb = 0; kb <= qb; ++kb) {
    const int64_t s0 = kb * kBlock, n = std::min(kBlock, pb.seq - s0);
    if (!pb.live(b, i0, i0 + rows, s0)) continue;
    tile_dot(qrows, pb.q.st, rows, kt.block(pb, b, h / pb.group, s0), kt.ld, D, pb.scale, s,
             i0 - s0);
    if (needs_mask(pb, b, i0, s0, n)) mask_tile(pb, b, i0, rows, s0, n, s);
    for (int64_t r = 0; r < rows; ++r) {
      float* row = s + r * kBlock;
      const float mx = row_max(row, m[r]);
      if (mx == kNegInf) {  // nothing visible yet: this block adds nothing to the row
        std::fill(row, row + kBlock, 0.0f);
        continue;
      }
      const float alpha = exp_approx(m[r] - mx);
      for (int64_t c = 0; c < kBlock; ++c) row[c] = exp_approx(row[c] - mx);
      const float sum = row_sum(row);
      l[r] = l[r] * alpha + sum;
      m[r] = mx;
      if (out.data && alpha != 1.0f) {
        float* a = acc + r * D;
        for (int64_t e = 0; e < D; ++e) a[e] *= alpha;
      }
    }
    if (!out.data) continue;
    if (pb.round_tiles) round_tile(s, rows, s);  // after the row sums, which stay f32
    tile_acc(s, rows, n, pb.v.row(b, h / pb.group, s0), pb.v.st, D, acc, D, i0 - s0);
  }
  finish_rows(pb, b, h, i0, rows, acc, m, l, out, lse);
}

}  // namespace
}  // namespace attn

using namespace attn;

void attn::check_precision(const char* op, int32_t precision) {
  if (precision != KEEL_MATMUL_F32 && precision != KEEL_MATMUL_BF16) {
    fail("{}: precision {} is neither KEEL_MATMUL_F32 nor KEEL_MATMUL_BF16", op, precision);
  }
}

void attention(const keel_view* q, const keel_view* k, const keel_view* v, const keel_view* doc,
               keel_view* out, keel_view* lse, double scale, int32_t precision) {
  const char* op = out ? "attention" : "attention_lse";
  check_precision(op, precision);
  Problem pb = make_problem(op, q, k, out ? v : nullptr, doc, scale);
  if (!out && !lse) fail("attention: neither out nor lse was given");
  const OutRows o = out ? rows_of(op, "out", out, dims(*q)) : OutRows{};
  if (lse) check_result(op, "lse", lse, {pb.batch, pb.heads, pb.seq}, true);
  float* ls = lse ? static_cast<float*>(lse->data) : nullptr;
  const bool bf16 = precision == KEEL_MATMUL_BF16;
  if (bf16) {
    if (const Bf16Tiles way = bf16_tiles(pb.dim); way != Bf16Tiles::rounding) {
      return attention_bf16(pb, way, o, ls);
    }
  }
  std::vector<float> rounded_q, rounded_k, rounded_v;
  if (bf16) {
    pb.q = rounded_rows(pb, pb.q, pb.heads, rounded_q);
    pb.k = rounded_rows(pb, pb.k, pb.kv_heads, rounded_k);
    if (out) pb.v = rounded_rows(pb, pb.v, pb.kv_heads, rounded_v);
    pb.round_tiles = true;
  }
  const int64_t tasks = pb.batch * pb.heads * pb.blocks();
  std::vector<float> work(static_cast<size_t>(tile_floats(pb.dim) * omp_get_max_threads()));
  const HeadsT kt = transpose_heads(pb, pb.k);
  for_tasks(tasks, pb.batch * pb.heads * pb.seq * pb.seq * pb.dim, [&](int64_t t) {
    forward_task(pb, kt, t, work.data() + tile_floats(pb.dim) * omp_get_thread_num(), o, ls);
  });
}

int64_t attention_scratch(const keel_view* q, int32_t precision) {
  if (q->rank != 4) return 0;
  // Tiles per thread, k and v transposed per head (q's heads bound the kv heads) and the
  // gradients' delta per row; bf16: rounded copies of q, k, v and dout, or the bf16 passes'
  // operands.
  const int64_t B = q->shape[0], H = q->shape[1], T = q->shape[2], D = q->shape[3];
  const int64_t padded = (T + kBlock - 1) / kBlock * kBlock + kHeadsPad;
  const int64_t f32 =
      (tile_floats(D) * omp_get_num_procs() + 2 * B * H * D * padded + B * H * T) * 4;
  if (precision != KEEL_MATMUL_BF16) return f32;
  return std::max(f32 + 4 * B * H * T * D * 4, bf16_attention_scratch(B, H, T, D) + B * H * T * 4);
}

}  // namespace keel::cpu::detail
