#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>

#include "backend/ref/executor.h"
#include "cpu_jit.h"
#include "ir/error.h"
#include "ir/utf8_escape.h"
#include "ir/verify.h"
#include "nn/layer_stack.h"
#include "train/gpt_step.h"
#include "train/segmented_step.h"
#include "train/step.h"
#include "train/tiny_lm.h"
#include "train/trainer.h"

namespace keel {
namespace {

// Paths and the prompt are any bytes; trainer.json and record.json must stay valid JSON that
// reads back to them (ir/utf8_escape.h).
TEST(TrainOptions, JsonCarriesAnyBytes) {
  train::TrainOptions o;
  o.data = {"/corpus/caf\xe9", "plain"};
  o.run_dir = "runs/\xff";
  o.prompt = "int \xc3(";
  const nlohmann::json j = nlohmann::json::parse(o.to_json());
  EXPECT_EQ(utf8_to_bytes(j.at("data").get<std::vector<std::string>>()), o.data);
  EXPECT_EQ(utf8_to_bytes(j.at("run_dir").get<std::string>()), o.run_dir);
  EXPECT_EQ(utf8_to_bytes(j.at("prompt").get<std::string>()), o.prompt);
}

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
  auto [l2, n2, lr2, p2, m2, v2, metrics2] =
      step(p, m, v, train::Counters{}, two, train::step_scalars(h, 3));
  auto [l1, n1, lr1, p1, m1, v1, metrics1] =
      step(p, m, v, train::Counters{}, one, train::step_scalars(h, 3));
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
    auto [loss, norm, lr, p1, m1, v1, metrics] =
        step(p, m, v, train::Counters{}, batch, train::step_scalars(h, s));
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
  auto a = step(p, z, z, train::Counters{}, batch, train::step_scalars(free, 1));
  auto b = step(p, z, z, train::Counters{}, batch, train::step_scalars(capped, 1));
  EXPECT_NEAR(std::get<1>(a).item(), std::get<1>(b).item(), 1e-6);
  const std::string w = "h.0.attn.c_attn.weight";
  std::vector<float> ma = std::get<4>(a).at(w).to_f32(), mb = std::get<4>(b).at(w).to_f32();
  const double ratio = 1e-4 / std::get<1>(a).item();
  for (size_t i = 0; i < ma.size(); i += 17)
    EXPECT_NEAR(mb[i], ma[i] * ratio, 1e-9 + 1e-4 * std::abs(ma[i] * ratio));
}

// MoE in the layer and one MTP head: batches routing differently run one program; the load
// counters are device buffers the step adds to (every token's top_k choices counted once per
// step), the MTP loss comes out beside the loss, and the loss falls.
TEST(TrainStep, MoeAndMtpStepIsOneProgramWithCounters) {
  set_default_executor(ref::make_executor());
  nn::GptConfig c = tiny_model();
  c.moe_every = 1;
  c.moe.hidden = 8;
  c.moe.capacity_factor = 0.75;  // some choices must drop
  c.mtp_weights = {0.3};
  train::Params p = train::make_gpt_init(c)(Scalar(3.0));
  train::Params m = train::zeros_like_params(c), v = train::zeros_like_params(c);
  train::Counters counters = train::zero_counters(c);
  ASSERT_EQ(counters.at("moe.load").shape(), (Shape{1, 4}));
  auto step = train::make_train_step(c);
  train::Hyper h;
  try {  // an MoE step without its counters: one line saying what to pass
    train::make_train_step(c)(p, m, v, train::Counters{}, rows_batch(1, 4, 8, c.vocab),
                              train::step_scalars(h, 1));
    ADD_FAILURE() << "missing counters were accepted";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("[train] the step of tiny-code takes the counters "
                                         "{moe.dropped f32[], moe.load f32[1,4]}, got {}"),
              std::string::npos)
        << e.what();
  }
  h.lr = 1e-2;
  h.warmup_steps = 2;
  h.total_steps = 12;
  std::vector<double> losses;
  const int64_t steps = 12, choices = 4 * 8 * c.moe.top_k;
  for (int64_t s = 1; s <= steps; ++s) {
    std::vector<Tensor> batch = rows_batch(1, 4, 8, c.vocab);
    if (s % 2 == 0) batch[0] = Tensor(Array::full({1, 4, 8}, double(s % 7), DType::i64));
    auto [loss, norm, lr, p1, m1, v1, metrics] =
        step(p, m, v, counters, batch, train::step_scalars(h, s));
    EXPECT_TRUE(std::isfinite(metrics.at("mtp_loss.1").item()));
    EXPECT_GT(metrics.at("moe.aux_loss").item(), 0.0);
    if (s % 2 == 1) losses.push_back(loss.item());
    counters = train::counters_of(metrics);
    p = p1;
    m = m1;
    v = v1;
  }
  EXPECT_EQ(step.stats().traces, 1);
  std::vector<float> load = counters.at("moe.load").to_f32();
  double total = 0;
  for (float x : load) total += x;
  EXPECT_EQ(total, double(steps * choices));
  const double dropped = counters.at("moe.dropped").item();
  EXPECT_GT(dropped, 0.0);
  EXPECT_LT(dropped, double(steps * choices));
  EXPECT_LT(losses.back(), losses.front() - 0.3);
}

