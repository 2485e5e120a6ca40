#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "backend/ref/executor.h"
#include "ir/error.h"
#include "ir/verify.h"
#include "train/gpt_step.h"
#include "train/step.h"
#include "train/tiny_lm.h"

namespace keel {
namespace {

TEST(TinyLm, WholeStepIsOneProgramAndTheLossFalls) {
  set_default_executor(ref::make_executor());
  TinyLmConfig c;
  c.steps = 15;
  c.batch = 32;
  TinyLmRun run = run_tiny_lm(c, tiny_lm_default_text());
  ASSERT_EQ(run.losses.size(), 15u);
  EXPECT_EQ(run.traces, 1);
  EXPECT_NEAR(run.losses.front(), std::log(256.0), 0.3);  // near-uniform predictions at start
  EXPECT_LT(run.losses.back(), run.losses.front() - 0.5);
  EXPECT_NO_THROW(verify(run.step_graph));
  // Forward, backward and update live in the one program: its outputs are loss + 5 params.
  EXPECT_EQ(run.step_graph.outputs().size(), 6u);
}

TEST(TinyLm, SameSeedSameLosses) {
  set_default_executor(ref::make_executor());
  TinyLmConfig c;
  c.steps = 3;
  c.batch = 8;
  EXPECT_EQ(run_tiny_lm(c, tiny_lm_default_text()).losses,
            run_tiny_lm(c, tiny_lm_default_text()).losses);
}

TEST(TinyLm, TooShortTextIsAnError) {
  set_default_executor(ref::make_executor());
  EXPECT_THROW(run_tiny_lm(TinyLmConfig{}, "ab"), Error);
}

nn::GptConfig tiny_model() {
  nn::GptConfig c = nn::gpt_preset("code-s");
  c.name = "tiny-code";
  c.vocab = 32;
  c.layers = 1;
  c.width = 16;
  c.heads = 4;
  c.kv_heads = 2;
  c.mlp_hidden = 24;
  c.seq = 8;
  c.batch = 4;
  return c;
}

// A [K, B, T] batch of K*B rows: row r of micro-batch k is global row k*B + r.
std::vector<Tensor> rows_batch(int64_t K, int64_t B, int64_t T, int64_t vocab) {
  Array tok(DType::i64, {K, B, T}), tgt(DType::i64, {K, B, T}), mask(DType::f32, {K, B, T}),
      pos(DType::i64, {K, B, T}), doc(DType::i64, {K, B, T}), fim(DType::i64, {K, B, T});
  for (int64_t i = 0; i < tok.numel(); ++i) {
    const int64_t t = i % T;
    tok.set_i64(i, (i * 7 + 1) % vocab);
    tgt.set_i64(i, (i * 7 + 8) % vocab);
    mask.set_f64(i, (i % 5 == 0) ? 0.0 : 1.0);  // some dead targets
    doc.set_i64(i, t < 3 ? 0 : 1);
    pos.set_i64(i, t < 3 ? t : t - 3);
  }
  return {Tensor(tok), Tensor(tgt), Tensor(mask), Tensor(pos), Tensor(doc), Tensor(fim)};
}

std::vector<Tensor> reshaped(const std::vector<Tensor>& b, int64_t K, int64_t B) {
  std::vector<Tensor> out;
  for (const Tensor& t : b) {
    const Array& a = t.array();
    Array r(a.dtype(), {K, B, a.shape()[2]});
    std::copy(a.data(), a.data() + a.nbytes(), r.data());
    out.emplace_back(r);
  }
  return out;
}

// K micro-batches of B rows inside one program = one batch of K*B rows: same loss, same
// gradient norm, same updated parameters.
TEST(TrainStep, AccumulationEqualsTheLargeBatch) {
  set_default_executor(ref::make_executor());
  nn::GptConfig c = tiny_model();
  train::Params p = train::make_gpt_init(c)(Scalar(4.0));
  train::Params m = train::zeros_like_params(c), v = train::zeros_like_params(c);
  std::vector<Tensor> two = rows_batch(2, 2, 8, c.vocab);
  std::vector<Tensor> one = reshaped(two, 1, 4);
  auto step = train::make_train_step(c);
  train::Hyper h;
  auto [l2, n2, lr2, p2, m2, v2] = step(p, m, v, two, train::step_scalars(h, 3));
  auto [l1, n1, lr1, p1, m1, v1] = step(p, m, v, one, train::step_scalars(h, 3));
  EXPECT_NEAR(l2.item(), l1.item(), 1e-5);
  EXPECT_NEAR(n2.item(), n1.item(), 1e-4 * n1.item());
  for (const auto& [name, t] : p1) {
    std::vector<float> a = t.to_f32(), b = p2.at(name).to_f32();
    for (size_t i = 0; i < a.size(); ++i) ASSERT_NEAR(a[i], b[i], 1e-6) << name << "[" << i << "]";
  }
  EXPECT_EQ(step.stats().traces, 2);  // K is part of the signature: two shapes, two programs
}

// The schedule and every AdamW value are device scalars: 30 steps with changing lr, warm-up,
// clipping and decay are one program, and the lr it reports is the host formula's.
TEST(TrainStep, ScheduleOnDeviceMatchesTheHostAndNeverRetraces) {
  set_default_executor(ref::make_executor());
  nn::GptConfig c = tiny_model();
  train::Params p = train::make_gpt_init(c)(Scalar(1.0));
  train::Params m = train::zeros_like_params(c), v = train::zeros_like_params(c);
  std::vector<Tensor> batch = rows_batch(1, 4, 8, c.vocab);
  auto step = train::make_train_step(c);
  train::Hyper h;
  h.lr = 1e-2;
  h.warmup_steps = 5;
  h.total_steps = 30;
  double first = 0, last = 0;
  for (int64_t s = 1; s <= 30; ++s) {
    if (s == 10) h.clip_norm = 0.5;  // per-step values change freely
    if (s == 20) h.weight_decay = 0.0;
    auto [loss, norm, lr, p1, m1, v1] = step(p, m, v, batch, train::step_scalars(h, s));
    EXPECT_NEAR(lr.item(), train::scheduled_lr(h, s), 1e-7 + 1e-5 * h.lr) << "step " << s;
    EXPECT_GT(norm.item(), 0.0);
    if (s == 1) first = loss.item();
    last = loss.item();
    p = p1;
    m = m1;
    v = v1;
  }
  EXPECT_EQ(step.stats().traces, 1);
  EXPECT_LT(last, first - 0.5);
  EXPECT_NEAR(train::scheduled_lr(h, 5), 1e-2, 1e-12);   // end of warm-up: the peak
  EXPECT_NEAR(train::scheduled_lr(h, 30), 1e-3, 1e-12);  // end: lr * min_lr_ratio
}

// Clipping caps the update: with a tiny cap the parameters move less than without one, and the
// reported norm is the norm before clipping.
TEST(TrainStep, ClippingScalesTheGradient) {
  set_default_executor(ref::make_executor());
  nn::GptConfig c = tiny_model();
  train::Params p = train::make_gpt_init(c)(Scalar(2.0));
  train::Params z = train::zeros_like_params(c);
  std::vector<Tensor> batch = rows_batch(1, 4, 8, c.vocab);
  auto step = train::make_train_step(c);
  train::Hyper free, capped;
  free.clip_norm = 0;
  capped.clip_norm = 1e-4;
  free.beta1 = capped.beta1 = 0;  // plain normalised steps, so the cap shows in the m moment
  auto a = step(p, z, z, batch, train::step_scalars(free, 1));
  auto b = step(p, z, z, batch, train::step_scalars(capped, 1));
  EXPECT_NEAR(std::get<1>(a).item(), std::get<1>(b).item(), 1e-6);
  const std::string w = "h.0.attn.c_attn.weight";
  std::vector<float> ma = std::get<4>(a).at(w).to_f32(), mb = std::get<4>(b).at(w).to_f32();
  const double ratio = 1e-4 / std::get<1>(a).item();
  for (size_t i = 0; i < ma.size(); i += 17)
    EXPECT_NEAR(mb[i], ma[i] * ratio, 1e-9 + 1e-4 * std::abs(ma[i] * ratio));
}

TEST(TrainStep, EvalSumsNatsOverLiveTargets) {
  set_default_executor(ref::make_executor());
  nn::GptConfig c = tiny_model();
  train::Params p = train::make_gpt_init(c)(Scalar(1.0));
  std::vector<Tensor> batch = rows_batch(1, 4, 8, c.vocab);
  auto [nats, count] = train::make_eval_step(c)(p, batch);
  EXPECT_NEAR(count.item(), 25.0, 0);                            // 32 targets, every fifth dead
  EXPECT_NEAR(nats.item() / count.item(), std::log(32.0), 0.2);  // near-uniform at init
}

}  // namespace
}  // namespace keel
