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

struct Grad {
  const float *out = nullptr, *dout = nullptr, *lse = nullptr;
};

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
             float* work, float* dq) {
  const int64_t D = pb.dim;
  const auto [qb, h, b, i0, rows] = query_block(pb, task);
  float* acc = work;
  float* s = acc + kBlock * D;
  float* dp = s + kBlock * kBlock;
  float* delta = dp + kBlock * kBlock;
  const int64_t q0 = pb.qrow(b, h, i0);
  const float* lse_rows = g.lse + (b * pb.heads + h) * pb.seq + i0;
  row_dots(g.dout + q0, g.out + q0, rows, D, delta);
  std::fill(acc, acc + rows * D, 0.0f);
  for (int64_t kb = 0; kb <= qb; ++kb) {
    const int64_t s0 = kb * kBlock, n = std::min(kBlock, pb.seq - s0);
    if (!pb.live(b, i0, i0 + rows, s0)) continue;
    const int64_t kvh = h / pb.group, kv = pb.kvrow(b, kvh, s0);
    tile_dot(pb.q + q0, rows, kt.block(pb, b, kvh, s0), kt.ld, D, pb.scale, s);
    if (needs_mask(pb, b, i0, s0, n)) mask_tile(pb, b, i0, rows, s0, n, s);
    probabilities(lse_rows, rows, s);
    tile_dot(g.dout + q0, rows, vt.block(pb, b, kvh, s0), vt.ld, D, 1.0f, dp);
    score_grad(dp, delta, rows, s);
    tile_acc(s, rows, n, pb.k + kv, D, acc);
  }
  for (int64_t i = 0; i < rows * D; ++i) dq[q0 + i] = acc[i] * pb.scale;
}

// dk and/or dv (null: not wanted) of key block kb of kv head kvh in row b, over its group's
// query heads in order, and, when dq is given, each tile's dS · K added to those query rows of
// dq (unscaled). All of them share the scores and probabilities of every tile.
KEEL_ATTN_INLINE void key_block(const Problem& pb, const Grad& g, int64_t b, int64_t kvh,
                                int64_t kb, float* work, float* dq, float* dk, float* dv) {
  const int64_t nb = pb.blocks(), D = pb.dim;
  const int64_t s0 = kb * kBlock, n = std::min(kBlock, pb.seq - s0);
  float* kt = work;
  float* vt = kt + kBlock * D;
  float* acc_k = vt + kBlock * D;
  float* acc_v = acc_k + kBlock * D;
  float* s = acc_v + kBlock * D;
  float* dp = s + kBlock * kBlock;
  float* delta = dp + kBlock * kBlock;
  const bool score_grads = dq || dk;
  const int64_t kv = pb.kvrow(b, kvh, s0);
  transpose_block(pb.k + kv, n, D, kt);
  if (score_grads) transpose_block(pb.v + kv, n, D, vt);
  std::fill(acc_k, acc_k + n * D, 0.0f);
  std::fill(acc_v, acc_v + n * D, 0.0f);
  for (int64_t h = kvh * pb.group; h < (kvh + 1) * pb.group; ++h) {
    for (int64_t qb = kb; qb < nb; ++qb) {
      const int64_t i0 = qb * kBlock, rows = std::min(kBlock, pb.seq - i0);
      if (!pb.live(b, i0, i0 + rows, s0)) continue;
      const int64_t q0 = pb.qrow(b, h, i0);
      tile_dot(pb.q + q0, rows, kt, kBlock, D, pb.scale, s);
      if (needs_mask(pb, b, i0, s0, n)) mask_tile(pb, b, i0, rows, s0, n, s);
      probabilities(g.lse + (b * pb.heads + h) * pb.seq + i0, rows, s);
      if (dv) tile_acc_t(s, rows, n, g.dout + q0, D, acc_v);
      if (!score_grads) continue;
      row_dots(g.dout + q0, g.out + q0, rows, D, delta);
      tile_dot(g.dout + q0, rows, vt, kBlock, D, 1.0f, dp);
      score_grad(dp, delta, rows, s);
      if (dk) tile_acc_t(s, rows, n, pb.q + q0, D, acc_k);
      if (dq) tile_acc(s, rows, n, pb.k + kv, D, dq + q0);
    }
  }
  for (int64_t i = 0; i < n * D && dk; ++i) dk[kv + i] = acc_k[i] * pb.scale;
  for (int64_t i = 0; i < n * D && dv; ++i) dv[kv + i] = acc_v[i];
}