// The step split at layer barriers (segment programs recomputing their forward in the
// backward) computes what the one program computes: loss, gradient norm, every updated
// parameter and moment, the MTP loss and the MoE counters; uneven segments and a mix of dense
// and MoE segments included.
TEST(TrainStep, SegmentedStepEqualsTheOneProgram) {
  set_default_executor(ref::make_executor());
  struct Case {
    int64_t layers, moe_every, barrier;
    bool mtp, scan = false;  // scan: each segment loops its repeated blocks
    bool listed = false;     // MoE in the listed layers 1..layers-1 instead of moe_every
  };
  for (const Case& k : {Case{3, 0, 1, false}, Case{3, 0, 2, false}, Case{2, 2, 1, true},
                        Case{4, 2, 2, true}, Case{4, 1, 2, false}, Case{4, 0, 2, false, true},
                        Case{4, 2, 4, true, true}, Case{4, 0, 2, true, true, true}}) {
    nn::GptConfig c = tiny_model();
    c.layers = k.layers;
    c.moe_every = k.moe_every;
    for (int64_t i = 1; k.listed && i < k.layers; ++i) c.moe_layer_ids.push_back(i);
    c.moe.hidden = 8;
    if (k.mtp) c.mtp_weights = {0.3};
    const std::string what = fmt::format("layers {} moe_every {} barrier {} scan {} listed {}",
                                         k.layers, k.moe_every, k.barrier, k.scan, k.listed);
    train::Params p = train::make_gpt_init(c)(Scalar(5.0));
    train::Params m = train::zeros_like_params(c), v = train::zeros_like_params(c);
    std::vector<Tensor> batch = rows_batch(2, 2, 8, c.vocab);
    train::Hyper h;
    auto one = train::make_train_step(c)(p, m, v, train::zero_counters(c), batch,
                                         train::step_scalars(h, 3));
    nn::GptConfig scanned = c;
    scanned.scan_layers = k.scan;
    train::SegmentedStep split(scanned, k.barrier);
    EXPECT_EQ(split.segments().size(), size_t((k.layers + k.barrier - 1) / k.barrier)) << what;
    auto two = split(p, m, v, train::zero_counters(c), batch, train::step_scalars(h, 3));
    EXPECT_NEAR(std::get<0>(two).item(), std::get<0>(one).item(), 1e-5) << what;
    EXPECT_NEAR(std::get<1>(two).item(), std::get<1>(one).item(), 1e-4 * std::get<1>(one).item())
        << what;
    EXPECT_NEAR(std::get<2>(two).item(), std::get<2>(one).item(), 1e-9) << what;
    for (int i : {3, 4, 5}) {
      const train::Params& a = i == 3   ? std::get<3>(one)
                               : i == 4 ? std::get<4>(one)
                                        : std::get<5>(one);
      const train::Params& b = i == 3   ? std::get<3>(two)
                               : i == 4 ? std::get<4>(two)
                                        : std::get<5>(two);
      ASSERT_EQ(a.size(), b.size());
      for (const auto& [name, t] : a) {
        std::vector<float> x = t.to_f32(), y = b.at(name).to_f32();
        for (size_t j = 0; j < x.size(); ++j) {
          ASSERT_NEAR(y[j], x[j], 2e-5 + 1e-3 * std::abs(x[j]))
              << what << " output " << i << " " << name << "[" << j << "]";
        }
      }
    }
    const train::Counters &ma = std::get<6>(one), &mb = std::get<6>(two);
    ASSERT_EQ(ma.size(), mb.size()) << what;
    for (const auto& [name, t] : ma) {
      std::vector<float> x = t.to_f32(), y = mb.at(name).to_f32();
      for (size_t j = 0; j < x.size(); ++j) {
        EXPECT_NEAR(y[j], x[j], 1e-5 + 1e-5 * std::abs(x[j])) << what << " " << name;
      }
    }
  }
}

