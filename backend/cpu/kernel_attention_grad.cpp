// Fused causal attention, backward (flash-attention-2 style): the probabilities are recomputed
// per tile from q, k and the rows' log-sum-exp. Asked for dq with dk and/or dv, one pass per
// (batch, kv head) computes all of them; otherwise dq is one task per (batch, head, query block)
// and dk and dv one task per (batch, kv head, key block) that walks the group's query heads and
// the query blocks in a fixed order. Every gradient element is summed by one thread in one order
// (no atomics, no per-thread partial sums): the bytes do not depend on the thread count.
#include "backend/cpu/kernel_attention.h"
#include "backend/cpu/kernel_ops.h"

namespace keel::cpu::detail {
namespace attn {
namespace {

// The one-pass backward (grad_task) has a task per (batch, kv head); with fewer than this many
// per thread, the separate dq and dk/dv passes' finer tasks keep the team busier. Both paths give
// the same bytes, so the choice may depend on the thread count.
constexpr int64_t kFusedTasksPerThread = 2;

// Probabilities of one tile in place: s holds scores, becomes exp(s - lse[row]) (0 where masked).
KEEL_ATTN_INLINE void probabilities(const float* lse_rows, int64_t rows, float* s) {
  for (int64_t r = 0; r < rows; ++r) {
    float* row = s + r * kBlock;
    const float l = lse_rows[r];
    for (int64_t c = 0; c < kBlock; ++c) row[c] = exp_approx(row[c] - l);
  }
}

// dS = P · (dP - delta[row]) into p.
KEEL_ATTN_INLINE void score_grad(const float* dp, const float* delta, int64_t rows, float* p) {
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < kBlock; ++c) {
      p[r * kBlock + c] *= dp[r * kBlock + c] - delta[r];
    }
  }
}

KEEL_CPU_CLONES
void dq_task(const Problem& pb, const Grad& g, const HeadsT& kt, const HeadsT& vt, int64_t task,
             float* work, const OutRows& dq) {
  const int64_t D = pb.dim;
  const auto [qb, h, b, i0, rows] = query_block(pb, task);
  float* acc = work;
  float* s = acc + kBlock * D;
  float* dp = s + kBlock * kBlock;
  const float *q = pb.q.row(b, h, i0), *dout = g.dout.row(b, h, i0);
  const float* lse_rows = g.lse + (b * pb.heads + h) * pb.seq + i0;
  const float* delta = g.delta + (b * pb.heads + h) * pb.seq + i0;
  std::fill(acc, acc + rows * D, 0.0f);
  for (int64_t kb = 0; kb <= qb; ++kb) {
    const int64_t s0 = kb * kBlock, n = std::min(kBlock, pb.seq - s0);
    if (!pb.live(b, i0, i0 + rows, s0)) continue;
    const int64_t kvh = h / pb.group;
    tile_dot(q, pb.q.st, rows, kt.block(pb, b, kvh, s0), kt.ld, D, pb.scale, s, i0 - s0);
    if (needs_mask(pb, b, i0, s0, n)) mask_tile(pb, b, i0, rows, s0, n, s);
    probabilities(lse_rows, rows, s);
    tile_dot(dout, g.dout.st, rows, vt.block(pb, b, kvh, s0), vt.ld, D, 1.0f, dp, i0 - s0);
    score_grad(dp, delta, rows, s);
    if (pb.round_tiles) round_tile(s, rows, s);
    tile_acc(s, rows, n, pb.k.row(b, kvh, s0), pb.k.st, D, acc, D, i0 - s0);
  }
  for (int64_t r = 0; r < rows; ++r) {
    float* row = dq.row(b, h, i0 + r);
    for (int64_t e = 0; e < D; ++e) row[e] = acc[r * D + e] * pb.scale;
  }
}

// dk and/or dv (null: not wanted) of key block kb of kv head kvh in row b, over its group's
// query heads in order, and, when dq is given, each tile's dS · K added to those query rows of
// dq (unscaled). All of them share the scores and probabilities of every tile.
KEEL_ATTN_INLINE void key_block(const Problem& pb, const Grad& g, int64_t b, int64_t kvh,
                                int64_t kb, float* work, const OutRows& dq, const OutRows& dk,
                                const OutRows& dv) {
  const int64_t nb = pb.blocks(), D = pb.dim;
  const int64_t s0 = kb * kBlock, n = std::min(kBlock, pb.seq - s0);
  float* kt = work;
  float* vt = kt + kBlock * D;
  float* acc_k = vt + kBlock * D;
  float* acc_v = acc_k + kBlock * D;
  float* s = acc_v + kBlock * D;
  float* dp = s + kBlock * kBlock;
  float* p_rounded = dp + kBlock * kBlock;  // bf16 probabilities for dV (round_tiles)
  const bool score_grads = dq.data || dk.data;
  const float* keys = pb.k.row(b, kvh, s0);
  transpose_block(keys, pb.k.st, n, D, kt);
  if (score_grads) transpose_block(pb.v.row(b, kvh, s0), pb.v.st, n, D, vt);
  std::fill(acc_k, acc_k + n * D, 0.0f);
  std::fill(acc_v, acc_v + n * D, 0.0f);
  for (int64_t h = kvh * pb.group; h < (kvh + 1) * pb.group; ++h) {
    for (int64_t qb = kb; qb < nb; ++qb) {
      const int64_t i0 = qb * kBlock, rows = std::min(kBlock, pb.seq - i0);
      if (!pb.live(b, i0, i0 + rows, s0)) continue;
      const float *q = pb.q.row(b, h, i0), *dout = g.dout.row(b, h, i0);
      tile_dot(q, pb.q.st, rows, kt, kBlock, D, pb.scale, s, i0 - s0);
      if (needs_mask(pb, b, i0, s0, n)) mask_tile(pb, b, i0, rows, s0, n, s);
      probabilities(g.lse + (b * pb.heads + h) * pb.seq + i0, rows, s);
      if (dv.data) {
        if (pb.round_tiles) round_tile(s, rows, p_rounded);
        tile_acc_t(pb.round_tiles ? p_rounded : s, rows, n, dout, g.dout.st, D, acc_v, i0 - s0);
      }
      if (!score_grads) continue;
      tile_dot(dout, g.dout.st, rows, vt, kBlock, D, 1.0f, dp, i0 - s0);
      score_grad(dp, g.delta + (b * pb.heads + h) * pb.seq + i0, rows, s);
      if (pb.round_tiles) round_tile(s, rows, s);
      if (dk.data) tile_acc_t(s, rows, n, q, pb.q.st, D, acc_k, i0 - s0);
      if (dq.data) tile_acc(s, rows, n, keys, pb.k.st, D, dq.row(b, h, i0), dq.st, i0 - s0);
    }
  }
  for (int64_t i = 0; i < n; ++i) {
    if (dk.data) {
      float* row = dk.row(b, kvh, s0 + i);
      for (int64_t e = 0; e < D; ++e) row[e] = acc_k[i * D + e] * pb.scale;
    }
    if (dv.data) std::copy_n(acc_v + i * D, D, dv.row(b, kvh, s0 + i));
  }
}

// dk and/or dv for one (batch, kv head, key block).
KEEL_CPU_CLONES
void dkv_task(const Problem& pb, const Grad& g, int64_t task, float* work, const OutRows& dk,
              const OutRows& dv) {
  const int64_t nb = pb.blocks(), kb = task % nb, bk = task / nb;
  key_block(pb, g, bk / pb.kv_heads, bk % pb.kv_heads, kb, work, OutRows{}, dk, dv);
}

// dq, dk and dv (dk or dv may be null) of one (batch, kv head) in one pass: each tile's
// probabilities and score gradient feed all three (five tile products instead of seven). Key
// blocks outermost, so every dq row sums its key blocks in increasing order, as dq_task does,
// and dk and dv sum heads then query blocks, as dkv_task does: the same bytes as those two.
KEEL_CPU_CLONES
void grad_task(const Problem& pb, const Grad& g, int64_t task, float* work, const OutRows& dq,
               const OutRows& dk, const OutRows& dv) {
  const int64_t kvh = task % pb.kv_heads, b = task / pb.kv_heads, D = pb.dim;
  const int64_t h0 = kvh * pb.group, h1 = h0 + pb.group;
  for (int64_t h = h0; h < h1; ++h) {
    for (int64_t t = 0; t < pb.seq; ++t) std::fill_n(dq.row(b, h, t), D, 0.0f);
  }
  for (int64_t kb = 0; kb < pb.blocks(); ++kb) key_block(pb, g, b, kvh, kb, work, dq, dk, dv);
  for (int64_t h = h0; h < h1; ++h) {
    for (int64_t t = 0; t < pb.seq; ++t) {
      float* row = dq.row(b, h, t);
      for (int64_t e = 0; e < D; ++e) row[e] *= pb.scale;
    }
  }
}

}  // namespace
}  // namespace attn