// dk and/or dv for one (batch, kv head, key block).
KEEL_CPU_CLONES
void dkv_task(const Problem& pb, const Grad& g, int64_t task, float* work, float* dk, float* dv) {
  const int64_t nb = pb.blocks(), kb = task % nb, bk = task / nb;
  key_block(pb, g, bk / pb.kv_heads, bk % pb.kv_heads, kb, work, nullptr, dk, dv);
}

// dq, dk and dv (dk or dv may be null) of one (batch, kv head) in one pass: each tile's
// probabilities and score gradient feed all three (five tile products instead of seven). Key
// blocks outermost, so every dq row sums its key blocks in increasing order, as dq_task does,
// and dk and dv sum heads then query blocks, as dkv_task does: the same bytes as those two.
KEEL_CPU_CLONES
void grad_task(const Problem& pb, const Grad& g, int64_t task, float* work, float* dq, float* dk,
               float* dv) {
  const int64_t kvh = task % pb.kv_heads, b = task / pb.kv_heads, D = pb.dim;
  const int64_t h0 = kvh * pb.group, h1 = h0 + pb.group;
  for (int64_t h = h0; h < h1; ++h) std::fill_n(dq + pb.qrow(b, h, 0), pb.seq * D, 0.0f);
  for (int64_t kb = 0; kb < pb.blocks(); ++kb) key_block(pb, g, b, kvh, kb, work, dq, dk, dv);
  for (int64_t h = h0; h < h1; ++h) {
    float* rows = dq + pb.qrow(b, h, 0);
    for (int64_t i = 0; i < pb.seq * D; ++i) rows[i] *= pb.scale;
  }
}

}  // namespace
}  // namespace attn

using namespace attn;

void attention_grad(const keel_view* q, const keel_view* k, const keel_view* v,
                    const keel_view* out, const keel_view* dout, const keel_view* lse,
                    const keel_view* doc, keel_view* dq, keel_view* dk, keel_view* dv,
                    double scale) {
  if (!dq && !dk && !dv) fail("attention_grad: none of dq, dk and dv was given");
  const char* op = dq ? "attention_dq" : dk ? "attention_dk" : "attention_dv";
  const Problem pb = make_problem(op, q, k, v, doc, scale);
  const std::vector<int64_t> qdims = dims(*q);
  check_result(op, "out", out, qdims);
  check_result(op, "dout", dout, qdims);
  check_result(op, "lse", lse, {pb.batch, pb.heads, pb.seq});
  if (dq) check_result(op, "dq", dq, qdims);
  if (dk) check_result(op, "dk", dk, dims(*k));
  if (dv) check_result("attention_dv", "dv", dv, dims(*k));
  Grad g{static_cast<const float*>(out->data), static_cast<const float*>(dout->data),
         static_cast<const float*>(lse->data)};
  auto data = [](keel_view* x) { return x ? static_cast<float*>(x->data) : nullptr; };
  const int64_t per = tile_floats(pb.dim);
  std::vector<float> work(static_cast<size_t>(per * omp_get_max_threads()));
  const int64_t cost = pb.batch * pb.heads * pb.seq * pb.seq * pb.dim;
  const int64_t pairs = pb.batch * pb.kv_heads;
  if (dq && (dk || dv) && pairs >= kFusedTasksPerThread * omp_get_max_threads()) {
    for_tasks(pairs, cost, [&](int64_t t) {
      grad_task(pb, g, t, work.data() + per * omp_get_thread_num(), data(dq), data(dk), data(dv));
    });
    return;
  }
  if (dq) {
    float* r = data(dq);
    const HeadsT kt = transpose_heads(pb, pb.k), vt = transpose_heads(pb, pb.v);
    for_tasks(pb.batch * pb.heads * pb.blocks(), cost, [&](int64_t t) {
      dq_task(pb, g, kt, vt, t, work.data() + per * omp_get_thread_num(), r);
    });
  }
  if (dk || dv) {
    for_tasks(pb.batch * pb.kv_heads * pb.blocks(), cost, [&](int64_t t) {
      dkv_task(pb, g, t, work.data() + per * omp_get_thread_num(), data(dk), data(dv));
    });
  }
}

}  // namespace keel::cpu::detail