// The trainer's scanned step (features.request=scan_layers): layers looped in the program over
// parameters and moments stored stacked, so AdamW (and its decay rule) runs on stacked
// tensors. Two steps equal the unrolled step's: loss, norm, every parameter and moment; with
// MoE layers also the scanned step compiled by the CPU backend.
TEST(TrainStep, ScannedStepWithStackedStateEqualsUnrolled) {
  testing_support::TempDir dir("scanned_step");
  const auto cpu_jit = testing_support::cpu_jit(dir);
  for (int64_t moe_every : {0, 2}) {
    set_default_executor(ref::make_executor());
    nn::GptConfig c = tiny_model();
    c.layers = 4;
    c.moe_every = moe_every;
    c.moe.hidden = 8;
    c.mtp_weights = {0.3};
    nn::GptConfig s = c;
    s.scan_layers = true;
    train::Params p = train::make_gpt_init(c)(Scalar(7.0));
    train::Params z = train::zeros_like_params(c);
    train::Params p1 = p, m1 = z, v1 = z;
    train::Params p2 = nn::stack_layer_params(s, p), m2 = nn::stack_layer_params(s, z), v2 = m2;
    ASSERT_LT(p2.size(), p1.size());
    auto one = train::make_train_step(c);
    auto two = train::make_train_step(s);
    const bool on_cpu = moe_every > 0;
    train::Params p3 = p2, m3 = m2, v3 = v2;
    auto three = train::make_train_step(s);  // traced while the CPU JIT is the default
    train::Hyper h;
    for (int64_t step = 1; step <= 2; ++step) {
      std::vector<Tensor> batch = rows_batch(1, 4, 8, c.vocab);
      auto a = one(p1, m1, v1, train::zero_counters(c), batch, train::step_scalars(h, step));
      auto b = two(p2, m2, v2, train::zero_counters(s), batch, train::step_scalars(h, step));
      if (on_cpu) {
        set_default_executor(cpu_jit);
        auto r = three(p3, m3, v3, train::zero_counters(s), batch, train::step_scalars(h, step));
        set_default_executor(ref::make_executor());
        EXPECT_NEAR(std::get<0>(r).item(), std::get<0>(a).item(), 1e-4);
        EXPECT_NEAR(std::get<1>(r).item(), std::get<1>(a).item(), 1e-3 * std::get<1>(a).item());
        const train::Counters &ma = std::get<6>(a), &mr = std::get<6>(r);
        for (const auto& [name, t] : ma) {
          std::vector<float> x = t.to_f32(), y = mr.at(name).to_f32();
          for (size_t j = 0; j < x.size(); ++j)
            EXPECT_NEAR(y[j], x[j], 1e-4 + 1e-3 * std::abs(x[j])) << "cpu " << name;
        }
        p3 = std::get<3>(r), m3 = std::get<4>(r), v3 = std::get<5>(r);
      }
      EXPECT_NEAR(std::get<0>(b).item(), std::get<0>(a).item(), 1e-5);
      EXPECT_NEAR(std::get<1>(b).item(), std::get<1>(a).item(), 1e-4 * std::get<1>(a).item());
      const train::Counters &ma = std::get<6>(a), &mb = std::get<6>(b);  // MTP, MoE counters
      ASSERT_EQ(ma.size(), mb.size());
      for (const auto& [name, t] : ma) {
        std::vector<float> x = t.to_f32(), y = mb.at(name).to_f32();
        for (size_t j = 0; j < x.size(); ++j)
          EXPECT_NEAR(y[j], x[j], 1e-5 + 1e-4 * std::abs(x[j])) << name;
      }
      p1 = std::get<3>(a), m1 = std::get<4>(a), v1 = std::get<5>(a);
      p2 = std::get<3>(b), m2 = std::get<4>(b), v2 = std::get<5>(b);
    }
    for (auto [x, y] : {std::pair{&p1, &p2}, std::pair{&m1, &m2}, std::pair{&v1, &v2},
                        std::pair{&p1, &p3}, std::pair{&m1, &m3}, std::pair{&v1, &v3}}) {
      if (!on_cpu && (y == &p3 || y == &m3 || y == &v3)) continue;
      train::Params layers = nn::unstack_layer_params(s, *y);
      ASSERT_EQ(layers.size(), x->size());
      for (const auto& [name, t] : *x) {
        std::vector<float> a = t.to_f32(), b = layers.at(name).to_f32();
        for (size_t j = 0; j < a.size(); ++j) {
          ASSERT_NEAR(b[j], a[j], 2e-5 + 1e-3 * std::abs(a[j]))
              << "moe_every " << moe_every << " " << name << "[" << j << "]";
        }
      }
    }
    EXPECT_EQ(two.stats().traces, 1);
  }
}

// The set of programs is fixed by the config: segments of one structure share a program, so a
// deeper stack adds none.
TEST(TrainStep, SegmentedProgramsDoNotGrowWithDepth) {
  nn::GptConfig c = tiny_model();
  c.layers = 4;
  const size_t four = train::SegmentedStep(c, 1).program_names().size();
  c.layers = 24;
  EXPECT_EQ(train::SegmentedStep(c, 1).program_names().size(), four);
  EXPECT_EQ(four, 7u);  // counts, embed, segment fwd/bwd, head, embed backward, update
  c.moe_every = 2;      // dense and MoE segments: one more forward and backward program
  EXPECT_EQ(train::SegmentedStep(c, 1).program_names().size(), 9u);
  EXPECT_EQ(train::SegmentedStep(c, 2).program_names().size(), 7u);
  EXPECT_THROW(train::SegmentedStep(c, 0), InputError);
  // Stacked parameters (a scanned stack's storage) are refused with a line saying what to pass.
  c.layers = 2;
  c.moe_every = 0;
  c.scan_layers = true;
  train::Params stacked = nn::stack_layer_params(c, train::zeros_like_params(c));
  try {
    train::SegmentedStep(c, 1)(stacked, stacked, stacked, {}, rows_batch(1, 4, 8, c.vocab),
                               train::step_scalars(train::Hyper{}, 1));
    ADD_FAILURE() << "stacked parameters were accepted";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("takes per-layer parameters (h.N.*)"), std::string::npos)
        << e.what();
  }
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