using namespace attn;

void attention_grad(const keel_view* q, const keel_view* k, const keel_view* v,
                    const keel_view* out, const keel_view* dout, const keel_view* lse,
                    const keel_view* doc, keel_view* dq, keel_view* dk, keel_view* dv, double scale,
                    int32_t precision) {
  if (!dq && !dk && !dv) fail("attention_grad: none of dq, dk and dv was given");
  const char* op = dq ? "attention_dq" : dk ? "attention_dk" : "attention_dv";
  check_precision(op, precision);
  Problem pb = make_problem(op, q, k, v, doc, scale);
  const std::vector<int64_t> qdims = dims(*q);
  check_result(op, "lse", lse, {pb.batch, pb.heads, pb.seq}, true);
  Grad g{in_rows_of(op, "out", out, qdims), in_rows_of(op, "dout", dout, qdims),
         static_cast<const float*>(lse->data)};
  const OutRows rq = dq ? rows_of(op, "dq", dq, qdims) : OutRows{};
  const OutRows rk = dk ? rows_of(op, "dk", dk, dims(*k)) : OutRows{};
  const OutRows rv = dv ? rows_of("attention_dv", "dv", dv, dims(*k)) : OutRows{};
  const bool bf16 = precision == KEEL_MATMUL_BF16;
  std::vector<float> delta(static_cast<size_t>(pb.batch * pb.heads * pb.seq));
  for_tasks(pb.batch * pb.heads, pb.batch * pb.heads * pb.seq * pb.dim, [&](int64_t bh) {
    const int64_t b = bh / pb.heads, h = bh % pb.heads;
    row_dots(g.dout.row(b, h, 0), g.dout.st, g.out.row(b, h, 0), g.out.st, pb.seq, pb.dim,
             delta.data() + bh * pb.seq, bf16);
  });
  g.delta = delta.data();
  if (bf16) {
    if (const Bf16Tiles way = bf16_tiles(pb.dim); way != Bf16Tiles::rounding) {
      return attention_grad_bf16(pb, way, g, rq, rk, rv);
    }
  }
  std::vector<float> rounded_q, rounded_k, rounded_v, rounded_dout;
  if (bf16) {
    pb.q = rounded_rows(pb, pb.q, pb.heads, rounded_q);
    pb.k = rounded_rows(pb, pb.k, pb.kv_heads, rounded_k);
    pb.v = rounded_rows(pb, pb.v, pb.kv_heads, rounded_v);
    g.dout = rounded_rows(pb, g.dout, pb.heads, rounded_dout);
    pb.round_tiles = true;
  }
  const int64_t per = tile_floats(pb.dim);
  std::vector<float> work(static_cast<size_t>(per * omp_get_max_threads()));
  const int64_t cost = pb.batch * pb.heads * pb.seq * pb.seq * pb.dim;
  const int64_t pairs = pb.batch * pb.kv_heads;
  if (dq && (dk || dv) && pairs >= kFusedTasksPerThread * omp_get_max_threads()) {
    for_tasks(pairs, cost, [&](int64_t t) {
      grad_task(pb, g, t, work.data() + per * omp_get_thread_num(), rq, rk, rv);
    });
    return;
  }
  if (dq) {
    const HeadsT kt = transpose_heads(pb, pb.k), vt = transpose_heads(pb, pb.v);
    for_tasks(pb.batch * pb.heads * pb.blocks(), cost, [&](int64_t t) {
      dq_task(pb, g, kt, vt, t, work.data() + per * omp_get_thread_num(), rq);
    });
  }
  if (dk || dv) {
    for_tasks(pb.batch * pb.kv_heads * pb.blocks(), cost, [&](int64_t t) {
      dkv_task(pb, g, t, work.data() + per * omp_get_thread_num(), rk, rv);
    });
  }
}

}  // namespace keel::cpu::detail
