#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <future>
#include <optional>
#include <set>
#include <thread>

#include <omp.h>

#include <nlohmann/json.hpp>

#include "backend/cpu/abi.h"
#include "backend/cpu/codegen.h"
#include "backend/cpu/target.h"
#include "cpu_jit.h"
#include "files/read.h"
#include "generated_source.h"
#include "ir/error.h"
#include "ir/scan.h"
#include "ir/text.h"
#include "ir/utf8_escape.h"
#include "ir/verify.h"
#include "nn/layer_stack.h"
#include "nn/layers.h"
#include "passes/pipeline.h"
#include "runtime/runtime.h"
#include "tests/fake_device.h"
#include "tests/numbered_checkpoint.h"
#include "tests/rows_batch.h"
#include "tests/tiny_gpt.h"
#include "train/calibration.h"
#include "train/checkpoint.h"
#include "train/data_parallel.h"
#include "train/evaluate.h"
#include "train/gpt_step.h"
#include "train/metrics_sink.h"
#include "train/model_shards.h"
#include "train/moment_shards.h"
#include "train/resume.h"
#include "train/safetensors.h"
#include "train/sampler.h"
#include "train/segmented_step.h"
#include "train/step.h"
#include "train/step_runner.h"
#include "train/stop_request.h"
#include "train/tiny_lm.h"
#include "train/train_state.h"
#include "train/trainer.h"
#include "train/training.h"

namespace keel {
namespace {

using testing_support::rows_batch;

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
  TinyLmConfig c;
  c.steps = 3;
  c.batch = 8;
  EXPECT_EQ(run_tiny_lm(c, tiny_lm_default_text()).losses,
            run_tiny_lm(c, tiny_lm_default_text()).losses);
}

TEST(TinyLm, TooShortTextIsAnError) {
  EXPECT_THROW(run_tiny_lm(TinyLmConfig{}, "ab"), Error);
}

// A step that leaves its arguments alone, for tests that feed one state to several steps.
train::TrainStepFn plain_step(const nn::GptConfig& c) {
  return train::make_train_step(c, {.donate = false});
}

nn::GptConfig tiny_model() {
  nn::GptConfig c = testing_support::tiny_code();
  c.layers = 1;
  c.batch = 4;
  return c;
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
  nn::GptConfig c = tiny_model();
  NamedTensors p = train::make_gpt_init(c)(Scalar(4.0));
  NamedTensors m = train::zeros_like_params(c), v = train::zeros_like_params(c);
  std::vector<Tensor> two = rows_batch(2, 2, 8, c.vocab);
  std::vector<Tensor> one = reshaped(two, 1, 4);
  auto step = plain_step(c);
  train::Hyper h;
  auto [l2, n2, lr2, p2, m2, v2, c2, metrics2] =
      step(p, m, v, train::Counters{}, two, train::step_scalars(h, 3));
  auto [l1, n1, lr1, p1, m1, v1, c1, metrics1] =
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
  nn::GptConfig c = tiny_model();
  NamedTensors p = train::make_gpt_init(c)(Scalar(1.0));
  NamedTensors m = train::zeros_like_params(c), v = train::zeros_like_params(c);
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
    auto [loss, norm, lr, p1, m1, v1, c1, metrics] =
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
  nn::GptConfig c = tiny_model();
  NamedTensors p = train::make_gpt_init(c)(Scalar(2.0));
  NamedTensors z = train::zeros_like_params(c);
  std::vector<Tensor> batch = rows_batch(1, 4, 8, c.vocab);
  auto step = plain_step(c);
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
  nn::GptConfig c = tiny_model();
  c.moe_every = 1;
  c.moe.hidden = 8;
  c.moe.capacity_factor = 0.75;  // some choices must drop
  c.mtp_weights = {0.3};
  NamedTensors p = train::make_gpt_init(c)(Scalar(3.0));
  NamedTensors m = train::zeros_like_params(c), v = train::zeros_like_params(c);
  train::Counters counters = train::zero_counters(c);
  ASSERT_EQ(counters.at("moe.load").shape(), (Shape{1, 4}));
  auto step = train::make_train_step(c);
  train::Hyper h;
  try {  // an MoE step without its counters: one line saying what to pass
    plain_step(c)(p, m, v, train::Counters{}, rows_batch(1, 4, 8, c.vocab),
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
    auto [loss, norm, lr, p1, m1, v1, c1, metrics] =
        step(p, m, v, counters, batch, train::step_scalars(h, s));
    EXPECT_TRUE(std::isfinite(metrics.at("mtp_loss.1").item()));
    EXPECT_GT(metrics.at("moe.aux_loss").item(), 0.0);
    if (s % 2 == 1) losses.push_back(loss.item());
    counters = c1;
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
// and MoE segments included, and segments with sparse attention or an n-gram memory.
TEST(TrainStep, SegmentedStepEqualsTheOneProgram) {
  struct Case {
    int64_t layers, moe_every, barrier;
    bool mtp, scan = false;  // scan: each segment loops its repeated blocks
    bool listed = false;     // MoE in the listed layers 1..layers-1 instead of moe_every
    bool sparse = false;     // sparse attention in the odd layers (their indexers' loss too)
    bool engram = false;     // an n-gram memory in the odd layers (their segments hash tokens)
  };
  for (const Case& k :
       {Case{3, 0, 1, false}, Case{3, 0, 2, false}, Case{2, 2, 1, true}, Case{4, 2, 2, true},
        Case{4, 1, 2, false}, Case{4, 0, 2, false, true}, Case{4, 2, 4, true, true},
        Case{4, 0, 2, true, true, true}, Case{4, 2, 1, true, false, false, true},
        Case{4, 0, 4, false, true, false, true}, Case{4, 2, 1, true, false, false, false, true},
        Case{4, 0, 4, false, true, false, true, true}}) {
    nn::GptConfig c = tiny_model();
    c.layers = k.layers;
    c.moe_every = k.moe_every;
    for (int64_t i = 1; k.listed && i < k.layers; ++i) c.moe_layer_ids.push_back(i);
    for (int64_t i = 1; k.sparse && i < k.layers; i += 2) c.sparse_attention_layer_ids.push_back(i);
    c.sparse_attention = {.keys = 2, .window = 2, .indexer_heads = 2, .indexer_dim = 4};
    for (int64_t i = 1; k.engram && i < k.layers; i += 2) c.engram_layer_ids.push_back(i);
    c.engram = {.orders = {2, 3}, .heads = 2, .rows = 31, .dim = 4};
    c.moe.hidden = 8;
    if (k.mtp) c.mtp_weights = {0.3};
    const std::string what =
        fmt::format("layers {} moe_every {} barrier {} scan {} listed {} sparse {} engram {}",
                    k.layers, k.moe_every, k.barrier, k.scan, k.listed, k.sparse, k.engram);
    NamedTensors p = train::make_gpt_init(c)(Scalar(5.0));
    NamedTensors m = train::zeros_like_params(c), v = train::zeros_like_params(c);
    std::vector<Tensor> batch = rows_batch(2, 2, 8, c.vocab);
    train::Hyper h;
    auto one = plain_step(c)(p, m, v, train::zero_counters(c), batch, train::step_scalars(h, 3));
    nn::GptConfig scanned = c;
    scanned.layout = {k.scan, k.barrier};
    train::SegmentedStep split(scanned);
    EXPECT_EQ(split.segments().size(), size_t((k.layers + k.barrier - 1) / k.barrier)) << what;
    auto two = split(p, m, v, train::zero_counters(c), batch, train::step_scalars(h, 3));
    EXPECT_NEAR(std::get<0>(two).item(), std::get<0>(one).item(), 1e-5) << what;
    EXPECT_NEAR(std::get<1>(two).item(), std::get<1>(one).item(), 1e-4 * std::get<1>(one).item())
        << what;
    EXPECT_NEAR(std::get<2>(two).item(), std::get<2>(one).item(), 1e-9) << what;
    for (int i : {3, 4, 5}) {
      const NamedTensors& a = i == 3   ? std::get<3>(one)
                              : i == 4 ? std::get<4>(one)
                                       : std::get<5>(one);
      const NamedTensors& b = i == 3   ? std::get<3>(two)
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
    for (int i : {6, 7}) {  // counters, then metrics
      const train::Counters& ma = i == 6 ? std::get<6>(one) : std::get<7>(one);
      const train::Counters& mb = i == 6 ? std::get<6>(two) : std::get<7>(two);
      ASSERT_EQ(ma.size(), mb.size()) << what;
      for (const auto& [name, t] : ma) {
        std::vector<float> x = t.to_f32(), y = mb.at(name).to_f32();
        for (size_t j = 0; j < x.size(); ++j) {
          EXPECT_NEAR(y[j], x[j], 1e-5 + 1e-5 * std::abs(x[j])) << what << " " << name;
        }
      }
    }
  }
}

// The trainer's scanned step (launch.layer_layout = scanned): layers looped in the program over
// parameters and moments stored stacked, so AdamW (and its decay rule) runs on stacked
// tensors. Two steps equal the unrolled step's: loss, norm, every parameter and moment; with
// MoE layers also the scanned step compiled by the CPU backend.
TEST(TrainStep, ScannedStepWithStackedStateEqualsUnrolled) {
  testing_support::TempDir dir("scanned_step");
  const auto cpu_jit = testing_support::cpu_jit(dir);
  for (int64_t moe_every : {0, 2}) {
    nn::GptConfig c = tiny_model();
    c.layers = 4;
    c.moe_every = moe_every;
    c.moe.hidden = 8;
    c.mtp_weights = {0.3};
    nn::GptConfig s = c;
    s.layout.scanned = true;
    NamedTensors p = train::make_gpt_init(c)(Scalar(7.0));
    NamedTensors z = train::zeros_like_params(c);
    NamedTensors p1 = p, m1 = z, v1 = z;
    NamedTensors p2 = nn::stack_layer_params(s, p), m2 = nn::stack_layer_params(s, z), v2 = m2;
    ASSERT_LT(p2.size(), p1.size());
    auto one = plain_step(c);
    auto two = plain_step(s);
    const bool on_cpu = moe_every > 0;
    NamedTensors p3 = p2, m3 = m2, v3 = v2;
    auto three = plain_step(s);  // traced while the CPU JIT is the default
    train::Hyper h;
    for (int64_t step = 1; step <= 2; ++step) {
      std::vector<Tensor> batch = rows_batch(1, 4, 8, c.vocab);
      auto a = one(p1, m1, v1, train::zero_counters(c), batch, train::step_scalars(h, step));
      auto b = two(p2, m2, v2, train::zero_counters(s), batch, train::step_scalars(h, step));
      if (on_cpu) {
        std::optional<JitScope> on(std::in_place, cpu_jit);
        auto r = three(p3, m3, v3, train::zero_counters(s), batch, train::step_scalars(h, step));
        on.reset();
        EXPECT_NEAR(std::get<0>(r).item(), std::get<0>(a).item(), 1e-4);
        EXPECT_NEAR(std::get<1>(r).item(), std::get<1>(a).item(), 1e-3 * std::get<1>(a).item());
        for (const auto* m : {&std::get<6>(a), &std::get<7>(a)}) {  // counters, metrics
          const train::Counters& mr = m == &std::get<6>(a) ? std::get<6>(r) : std::get<7>(r);
          for (const auto& [name, t] : *m) {
            std::vector<float> x = t.to_f32(), y = mr.at(name).to_f32();
            for (size_t j = 0; j < x.size(); ++j)
              EXPECT_NEAR(y[j], x[j], 1e-4 + 1e-3 * std::abs(x[j])) << "cpu " << name;
          }
        }
        p3 = std::get<3>(r), m3 = std::get<4>(r), v3 = std::get<5>(r);
      }
      EXPECT_NEAR(std::get<0>(b).item(), std::get<0>(a).item(), 1e-5);
      EXPECT_NEAR(std::get<1>(b).item(), std::get<1>(a).item(), 1e-4 * std::get<1>(a).item());
      for (const auto* m : {&std::get<6>(a), &std::get<7>(a)}) {  // MoE counters, MTP loss
        const train::Counters& mb = m == &std::get<6>(a) ? std::get<6>(b) : std::get<7>(b);
        ASSERT_EQ(m->size(), mb.size());
        for (const auto& [name, t] : *m) {
          std::vector<float> x = t.to_f32(), y = mb.at(name).to_f32();
          for (size_t j = 0; j < x.size(); ++j)
            EXPECT_NEAR(y[j], x[j], 1e-5 + 1e-4 * std::abs(x[j])) << name;
        }
      }
      p1 = std::get<3>(a), m1 = std::get<4>(a), v1 = std::get<5>(a);
      p2 = std::get<3>(b), m2 = std::get<4>(b), v2 = std::get<5>(b);
    }
    for (auto [x, y] : {std::pair{&p1, &p2}, std::pair{&m1, &m2}, std::pair{&v1, &v2},
                        std::pair{&p1, &p3}, std::pair{&m1, &m3}, std::pair{&v1, &v3}}) {
      if (!on_cpu && (y == &p3 || y == &m3 || y == &v3)) continue;
      NamedTensors layers = nn::unstack_layer_params(s, *y);
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

// launch.remat_layers: the scanned stack's gradient recomputes each iteration from its input
// (on the reference interpreter, the very values it kept before): the same step, bit for bit,
// under every launch.remat_policy. The policies keep fewer values than no remat, and
// dots_saveable more than dots_with_no_batch_dims_saveable, which recomputes attention.
TEST(TrainStep, RematerialisedScanEqualsTheScannedStepUnderEveryPolicy) {
  nn::GptConfig c = tiny_model();
  c.layers = 4;
  c.layout.scanned = true;
  const NamedTensors p = nn::stack_layer_params(c, train::make_gpt_init(c)(Scalar(9.0)));
  const NamedTensors z = nn::stack_layer_params(c, train::zeros_like_params(c));
  const std::vector<Tensor> batch = rows_batch(1, 4, 8, c.vocab);
  train::Hyper h;
  auto keeping = plain_step(c);
  auto kept = keeping(p, z, z, train::zero_counters(c), batch, train::step_scalars(h, 1));
  // The values the forward loops hand their backward (the scan bodies' outputs, all counted),
  // and the attention kernels (or its rows' log-sum-exp) each backward loop runs again.
  auto body_outputs = [](const auto& step) {
    size_t n = 0;
    for (const Node& node : step.programs().at(0)->graph.nodes()) {
      for (const auto& [key, value] : node.attrs.items()) {
        if (const GraphRef* g = std::get_if<GraphRef>(&value); g && *g) n += (*g)->outputs().size();
      }
    }
    return n;
  };
  auto backward_attention = [](const auto& step, Op op = Op::attention) {
    int n = 0;
    for (const Node& node : step.programs().at(0)->graph.nodes()) {
      if (node.op != Op::scan || node.attrs.i("reverse") == 0) continue;
      for (const Node& b : node.attrs.graph("body").nodes()) n += b.op == op;
    }
    return n;
  };
  std::map<RematPolicy, size_t> outputs;
  for (RematPolicy policy : {RematPolicy::nothing_saveable, RematPolicy::dots_saveable,
                             RematPolicy::dots_with_no_batch_dims_saveable}) {
    const std::string name(remat_policy_name(policy));
    nn::GptConfig r = c;
    r.remat_layers = true;
    r.remat_policy = policy;
    auto recomputing = plain_step(r);
    auto again = recomputing(p, z, z, train::zero_counters(r), batch, train::step_scalars(h, 1));
    outputs[policy] = body_outputs(recomputing);
    EXPECT_LT(outputs[policy], body_outputs(keeping)) << name;
    EXPECT_EQ(backward_attention(recomputing) > 0, policy != RematPolicy::dots_saveable) << name;
    EXPECT_EQ(backward_attention(recomputing, Op::attention_lse) > 0,
              policy != RematPolicy::dots_saveable)
        << name;
    EXPECT_EQ(std::get<0>(again).item(), std::get<0>(kept).item()) << name;
    EXPECT_EQ(std::get<1>(again).item(), std::get<1>(kept).item()) << name;
    for (const auto& [param, t] : std::get<3>(kept)) {
      EXPECT_EQ(std::get<3>(again).at(param).to_f32(), t.to_f32()) << name << " " << param;
    }
  }
  EXPECT_EQ(backward_attention(keeping), 0);
  EXPECT_EQ(backward_attention(keeping, Op::attention_lse), 0);  // saved beside the attention
  EXPECT_LT(outputs[RematPolicy::nothing_saveable],
            outputs[RematPolicy::dots_with_no_batch_dims_saveable]);
  EXPECT_LT(outputs[RematPolicy::dots_with_no_batch_dims_saveable],
            outputs[RematPolicy::dots_saveable]);
}

// The set of programs is fixed by the config: segments of one structure share a program, so a
// deeper stack adds none.
TEST(TrainStep, SegmentedProgramsDoNotGrowWithDepth) {
  nn::GptConfig c = tiny_model();
  c.layers = 4;
  c.layout.split_every = 1;
  const size_t four = train::SegmentedStep(c).program_names().size();
  c.layers = 24;
  EXPECT_EQ(train::SegmentedStep(c).program_names().size(), four);
  EXPECT_EQ(four, 7u);  // counts, embed, segment fwd/bwd, head, embed backward, update
  c.moe_every = 2;      // dense and MoE segments: one more forward and backward program
  EXPECT_EQ(train::SegmentedStep(c).program_names().size(), 9u);
  c.layout.split_every = 2;
  EXPECT_EQ(train::SegmentedStep(c).program_names().size(), 7u);
  c.layout.split_every = 0;
  EXPECT_THROW(train::SegmentedStep{c}, InputError);
  c.layout.split_every = 1;
  // Stacked parameters (a scanned stack's storage) are refused with a line saying what to pass.
  c.layers = 2;
  c.moe_every = 0;
  c.layout.scanned = true;
  NamedTensors stacked = nn::stack_layer_params(c, train::zeros_like_params(c));
  try {
    train::SegmentedStep{c}(stacked, stacked, stacked, {}, rows_batch(1, 4, 8, c.vocab),
                            train::step_scalars(train::Hyper{}, 1));
    ADD_FAILURE() << "stacked parameters were accepted";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("takes per-layer parameters (h.N.*)"), std::string::npos)
        << e.what();
  }
}

// The split step sums micro-batches in the fixed tree (dist/fixed_order.h), each from zeros, so
// its predicted peak holds the tree's partial gradient sums: one at K = 1; the running sum and
// the next micro-batch's at odd K; a half's sum beside the other half's tree at even K.
TEST(TrainStep, SegmentedPeakHoldsTheTreesGradientSums) {
  nn::GptConfig c = tiny_model();
  c.layers = 2;
  c.layout.split_every = 1;
  const train::SegmentedStep split(c);
  int64_t params = 0;
  for (const auto& [name, shape] : nn::gpt_param_shapes(c)) params += numel(shape);
  const train::ProgramMemoryMap programs = {{"head", {1000, 400}}};
  auto beyond_one = [&](int64_t k) {
    return split.predicted_peak_bytes(programs, 2, 8, k) -
           split.predicted_peak_bytes(programs, 2, 8, 1);
  };
  const int64_t sums = 4 * params;  // f32 bytes of one gradient sum
  EXPECT_EQ(beyond_one(2), sums);
  EXPECT_EQ(beyond_one(3), sums);
  EXPECT_EQ(beyond_one(5), sums);
  EXPECT_EQ(beyond_one(4), 2 * sums);
  EXPECT_EQ(beyond_one(6), 2 * sums);
  EXPECT_EQ(beyond_one(8), 3 * sums);
  EXPECT_EQ(split.predicted_peak_bytes(programs, 2, 8, 1) - split.predicted_peak_bytes({}, 2, 8, 1),
            600);  // the largest program's peak beyond its inputs
  // ZeRO over 4 processes: stage 1 holds a quarter of each moment, stage 3 of the parameters
  // too; the gradient sums stay whole. Split over "model", only the shards count.
  train::StepOptions stage1;
  stage1.split_moments = true;
  train::StepOptions stage3 = stage1;
  stage3.split_gradients = true;
  for (const auto& [name, shape] : nn::gpt_param_shapes(c)) {
    stage3.split_parameters[name] = {DType::f32, shape};
  }
  const int64_t whole = split.predicted_peak_bytes({}, 2, 8, 1, 4);
  EXPECT_EQ(whole - train::SegmentedStep(c, stage1).predicted_peak_bytes({}, 2, 8, 1, 4),
            sums * 2 * 3 / 4);
  EXPECT_EQ(whole - train::SegmentedStep(c, stage3).predicted_peak_bytes({}, 2, 8, 1, 4),
            sums * 3 * 3 / 4);
  nn::GptConfig shards = c;
  shards.model_parallel = 2;
  int64_t held = 0;  // this process's elements of the parameters: its shards of the split ones
  std::map<std::string, TensorType> types;
  for (const auto& [name, shape] : nn::gpt_param_shapes(c)) types[name] = {DType::f32, shape};
  for (const auto& [name, t] : train::model_shard_types(shards, types)) held += numel(t.shape);
  ASSERT_LT(held, params);
  EXPECT_EQ(whole - train::SegmentedStep(shards).predicted_peak_bytes({}, 2, 8, 1, 4),
            4 * (params - held) * 4);  // parameters, both moments and one gradient sum
}

// ---- the state the trainer keeps (Variables), donation, resume, accumulation ----

std::map<std::string, const void*> addresses(const train::TrainState& s) {
  std::map<std::string, const void*> out;
  for (const auto* v : {&s.params, &s.m, &s.v, &s.counters}) {
    for (const auto& [name, at] : v->storage())
      out[std::to_string(reinterpret_cast<uintptr_t>(v)) + name] = at;
  }
  return out;
}

void expect_same_bits(const nn::Variables& a, const nn::Variables& b, const std::string& what) {
  const NamedTensors theirs = b.tensors();
  for (const auto& [name, t] : a.tensors()) {
    const Array& x = t.array();
    const Array& y = theirs.at(name).array();
    EXPECT_EQ(std::memcmp(x.data(), y.data(), x.nbytes()), 0) << what << " " << name;
  }
}

// Contract 14: a donated step writes the new parameters, moments and counters into the storage
// of the old ones (no variable ever copies), and computes bit for bit what a step into fresh
// buffers computes; on the reference and the compiled CPU backend, for the one-program step
// (MoE, MTP, K = 2 micro-batches) and for the step split at layer barriers.
TEST(TrainState, DonatedStepsWriteInPlaceAndEqualFreshBuffers) {
  testing_support::TempDir dir("donated_steps");
  const auto cpu_jit = testing_support::cpu_jit(dir);
  nn::GptConfig c = tiny_model();
  c.layers = 2;
  c.moe_every = 2;
  c.moe.hidden = 8;
  c.mtp_weights = {0.3};
  for (const bool on_cpu : {false, true}) {
    for (const int64_t barrier : {0, 1}) {
      if (on_cpu && barrier > 0) continue;  // the split step on the CPU backend: the CLI tests
      std::optional<JitScope> scope;
      if (on_cpu) scope.emplace(cpu_jit);
      const std::string what = fmt::format("cpu {} barrier {}", on_cpu, barrier);
      const train::InitFn init = train::make_gpt_init(c);
      train::TrainState a = train::initial_state(c, false, init, 3);
      train::TrainState b = train::initial_state(c, false, init, 3);
      const auto where = addresses(a);
      nn::GptConfig laid = c;
      laid.layout.split_every = barrier;
      const train::StepRunner donated(laid), fresh(laid, {.donate = false});
      train::Hyper h;
      for (int64_t step = 1; step <= 3; ++step) {
        const std::vector<Tensor> batch = rows_batch(2, 2, 8, c.vocab);
        const train::StepResult x = donated.run(a, batch, train::step_scalars(h, step));
        const train::StepResult y = fresh.run(b, batch, train::step_scalars(h, step));
        EXPECT_EQ(x.loss.item(), y.loss.item()) << what;
        EXPECT_EQ(x.grad_norm.item(), y.grad_norm.item()) << what;
        EXPECT_EQ(x.metrics.at("mtp_loss.1").item(), y.metrics.at("mtp_loss.1").item()) << what;
      }
      EXPECT_EQ(addresses(a), where) << what;  // the Variables' contract: storage never moves
      EXPECT_EQ(a.params.copies() + a.m.copies() + a.v.copies() + a.counters.copies(), 0) << what;
      EXPECT_GT(b.params.copies(), 0) << what;  // fresh buffers: the Variables copy them in
      expect_same_bits(a.params, b.params, what + " params");
      expect_same_bits(a.m, b.m, what + " m");
      expect_same_bits(a.v, b.v, what + " v");
      expect_same_bits(a.counters, b.counters, what + " counters");
    }
  }
}

// A compiled step gives the same bytes at 1, 2 and 3 OpenMP threads: every parallel loop, whole-
// array sum and matmul splits its work the same way whatever the team size (the data-parallel
// contract compares 2 ranks x 1 thread with 1 rank x 2 threads bit for bit). Sized so loops,
// logits and the loss take their parallel paths.
TEST(TrainStep, StepBytesDoNotDependOnTheThreadCount) {
  testing_support::TempDir dir("thread_count");
  const auto cpu_jit = testing_support::cpu_jit(dir);
  JitScope scope(cpu_jit);
  nn::GptConfig c = tiny_model();
  c.vocab = 256;
  c.width = 64;
  c.heads = 4;
  c.kv_heads = 2;
  c.mlp_hidden = 128;
  c.seq = 64;
  c.batch = 8;
  c.layers = 2;
  const int before = omp_get_max_threads();
  std::optional<train::TrainState> first;
  std::vector<double> first_losses;
  for (const int threads : {1, 2, 3}) {
    omp_set_num_threads(threads);
    train::TrainState state = train::initial_state(c, false, train::make_gpt_init(c), 5);
    const train::StepRunner step(c);
    std::vector<double> losses;
    for (int64_t s = 1; s <= 2; ++s) {
      const std::vector<Tensor> batch = rows_batch(1, c.batch, c.seq, c.vocab);
      losses.push_back(step.run(state, batch, train::step_scalars(train::Hyper{}, s)).loss.item());
    }
    if (!first) {
      first.emplace(std::move(state));
      first_losses = losses;
      continue;
    }
    const std::string what = fmt::format("{} threads", threads);
    EXPECT_EQ(losses, first_losses) << what;
    expect_same_bits(state.params, first->params, what + " params");
    expect_same_bits(state.m, first->m, what + " m");
    expect_same_bits(state.v, first->v, what + " v");
  }
  omp_set_num_threads(before);
}

// The generated C++ of a preset's one-micro-batch train step, and how often `needle` occurs in it.
// The traced train step of `c` (one program), before any pass.
Graph traced_step(const nn::GptConfig& c) {
  const train::TrainState state = train::allocated_state(c, false);
  auto step = train::make_train_step(c);
  const Program& program = step.prepare(
      state.params.tensors(), state.m.tensors(), state.v.tensors(), state.counters.tensors(),
      rows_batch(1, c.batch, c.seq, c.vocab), train::step_scalars(train::Hyper{}, 1));
  return program.graph;
}

// As it runs: shared unit functions inlined where they are called.
std::string lowered_step_source(const nn::GptConfig& c) {
  return testing_support::shared_units_inlined(
      cpu::generate_source(cpu::lower(traced_step(c))).text);
}

int64_t occurrences(const std::string& text, const std::string& needle) {
  int64_t n = 0;
  for (size_t at = text.find(needle); at != std::string::npos; at = text.find(needle, at + 1)) ++n;
  return n;
}

// Issue 13's layout contract: in the lowered gpt2-s and code-s steps no slice, pad, transpose or
// copy writes memory (the attention kernels read q, k and v where the projection put them and
// write [B, T, H, D], which is [B, T, C] as it lies), and neither joins anything: gpt2-s's
// attention gradients are written into their [B, T, 3C] join; in code-s so are the rotary halves
// (q and k, forward and backward: the backward's joins nest inside the q/k/v gradient's) and the
// SwiGLU halves' gradients.
TEST(TrainStep, LoweredStepsCallNoLayoutCopiesButTheJoins) {
  struct PerLayer {
    const char* preset;
    int64_t transposes, copies, concats, in_place;
  };
  for (const PerLayer& limit : {PerLayer{"gpt2-s", 0, 0, 0, 1}, PerLayer{"code-s", 0, 0, 0, 6}}) {
    const char* preset = limit.preset;
    const nn::GptConfig c = nn::gpt_preset(preset);
    const std::string src = lowered_step_source(c);
    auto calls = [&](const char* fn) { return occurrences(src, fmt::format("k->{}(", fn)); };
    EXPECT_EQ(calls("slice"), 0) << preset;
    EXPECT_EQ(calls("pad"), 0) << preset;
    EXPECT_LE(calls("broadcast"), 1) << preset;  // zeros that scatter_add accumulates into
    EXPECT_LE(calls("transpose"), limit.transposes * c.layers) << preset;
    EXPECT_LE(calls("copy"), limit.copies * c.layers) << preset;
    EXPECT_LE(calls("concat"), limit.concats * c.layers) << preset;
    // The q/k/v gradients are written into the joined [B, T, 3C] gradient (concat_in_place).
    EXPECT_EQ(occurrences(src, "every operand was written in place"), limit.in_place * c.layers)
        << preset;
    EXPECT_EQ(calls("attention"), c.layers) << preset;       // out and the backward's lse: one call
    EXPECT_EQ(calls("attention_grad"), c.layers) << preset;  // dq, dk and dv in one pass
  }
}

// concat_in_place on a gpt2 block (learned positions: the attention gradients feed the join
// directly) and a code block (rotary halves and SwiGLU gradients stored by loops into their
// joins, 4 query heads over 2 kv heads): two steps on the CPU backend match the reference
// interpreter, so every producer wrote at the right offsets of its join.
TEST(TrainStep, ConcatsJoinedInPlaceMatchTheReference) {
  for (const auto& [preset, in_place] : {std::pair{"gpt2-s", 1}, std::pair{"code-s", 6}}) {
    nn::GptConfig c = nn::gpt_preset(preset);
    c.vocab = 32;
    c.layers = 2;
    c.width = 16;
    c.heads = 4;
    c.kv_heads = std::string(preset) == "code-s" ? 2 : 4;
    c.mlp_hidden = 24;
    c.seq = 8;
    c.batch = 2;
    EXPECT_EQ(occurrences(lowered_step_source(c), "every operand was written in place"),
              in_place * c.layers)
        << preset;
    testing_support::TempDir dir(std::string("in_place_") + preset);
    const auto cpu_jit = testing_support::cpu_jit(dir);
    std::vector<std::pair<double, double>> figures[2];
    for (const bool on_cpu : {false, true}) {
      std::optional<JitScope> scope;
      if (on_cpu) scope.emplace(cpu_jit);
      train::TrainState state = train::initial_state(c, false, train::make_gpt_init(c), 3);
      const train::StepRunner runner(c);
      for (int64_t step = 1; step <= 2; ++step) {
        const train::StepResult r = runner.run(state, rows_batch(1, c.batch, c.seq, c.vocab),
                                               train::step_scalars(train::Hyper{}, step));
        figures[on_cpu].emplace_back(r.loss.item(), r.grad_norm.item());
      }
    }
    for (size_t i = 0; i < 2; ++i) {
      EXPECT_NEAR(figures[1][i].first, figures[0][i].first, 1e-4)
          << preset << " loss of step " << i + 1;
      EXPECT_NEAR(figures[1][i].second, figures[0][i].second, 1e-4 * figures[0][i].second)
          << preset << " grad norm of step " << i + 1;
    }
  }
}

// Layers repeat their units on other buffers, and repeated units share one function: the
// step's distinct functions hardly change with depth (nor does most of its compile time),
// while every unit keeps a function of its own.
TEST(TrainStep, RepeatedLayersShareTheirUnitFunctions) {
  for (const char* preset : {"gpt2-s", "code-s"}) {
    std::map<int64_t, std::pair<int64_t, int64_t>> counts;  // layers -> units, shared functions
    for (const int64_t layers : {3, 6}) {
      nn::GptConfig c = nn::gpt_preset(preset);
      c.layers = layers;
      const std::string src = cpu::generate_source(cpu::lower(traced_step(c))).text;
      counts[layers] = {occurrences(src, "__attribute__((noinline)) void unit"),
                        occurrences(src, "__attribute__((noinline)) void shared")};
      // Nearly every unit calls a shared function (the rest keep their code when a buffer is
      // declared in a form the sharing does not read).
      EXPECT_GE(occurrences(src, "\n  shared") * 10, counts[layers].first * 9) << preset;
    }
    EXPECT_GT(counts[3].second, 0) << preset;
    EXPECT_GT(counts[6].first, counts[3].first + 100) << preset;
    // (Only the optimizer's and the norm's loops over every parameter regroup with depth.)
    EXPECT_LE(std::abs(counts[6].second - counts[3].second), counts[3].second / 10) << preset;
    EXPECT_LT(counts[6].second * 4, counts[6].first) << preset;
  }
}

// The backward recomputes the GELU's cheap intermediates (remat): the forward's GELU loop
// stores the pre-activation, the tanh and the output, not the seven values it stored before.
TEST(TrainStep, TheGeluForwardStoresThreeValuesPerElement) {
  const nn::GptConfig c = nn::gpt_preset("gpt2-s");
  const std::string src = lowered_step_source(c);
  int64_t loops = 0;
  for (size_t at = src.find("(loop):"); at != std::string::npos; at = src.find("(loop):", at + 1)) {
    const std::string header = src.substr(at, src.find('\n', at) - at);
    if (header.find("=tanh") == std::string::npos) continue;
    const std::string stores = header.substr(header.find("; stores"));
    EXPECT_EQ(std::count(stores.begin(), stores.end(), '%'), 3) << header;
    ++loops;
  }
  EXPECT_EQ(loops, c.layers);
}

// matmul_precision = bf16 (bf16_operands): every product of the lowered gpt2-s and code-s steps
// multiplies bf16 copies, and no value is rounded twice: three copies per forward product (its
// input, its weight, and its output's cotangent, which both gradient products share). The GELU
// output only products read is stored as bf16 alone by the loop that makes it.
TEST(TrainStep, Bf16StepsRoundEachProductOperandOnce) {
  for (const char* preset : {"gpt2-s", "code-s"}) {
    const nn::GptConfig c = nn::gpt_preset(preset);
    passes::PassOptions o;
    o.bf16_matmul = true;
    const passes::Lowered l = cpu::lower(traced_step(c), o);
    const Graph& g = l.graph;
    int64_t products = 0;
    std::set<NodeId> rounded;
    for (const Node& n : g.nodes()) {
      if (n.op == Op::cast && n.type.dtype == DType::bf16) {
        EXPECT_TRUE(rounded.insert(n.inputs[0]).second) << preset << ": %" << n.inputs[0];
      }
      if (n.op != Op::dot_general) continue;
      ++products;
      EXPECT_EQ(n.attrs.dtype("preferred_element_type"), DType::f32) << preset;
    }
    EXPECT_EQ(products % 3, 0) << preset;  // each forward product and its two gradients
    EXPECT_EQ(static_cast<int64_t>(rounded.size()), products) << preset;
    if (std::string(preset) != "gpt2-s") continue;
    cpu::CodegenOptions co;
    co.matmul_precision = KEEL_MATMUL_BF16;
    const std::string src = cpu::generate_source(l, co).text;
    int64_t gelu = 0;
    for (size_t at = src.find("(loop):"); at != std::string::npos;
         at = src.find("(loop):", at + 1)) {
      const std::string header = src.substr(at, src.find('\n', at) - at);
      if (header.find("=tanh") == std::string::npos) continue;
      ++gelu;
      EXPECT_NE(header.find("=cast; stores"), std::string::npos) << header;
      const std::string stores = header.substr(header.find("; stores"));
      EXPECT_EQ(std::count(stores.begin(), stores.end(), '%'), 3) << header;
    }
    EXPECT_EQ(gelu, c.layers);
  }
}

// A scanned bf16 step keeps the bf16 copies the unrolled one keeps: each stacked weight is rounded
// once, outside both loops (one copy for the forward and the backward), the forward loop saves
// the bf16 copy of what only the backward's products read, and a loop body rounds a value it was
// handed only when something besides a product reads it too (the attention output, which its
// gradient kernel reads in f32).
TEST(TrainStep, ScannedBf16StepsRoundWeightsOnceAndSaveBf16Residuals) {
  nn::GptConfig c = nn::gpt_preset("code-s");
  c.layout.scanned = true;
  passes::PassOptions o;
  o.bf16_matmul = true;
  const passes::Lowered lowered = cpu::lower(traced_step(c), o);
  const Graph& g = lowered.graph;
  std::map<bool, std::set<NodeId>> rounded_inputs;  // per direction: bf16 casts the scan reads
  int bf16_residuals = 0;
  for (const Node& n : g.nodes()) {
    if (n.op != Op::scan) continue;
    const bool forward = n.attrs.i("reverse") == 0;
    for (NodeId in : n.inputs) {
      const Node& x = g.node(in);
      if (x.op == Op::cast && x.type.dtype == DType::bf16) rounded_inputs[forward].insert(in);
    }
    // The body as lowered with the step, which code generation emits.
    const Graph& low = lowered.bodies.at(static_cast<NodeId>(&n - g.nodes().data()))->graph;
    std::vector<std::vector<Op>> readers(low.size());
    for (const Node& b : low.nodes()) {
      for (NodeId in : b.inputs) readers[static_cast<size_t>(in)].push_back(b.op);
    }
    for (const Node& b : low.nodes()) {
      if (b.op != Op::cast || b.type.dtype != DType::bf16) continue;
      const NodeId x = b.inputs[0];
      if (low.node(x).op != Op::parameter) continue;
      const auto& r = readers[static_cast<size_t>(x)];
      EXPECT_TRUE(std::any_of(r.begin(), r.end(),
                              [](Op op) {
                                return op != Op::cast && op != Op::dot_general &&
                                       op_info(op).kind != OpKind::Layout;
                              }))
          << (forward ? "forward" : "backward") << " body rounds %" << x
          << ", which only products read";
    }
    if (!forward) continue;
    const size_t carries = static_cast<size_t>(scan_info(n.attrs, n.inputs.size()).carries);
    for (size_t r = carries; r < low.outputs().size(); ++r) {
      bf16_residuals += low.node(low.outputs()[r]).type.dtype == DType::bf16;
    }
  }
  ASSERT_EQ(rounded_inputs.size(), 2u);
  EXPECT_GE(rounded_inputs[true].size(), 4u);  // q/k/v, the output projection, the MLP's two
  EXPECT_EQ(rounded_inputs[true], rounded_inputs[false]);  // one copy for both loops
  EXPECT_EQ(bf16_residuals, 3);  // the norms' outputs and the MLP's hidden product
}

// bf16_operands changes no bit: two tiny code-s steps with it and without (each product then
// rounds its f32 operands itself) end in the same parameters and moments.
TEST(TrainStep, Bf16OperandsChangeNoBitOfTheStep) {
  for (const bool scanned : {false, true}) {
    SCOPED_TRACE(scanned ? "scanned" : "unrolled");
    std::optional<train::TrainState> states[2];
    for (const bool disabled : {false, true}) {
      testing_support::TempDir dir(std::string(disabled ? "bf16_pass_off" : "bf16_pass_on") +
                                   (scanned ? "_scan" : ""));
      runtime::JitConfig jc;
      jc.client = cpu::make_cpu_client();
      jc.cache.dir = dir / "cache";
      jc.run_dir = dir / "run";
      jc.compile.matmul_precision = "bf16";
      if (disabled) jc.compile.passes.disabled = {"bf16_operands"};
      jc.compile.passes.dump_dir = dir / "passes";
      JitScope scope(std::make_shared<runtime::CachedJit>(jc));
      nn::GptConfig c = tiny_model();
      c.layers = 2;
      c.layout.scanned = scanned;
      train::TrainState state = train::initial_state(c, false, train::make_gpt_init(c), 9);
      const train::StepRunner step(c);
      for (int64_t s = 1; s <= 2; ++s) {
        step.run(state, rows_batch(1, c.batch, c.seq, c.vocab),
                 train::step_scalars(train::Hyper{}, s));
      }
      states[disabled].emplace(std::move(state));
      // The backend asked for the pass (and ran it unless disabled).
      int64_t rewritten = 0;
      for (const auto& e : std::filesystem::directory_iterator(dir / "passes")) {
        const std::string name = e.path().filename().string();
        if (name.find(".2.bf16_operands.txt") == std::string::npos) continue;
        rewritten += files::read_file(e.path().string(), 1 << 26, "dump")
                         .find("preferred_element_type=f32") != std::string::npos;
      }
      EXPECT_EQ(rewritten > 0, !disabled);
    }
    expect_same_bits(states[0]->params, states[1]->params, "params");
    expect_same_bits(states[0]->m, states[1]->m, "m");
    expect_same_bits(states[0]->v, states[1]->v, "v");
  }
}

// Loop units run in one thread team per stretch between kernel calls: a step opens at most one
// parallel region more than it calls kernels, and only whole-array sums open their own.
TEST(TrainStep, LoweredStepsRunTheirLoopsInOneTeamBetweenKernelCalls) {
  for (const char* preset : {"gpt2-s", "code-s"}) {
    const std::string src = lowered_step_source(nn::gpt_preset(preset));
    auto count = [&](const std::string& needle) { return occurrences(src, needle); };
    const int64_t kernels = count("  k->"), units = count("__attribute__((noinline)) void unit");
    EXPECT_GT(units, 250) << preset;
    EXPECT_LE(count("#pragma omp parallel\n"), kernels + 1) << preset;
    EXPECT_EQ(count("#pragma omp parallel for"), count("float part[")) << preset;
    EXPECT_GT(count("#pragma omp for"), kernels) << preset;
  }
}

// The compiled step writes parameters and moments straight into their buffers: its generated
// code copies nothing into a donated input but the MoE counters, which the micro-batch loop
// carries (K = 2), and nothing at all with K = 1.
TEST(TrainState, CompiledStepUpdatesParametersAndMomentsInPlace) {
  nn::GptConfig c = tiny_model();
  c.layers = 2;
  c.moe_every = 2;
  c.moe.hidden = 8;
  const train::TrainState state = train::allocated_state(c, false);
  const int64_t P = static_cast<int64_t>(state.params.size());
  for (int64_t K : {1, 2}) {
    auto step = train::make_train_step(c);
    const Program& program = step.prepare(
        state.params.tensors(), state.m.tensors(), state.v.tensors(), state.counters.tensors(),
        rows_batch(K, 2, 8, c.vocab), train::step_scalars(train::Hyper{}, 1));
    const std::string src = cpu::generate_source(cpu::lower(program.graph)).text;
    const std::string copy = "__builtin_memcpy(const_cast<void*>(in[";
    int copies = 0;
    for (size_t at = src.find(copy); at != std::string::npos; at = src.find(copy, at + 1)) {
      const int64_t input = std::stoll(src.substr(at + copy.size()));
      EXPECT_GE(input, 3 * P) << "K " << K << ": input " << input << " (a parameter or moment) "
                              << "is computed elsewhere and copied in";
      ++copies;
    }
    EXPECT_LE(copies, K == 1 ? 0 : 2) << "K " << K;
  }
}

// Contract 9: a resume copies the checkpoint into the Variables that exist (same storage),
// per layer or stacked, and the init program never runs; a checkpoint of another shape lists
// every tensor that does not match.
TEST(TrainState, ResumeCopiesIntoTheStateAndRunsNoInitProgram) {
  testing_support::TempDir dir("resume_state");
  nn::GptConfig c = tiny_model();
  c.name = "code-s";  // trainer.json names a preset the config is read against
  c.vocab = 256;      // and the byte tokenizer's vocabulary
  c.layers = 2;
  train::TrainState trained = train::initial_state(c, false, train::make_gpt_init(c), 9);
  const train::StepRunner step(c);
  for (int64_t s = 1; s <= 2; ++s)
    step.run(trained, rows_batch(1, 4, 8, c.vocab), train::step_scalars(train::Hyper{}, s));
  train::CheckpointData d;
  d.step = 2;
  train::state_to_checkpoint(trained, c, d);
  const nlohmann::json trainer = {{"step", 2},
                                  {"cursor", {{"row", 2 * 1 * 4}}},  // steps x K x B rows read
                                  {"config", nlohmann::json::parse(c.to_json())},
                                  {"accum", 1},
                                  {"seed", 0}};
  d.trainer = trainer.dump();
  for (const bool stacked : {false, true}) {
    nn::GptConfig model = c;
    model.layout.scanned = stacked;
    train::TrainState state = train::allocated_state(model, stacked);
    const auto where = addresses(state);
    train::checkpoint_into_state(d, model, dir.str(), state);
    EXPECT_EQ(addresses(state), where) << "stacked " << stacked;
    train::CheckpointData back;
    train::state_to_checkpoint(state, model, back);
    train::hold_all_tensors(back);
    for (const auto& [name, a] : d.model)
      EXPECT_TRUE(a.same_bytes(back.model.at(name))) << name << " stacked " << stacked;
    for (const auto& [name, a] : d.optimizer)
      EXPECT_TRUE(a.same_bytes(back.optimizer.at(name))) << name << " stacked " << stacked;
  }
  // The trainer's start on --resume: a JIT of its own shows which programs ran (none).
  train::write_checkpoint(dir.str(), d, 1);
  train::TrainOptions o;
  o.model = c;
  o.run_dir = dir.str();
  o.resume = true;
  o.steps = 5;
  const auto jit = testing_support::cpu_jit(dir);
  JitScope scope(jit);
  train::Start start = train::start_run(o, Runtime::current(), c, false, {}, o.accum);
  EXPECT_EQ(start.first_step, 3);
  EXPECT_TRUE(jit->log().events().empty());  // no init program
  expect_same_bits(start.state.params, trained.params, "resumed params");
  // A bad optimizer file is found before the model file is copied: nothing is written.
  train::CheckpointData bad = d;
  bad.optimizer.erase(bad.optimizer.begin());
  train::TrainState target = train::initial_state(c, false, train::make_gpt_init(c), 1);
  std::map<std::string, Array> kept;  // views of the storage itself
  for (const auto& [name, t] : target.params.tensors()) kept[name] = t.array();
  std::map<std::string, Array> copies;
  for (const auto& [name, a] : kept) copies[name] = a.clone();
  EXPECT_THROW(train::checkpoint_into_state(bad, c, "ckpt", target), InputError);
  for (const auto& [name, a] : kept) EXPECT_TRUE(a.same_bytes(copies.at(name))) << name;
  nn::GptConfig wider = c;
  wider.width = 24;
  train::TrainState other = train::allocated_state(wider, false);
  try {
    train::checkpoint_into_state(d, wider, "ckpt", other);
    ADD_FAILURE() << "a checkpoint of another width was accepted";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("[checkpoint] ckpt/model.safetensors: "),
              std::string::npos)
        << e.what();
    EXPECT_NE(
        std::string(e.what()).find("wte.weight shape [256,16] in the checkpoint, [256,24] here"),
        std::string::npos)
        << e.what();
  }
}

// Calls `check` for `c` split over "model" by 1 and 2, per layer and scanned, with every part
// of the state split over each of `shard_counts` processes of "data".
void for_each_layout(const nn::GptConfig& c, std::initializer_list<int64_t> shard_counts,
                     const std::function<void(const nn::GptConfig&, bool, train::StateShards,
                                              const std::string&)>& check) {
  for (const int64_t model_parallel : {1, 2}) {
    for (const bool stacked : {false, true}) {
      for (const int64_t shards : shard_counts) {
        nn::GptConfig m = c;
        m.model_parallel = model_parallel;
        m.layout.scanned = stacked;
        check(m, stacked, {shards, shards, shards},
              fmt::format("model {} stacked {} shards {}", model_parallel, stacked, shards));
      }
    }
  }
}

// What process 0 of each axis holds of whole per-layer tensors: its shards over "model" of
// `m`'s split ones, stacked where scanned, then its slices over `shards` processes of "data".
NamedTensors held_part(const nn::GptConfig& m, bool stacked, int64_t shards,
                       const NamedTensors& whole) {
  NamedTensors held = train::model_shards(m, whole);
  if (stacked) held = nn::stack_layer_params(m, held);
  return shards > 1 ? train::slice_moments(held, shards, 0) : held;
}

// Flips the bits `mask` of the byte at `at` of `file` (from its end when negative), or sets it to
// `mask`.
void flip(const std::string& file, std::streamoff at, char mask, bool set = false) {
  std::fstream f(file, std::ios::in | std::ios::out | std::ios::binary);
  f.seekg(at, at < 0 ? std::ios::end : std::ios::beg);
  const char byte = set ? mask : static_cast<char>(f.get() ^ mask);
  f.seekp(at, at < 0 ? std::ios::end : std::ios::beg);
  f.put(byte);
}

// Issue 50 item 5: a resume copies each process's slices (and shards over "model") of an
// opened checkpoint, read one tensor at a time, into its state: the same bits as slicing the
// whole tensors (this process is index 0 of each axis), for every layout.
TEST(TrainState, AnOpenedCheckpointFillsEachLayoutsSlices) {
  testing_support::TempDir dir("opened_resume");
  nn::GptConfig c = tiny_model();
  c.layers = 2;
  const train::CheckpointData d = testing_support::numbered_checkpoint(c);
  const std::string at = train::write_checkpoint(dir.str(), d, 1);
  for_each_layout(
      c, {1, 2, 4},
      [&](const nn::GptConfig& m, bool stacked, train::StateShards n, const std::string& what) {
        const int64_t shards = n.parameters;
        train::TrainState state = train::allocated_state(m, stacked, n);
        const auto where = addresses(state);
        train::checkpoint_into_state(train::open_checkpoint(at), m, at, state);
        EXPECT_EQ(addresses(state), where) << what;
        auto expected = [&](const train::TensorMap& file, const std::string& suffix) {
          NamedTensors whole;
          for (const auto& [name, shape] : nn::gpt_param_shapes(c)) {
            whole[name] = Tensor(file.at(name + suffix));
          }
          return held_part(m, stacked, shards, whole);
        };
        const std::pair<const nn::Variables*, NamedTensors> parts[] = {
            {&state.params, expected(d.model, "")},
            {&state.m, expected(d.optimizer, ".exp_avg")},
            {&state.v, expected(d.optimizer, ".exp_avg_sq")}};
        for (const auto& [vars, want] : parts) {
          const NamedTensors got = vars->tensors();
          ASSERT_EQ(got.size(), want.size()) << what;
          for (const auto& [name, t] : want) {
            EXPECT_TRUE(got.at(name).array().same_bytes(t.array())) << what << " " << name;
          }
        }
      });
  // A damaged byte is found once every tensor was read: the checksum names the file. A byte that
  // makes a value NaN is damage too, not a diverged run, when the checksum says so.
  auto refusal = [&](const std::string& dir) {
    train::TrainState state = train::allocated_state(c, false);
    try {
      train::checkpoint_into_state(train::open_checkpoint(dir), c, dir, state);
    } catch (const InputError& e) {
      return std::string(e.what());
    }
    return std::string("accepted");
  };
  const std::string optimizer = at + "/optimizer.safetensors";
  flip(optimizer, -8, 1);  // the low byte of a float: still finite
  EXPECT_NE(refusal(at).find(optimizer + ": its tensors do not match the checksum"),
            std::string::npos)
      << refusal(at);
  flip(optimizer, -8, 1);
  const std::string model_file = at + "/model.safetensors";
  uint64_t header = 0;
  std::ifstream(model_file, std::ios::binary).read(reinterpret_cast<char*>(&header), 8);
  const auto first = static_cast<std::streamoff>(8 + header);  // the first tensor's first float
  flip(model_file, first + 3, 0x7f, true);                     // 0x7fc0....: a NaN
  flip(model_file, first + 2, static_cast<char>(0xc0), true);
  EXPECT_NE(refusal(at).find(model_file + ": its tensors do not match the checksum"),
            std::string::npos)
      << refusal(at);
  // Written so, a NaN is the run's: named as a divergence.
  train::CheckpointData diverged = d;
  diverged.model.begin()->second = diverged.model.begin()->second.clone();
  diverged.model.begin()->second.set_f64(0, std::nan(""));
  testing_support::TempDir other("opened_resume_nan");
  const std::string nan_at = train::write_checkpoint(other.str(), diverged, 1);
  EXPECT_NE(refusal(nan_at).find("holds NaN (element 0 of"), std::string::npos) << refusal(nan_at);
}

// Issue 50: --init-from copies its checkpoint's parameters into each process's slices and shards,
// read from the model file one tensor at a time, over what the state's own init made (a stack
// partly copied keeps the init's other layers); its optimizer file's tensors are never read, so
// damage there does not stop it, and the model file's checksum is checked.
TEST(TrainState, InitFromFillsEachLayoutsSlicesFromTheModelFileAlone) {
  testing_support::TempDir dir("init_from");
  nn::GptConfig c = tiny_model();
  c.layers = 2;
  const train::CheckpointData d = testing_support::numbered_checkpoint(c);
  const std::string at = train::write_checkpoint(dir.str(), d, 1);
  // As if the checkpoint's model had no MLP in layer 1: those stay the init's.
  std::map<std::string, TensorType> given = train::open_checkpoint(at).model_types;
  std::erase_if(given, [](const auto& entry) { return entry.first.starts_with("h.1.mlp."); });
  ASSERT_LT(given.size(), d.model.size());
  NamedTensors whole = [&] {
    JitScope scope(testing_support::cpu_jit(dir));
    return train::make_gpt_init(c)(Scalar(7.0));
  }();
  for (const auto& [name, t] : given) whole[name] = Tensor(d.model.at(name));
  for_each_layout(
      c, {1, 2},
      [&](const nn::GptConfig& m, bool stacked, train::StateShards n, const std::string& what) {
        JitScope scope(testing_support::cpu_jit(dir));  // a program budget per layout
        train::TrainState state =
            train::initial_state(m, stacked, train::make_state_init(m, stacked, n), 7, n);
        const auto where = addresses(state);
        const train::CheckpointData opened = train::open_checkpoint(at);
        train::parameters_into_state(given, opened.model_tensor, m, state);
        EXPECT_EQ(addresses(state), where) << what;
        const NamedTensors held = held_part(m, stacked, n.parameters, whole);
        const NamedTensors got = state.params.tensors();
        ASSERT_EQ(got.size(), held.size()) << what;
        for (const auto& [name, t] : held) {
          EXPECT_TRUE(got.at(name).array().same_bytes(t.array())) << what << " " << name;
        }
      });
  // The run's start, from the run directory (its newest checkpoint), with its optimizer file's
  // last float changed: every parameter is the file's.
  train::TrainOptions o;
  o.model = c;
  o.seed = 7;
  o.init_from = dir.str();
  flip(at + "/optimizer.safetensors", -8, 1);
  JitScope scope(testing_support::cpu_jit(dir));
  const train::Start start = train::start_run(o, Runtime::current(), c, false, {}, 1);
  for (const auto& [name, t] : start.state.params.tensors()) {
    EXPECT_TRUE(t.array().same_bytes(d.model.at(name))) << name;
  }
  const std::string model_file = at + "/model.safetensors";
  flip(model_file, -8, 1);
  try {
    train::start_run(o, Runtime::current(), c, false, {}, 1);
    ADD_FAILURE() << "a damaged model file started a run";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("[train] --init-from " + dir.str() + ": "),
              std::string::npos)
        << e.what();
    EXPECT_NE(std::string(e.what()).find(model_file + ": its tensors do not match the checksum"),
              std::string::npos)
        << e.what();
  }
}

// 4 layers of width 512 (SwiGLU 2048), 16.9M parameters: large enough that holding the model
// once more shows in a process's memory.
nn::GptConfig model_of_67_mb() {
  nn::GptConfig c = tiny_model();
  c.width = 512;
  c.heads = 8;
  c.kv_heads = 8;
  c.mlp_hidden = 2048;
  c.layers = 4;
  c.vocab = 256;
  return c;
}

// The bytes of every f32 parameter of `c`, and of its largest.
std::pair<int64_t, int64_t> parameter_bytes(const nn::GptConfig& c) {
  int64_t all = 0, largest = 0;
  for (const auto& [name, shape] : nn::gpt_param_shapes(c)) {
    all += numel(shape) * 4;
    largest = std::max(largest, numel(shape) * 4);
  }
  return {all, largest};
}

// Issue 50: a new run's init program makes what each process holds, not the model whole: the
// same bits as slicing the whole init's tensors (this process is index 0 of each axis), and at
// 4 processes' slices its predicted peak is theirs and one tensor's temporaries (84 MB whole).
TEST(TrainState, TheStateInitMakesOnlyWhatTheProcessHolds) {
  testing_support::TempDir dir("state_init");
  nn::GptConfig c = tiny_model();
  c.layers = 2;
  c.bias = true;  // the fused QKV bias splits in three parts along dim 0 (SwiGLU has none)
  c.mamba_layer_ids = {1};  // in_proj in five parts, the convolution's in three
  c.mamba = {.state = 8, .head_dim = 8, .expand = 2, .conv = 4, .chunk = 8};  // 4 heads
  for_each_layout(
      c, {1, 2},
      [&](const nn::GptConfig& m, bool stacked, train::StateShards n, const std::string& what) {
        const int64_t shards = n.parameters;
        JitScope scope(testing_support::cpu_jit(dir));  // a program budget per layout
        const train::InitFn init = train::make_state_init(m, stacked, n);
        const NamedTensors made = init(Scalar(7.0));
        const std::map<std::string, TensorType> stored = train::stored_types(m, stacked);
        ASSERT_EQ(made.size(), stored.size()) << what;
        for (const auto& [name, t] : stored) {
          const TensorType held = shards > 1 ? train::moment_shard_type(name, t, shards) : t;
          EXPECT_EQ(made.at(name).type(), held) << name << " " << what;
        }
        const train::TrainState from_held = train::initial_state(m, stacked, init, 7, n);
        JitScope whole_init(testing_support::cpu_jit(dir));
        const train::TrainState placed =
            train::initial_state(m, stacked, train::make_gpt_init(m), 7, n);
        expect_same_bits(from_held.params, placed.params, what);
      });
  // A model of 67 MB at 4 processes' slices.
  const nn::GptConfig big = model_of_67_mb();
  const auto [whole_bytes, largest] = parameter_bytes(big);
  const auto jit = testing_support::cpu_jit(dir);
  JitScope scope(jit);
  train::make_gpt_init(big)(Scalar(1.0));
  const int64_t whole_peak = jit->program_memory().at("init").peak_bytes;
  train::make_state_init(big, false, {4, 4, 4})(Scalar(1.0));
  const int64_t held_peak = jit->program_memory().at("init").peak_bytes;
  EXPECT_GE(whole_peak, whole_bytes);
  // Its slices, and a normal draw's temporaries (two uniforms) of one tensor and its slice.
  EXPECT_LT(held_peak, whole_bytes / 4 + 4 * largest) << "the whole init's peak " << whole_peak;
}

// This process's high-water mark of resident memory, in bytes; reset() starts it again from
// the resident set (Linux's clear_refs 5). nullopt where the kernel does not offer it.
std::optional<int64_t> resident_peak_bytes(bool reset) {
  if (reset) {
    std::ofstream clear("/proc/self/clear_refs");
    if (!(clear << "5" << std::flush)) return std::nullopt;
  }
  std::ifstream status("/proc/self/status");
  for (std::string line; std::getline(status, line);) {
    if (line.starts_with("VmHWM:")) return std::stoll(line.substr(6)) * 1024;
  }
  return std::nullopt;
}

// Issue 50 item 5: resuming a state split over 4 processes holds the checkpoint one tensor at a
// time, never its files: the resident peak grows by a few tensors, not by the files' 150 MB
// (the files read whole grew it by more than that).
TEST(TrainState, AResumeHoldsOneCheckpointTensorAtATime) {
  testing_support::TempDir dir("resume_memory");
  const nn::GptConfig c = model_of_67_mb();
  const auto [whole_bytes, largest] = parameter_bytes(c);
  const int64_t file_bytes = 3 * whole_bytes;  // the parameters and both moments
  ASSERT_GT(file_bytes, 140'000'000);
  const std::string at = [&] {
    const train::CheckpointData d = testing_support::numbered_checkpoint(c);
    return train::write_checkpoint(dir.str(), d, 1);
  }();
  for (const bool stacked : {false, true}) {
    nn::GptConfig m = c;
    m.layout.scanned = stacked;
    train::TrainState state = train::allocated_state(m, stacked, {4, 4, 4});
    const train::CheckpointData opened = train::open_checkpoint(at);
    const std::optional<int64_t> before = resident_peak_bytes(true);
    if (!before) GTEST_SKIP() << "this kernel keeps no resettable resident peak";
    train::checkpoint_into_state(opened, m, at, state);
    const int64_t grew = *resident_peak_bytes(false) - *before;
    // One variable's value (a stack of 4 layers, a quarter of it) and one tensor and its copy.
    EXPECT_LT(grew, 4 * largest + (16 << 20)) << "stacked " << stacked << ": the resume grew the "
                                              << "resident peak by " << grew << " bytes";
  }
  {
    // --init-from at 4 processes' slices: the state's init and the model file a tensor at a time.
    train::TrainOptions o;
    o.model = c;
    o.seed = 1;
    o.init_from = at;
    JitScope scope(testing_support::cpu_jit(dir));
    const int64_t before = *resident_peak_bytes(true);
    const train::Start start = train::start_run(o, Runtime::current(), c, false, {}, 1, {4, 4, 4});
    const int64_t grew = *resident_peak_bytes(false) - before;
    // The parameters and both moments a process holds, and one tensor's draw and read.
    EXPECT_LT(grew, 3 * whole_bytes / 4 + 4 * largest + (16 << 20))
        << "--init-from grew the resident peak by " << grew << " bytes";
  }
  // Writing a scanned state unstacks one stack at a time (all three parts at once grew it by
  // the files' size).
  nn::GptConfig scanned = c;
  scanned.layout.scanned = true;
  train::TrainState state = train::allocated_state(scanned, true);
  train::checkpoint_into_state(train::open_checkpoint(at), scanned, at, state);
  train::CheckpointData d;
  d.step = 2;
  d.trainer = nlohmann::json{{"step", 2}}.dump();
  const int64_t before = *resident_peak_bytes(true);
  train::state_to_checkpoint(state, scanned, d);
  train::write_checkpoint(dir.str(), d, 2);
  const int64_t grew = *resident_peak_bytes(false) - before;
  EXPECT_LT(grew, c.layers * largest + (16 << 20))  // one stack
      << "writing a scanned state grew the resident peak by " << grew << " bytes";
  // And the file is the one the per-layer state wrote.
  for (const char* file : {"model.safetensors", "optimizer.safetensors"}) {
    EXPECT_EQ(
        files::read_file(at + "/" + file, int64_t{1} << 30, "written"),
        files::read_file(dir.str() + "/checkpoints/step-2/" + file, int64_t{1} << 30, "rewritten"))
        << file;
  }
}

// Preparing the split step traces each program with stand-ins for the results of the ones
// before it (the gradient sums, the new parameters and moments): they take no memory, so
// preparing a 67 MB model raises the resident peak by less than its parameters. As zeros in
// memory they raised it by five times them, above the step's predicted peak.
TEST(TrainStep, PreparingASplitStepHoldsNoResults) {
  testing_support::TempDir dir("split_prepare");
  nn::GptConfig c = model_of_67_mb();
  c.layout.split_every = 1;
  const auto [whole_bytes, largest] = parameter_bytes(c);
  JitScope scope(testing_support::cpu_jit(dir));
  train::TrainState state = train::allocated_state(c, false);
  const train::StepRunner runner(c);
  const std::vector<Tensor> batch = rows_batch(1, c.batch, c.seq, c.vocab);
  const std::optional<int64_t> before = resident_peak_bytes(true);
  if (!before) GTEST_SKIP() << "this kernel keeps no resettable resident peak";
  runner.prepare(state, batch, train::step_scalars(train::Hyper{}, 1));
  const int64_t grew = *resident_peak_bytes(false) - *before;
  EXPECT_LT(grew, whole_bytes / 2) << "preparing the split step grew the resident peak by " << grew
                                   << " bytes; the parameters are " << whole_bytes;
}

// Item 1 of issue 48: a checkpoint starts every tensor's host copy before it waits for the
// first, so on a device whose memory is not the host's the copies overlap. The fake device's
// queue is held: only copies started before any finished are there to count.
TEST(TrainState, ACheckpointStartsEveryHostCopyBeforeWaiting) {
  using testing_support::FakeDeviceMemory;
  using testing_support::FakeDeviceQueue;
  auto on_fake_device = [](const nn::Variables& v) {  // host-made values, placed by the JIT
    NamedTensors values;
    for (const auto& [name, t] : v.tensors()) values[name] = Tensor(t.array().clone());
    return nn::Variables(values);
  };
  for (const bool stacked : {false, true}) {  // a scanned run's state is unstacked to write
    nn::GptConfig c = tiny_model();
    c.layers = 2;
    c.layout.scanned = stacked;
    const train::TrainState host = train::initial_state(c, stacked, train::make_gpt_init(c), 3);
    const NamedTensors per_layer =
        stacked ? nn::unstack_layer_params(c, host.params.tensors()) : host.params.tensors();
    JitScope scope(std::make_shared<testing_support::FakeDeviceJit>());
    train::TrainState state;  // the same values, on the fake device
    state.stacked = stacked;
    state.params = on_fake_device(host.params);
    state.m = on_fake_device(host.m);
    state.v = on_fake_device(host.v);
    const int tensors = static_cast<int>(3 * host.params.size());
    ASSERT_EQ(state.params.tensors().begin()->second.buffer().device(), "fake:0");

    struct Held {  // the fake device's queue, held until let go (or on the way out)
      Held() { FakeDeviceQueue::instance().hold(); }
      ~Held() { let_go(); }
      void let_go() {
        if (held) FakeDeviceQueue::instance().release();
        held = false;
      }
      bool held = true;
    };
    const int before = FakeDeviceMemory::host_copies;
    train::CheckpointData d;
    std::future<void> writing;
    Held queue;  // after the future: let go before its destructor waits for the writer
    writing = std::async(std::launch::async, [&] { train::state_to_checkpoint(state, c, d); });
    int started = 0;
    for (int tries = 0; tries < 1000 && started < tensors; ++tries) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
      started = FakeDeviceMemory::host_copies - before;
    }
    queue.let_go();
    writing.get();
    train::hold_all_tensors(d);  // a stack's layers are asked for as the file is written
    EXPECT_EQ(started, tensors) << "copies started before the first was waited for, stacked "
                                << stacked;
    ASSERT_EQ(d.model.size(), per_layer.size());
    for (const auto& [name, t] : per_layer)
      EXPECT_TRUE(d.model.at(name).same_bytes(t.array())) << name << " stacked " << stacked;
    EXPECT_EQ(d.optimizer.size(), 2 * per_layer.size());
  }
}

// A run's options for the phase tests: a tiny model at byte vocabulary over a corpus of 12
// small files written under `dir`.
train::TrainOptions phase_options(const std::filesystem::path& dir) {
  std::filesystem::create_directories(dir / "corpus");
  for (int f = 0; f < 12; ++f) {
    std::ofstream out(dir / "corpus" / fmt::format("f{}.h", f));
    for (int line = 0; line < 40; ++line)
      out << "int value_" << f << "_" << line << " = " << line << ";\n";
  }
  train::TrainOptions o;
  o.model = tiny_model();
  o.model.vocab = 256;
  o.model.seq = 16;
  o.model.batch = 2;
  o.data = {(dir / "corpus").string()};
  return o;
}

// The trainer's phases, called one by one as run_training calls them: every program exists after
// prepare_programs and no step compiles; the first step and the last log; evaluation and the
// checkpoint happen when due; sample and finish leave the text, the record and the report.
TEST(Training, PhasesCanBeCalledOneByOne) {
  namespace fs = std::filesystem;
  testing_support::TempDir tmp("phases");
  const fs::path dir = tmp.str();
  train::TrainOptions o = phase_options(dir);
  o.run_dir = (dir / "run").string();
  o.steps = 3;
  o.log_every = 2;
  o.eval_every = 2;
  o.eval_batches = 1;
  o.ckpt_every = 2;
  o.sample_bytes = 8;
  std::vector<train::StepLog> logs;
  train::TrainEvents ev;
  ev.log = [&logs](const train::StepLog& s) { logs.push_back(s); };
  auto compiles = [] { return Runtime::current().jit().log().totals().compiles; };

  train::Training run(Runtime::current(), o, ev);
  run.start();
  EXPECT_EQ(run.first_step(), 1);
  const int64_t before = compiles();
  run.prepare_programs();
  const int64_t prepared = compiles();
  EXPECT_GE(prepared - before, 3);  // step, evaluation, sample (the init ran in start)

  const train::StepDone first = run.step(1);
  EXPECT_FALSE(first.compiled);
  EXPECT_TRUE(first.logs);  // a run's first step always logs
  EXPECT_FALSE(first.evaluates || first.checkpoints);
  run.log_window(first);
  ASSERT_EQ(logs.size(), 1u);
  EXPECT_EQ(logs[0].step, 1);
  EXPECT_TRUE(std::isfinite(logs[0].loss));

  const train::StepDone second = run.step(2);
  EXPECT_TRUE(second.logs && second.evaluates && second.checkpoints);
  run.log_window(second);
  run.evaluate(2);
  EXPECT_EQ(run.result().final_eval.step, 2);
  EXPECT_GT(run.result().final_eval.bits_per_byte, 0);
  run.checkpoint(2);
  EXPECT_TRUE(fs::is_directory(dir / "run" / "checkpoints" / "step-2"));

  const train::StepDone last = run.step(3);
  EXPECT_TRUE(last.logs && last.evaluates && last.checkpoints);  // the last step does all three
  run.log_window(last);
  EXPECT_EQ(logs.size(), 3u);
  run.sample();
  EXPECT_EQ(run.result().sample.size(), 8u);
  const train::TrainResult result = run.finish();
  EXPECT_EQ(result.first_step, 1);
  EXPECT_EQ(result.last_step, 3);
  EXPECT_TRUE(fs::is_regular_file(result.record_path)) << result.record_path;
  EXPECT_EQ(compiles(), prepared);  // nothing compiled once the programs were prepared
}

// DSA's course: a dense model's checkpoint starts its sparse twin (--init-from: every tensor
// copied, the indexer initialised); --indexer-warmup's program exists after prepare_programs, and
// its steps run before step 1 and lower the indexers' KL; after them the indexers' moments are
// zero, so step 1's are AdamW's first (m^2 / v = (1 - beta1)^2 / (1 - beta2) in every element); a
// resume says it was done.
TEST(Training, IndexerWarmupRunsBeforeStepOneAndLeavesFreshMoments) {
  namespace fs = std::filesystem;
  testing_support::TempDir tmp("indexer_warmup");
  const fs::path dir = tmp.str();
  train::TrainOptions o = phase_options(dir);
  o.model.name = "code-s";  // a resume reads the config by its preset
  o.steps = 2;
  o.sample_bytes = 0;
  o.eval_batches = 1;
  o.run_dir = (dir / "dense").string();
  const train::TrainResult dense = train::run_training(Runtime::current(), o, {});
  ASSERT_EQ(dense.last_step, 2);
  o.init_from = o.run_dir;  // the dense model's checkpoint; its sparse twin adds the indexer
  o.model.sparse_attention_layer_ids = {0};
  o.model.sparse_attention.keys = 2;
  o.model.sparse_attention.window = 2;
  o.model.sparse_attention.indexer_heads = 2;
  o.model.sparse_attention.indexer_dim = 4;
  o.run_dir = (dir / "run").string();
  o.steps = 1;
  o.log_every = 8;
  o.indexer_warmup = 8;
  o.indexer_warmup_lr = 3e-2;
  std::vector<std::string> said;
  train::TrainEvents ev;
  ev.message = [&said](const std::string& line) { said.push_back(line); };
  auto compiles = [] { return Runtime::current().jit().log().totals().compiles; };
  auto kl_of = [](const std::string& line) {
    return std::stod(line.substr(line.find("indexer_kl ") + 11));
  };
  {
    train::Training run(Runtime::current(), o, ev);
    run.start();
    const train::CheckpointData from =
        train::read_checkpoint((dir / "dense" / "checkpoints" / "step-2").string());
    int copied = 0;
    for (const auto& [name, t] : run.state().params.tensors()) {
      if (train::is_indexer_parameter(name)) continue;
      EXPECT_EQ(t.to_f32(), Tensor(from.model.at(name)).to_f32()) << name;
      ++copied;
    }
    EXPECT_EQ(copied, static_cast<int>(from.model.size()));
    ASSERT_EQ(said.size(), 2u);  // the corpus, and what came from the checkpoint
    EXPECT_EQ(said[1], fmt::format("init from {}: {} parameters copied, 3 initialised "
                                   "(h.0.attn.indexer.key.weight, h.0.attn.indexer.query.weight, "
                                   "h.0.attn.indexer.weights.weight)",
                                   (dir / "dense" / "checkpoints" / "step-2").string(), copied));
    run.prepare_programs();
    const int64_t prepared = compiles();
    said.clear();
    run.warm_up_indexers();
    EXPECT_EQ(compiles(), prepared);
    for (const auto& [name, t] : run.state().params.tensors()) {  // donated, passed through
      if (!train::is_indexer_parameter(name)) {
        EXPECT_EQ(t.to_f32(), Tensor(from.model.at(name)).to_f32()) << name;
      }
    }
    ASSERT_EQ(said.size(), 2u);  // the first and the last (a log point)
    EXPECT_TRUE(said[0].starts_with("indexer warm-up 1/8: indexer_kl ")) << said[0];
    EXPECT_TRUE(said[1].starts_with("indexer warm-up 8/8: indexer_kl ")) << said[1];
    EXPECT_LT(kl_of(said[1]), kl_of(said[0]));
    run.log_window(run.step(1));
    run.evaluate(1);
    run.checkpoint(1);
    const train::TrainResult result = run.finish();
    const nlohmann::json record =
        nlohmann::json::parse(files::read_file(result.record_path, 1 << 24, "record"));
    EXPECT_EQ(record["metrics"]["indexer_warmup"]["steps"], 8);
    EXPECT_NEAR(record["metrics"]["indexer_warmup"]["last_kl"].get<double>(), kl_of(said[1]),
                1e-4 * kl_of(said[1]));  // the line's 5 digits
  }
  const train::SafetensorsFile moments = train::read_safetensors(
      (dir / "run" / "checkpoints" / "step-1" / "optimizer.safetensors").string());
  int checked = 0;
  for (const char* name : {"h.0.attn.indexer.query.weight", "h.0.attn.indexer.key.weight"}) {
    const Array& m = moments.tensors.at(std::string(name) + ".exp_avg");
    const Array& v = moments.tensors.at(std::string(name) + ".exp_avg_sq");
    for (int64_t i = 0; i < m.numel(); ++i) {
      if (v.get_f64(i) < 1e-20) continue;
      ASSERT_NEAR(m.get_f64(i) * m.get_f64(i) / v.get_f64(i), 0.01 / 0.05, 1e-3) << name << i;
      ++checked;
    }
  }
  EXPECT_GT(checked, 100);
  // Resumed, the warm-up is behind it: no program, one line.
  o.resume = true;
  o.steps = 2;
  said.clear();
  train::Training again(Runtime::current(), o, ev);
  again.start();
  EXPECT_EQ(again.first_step(), 2);
  EXPECT_NE(std::find(said.begin(), said.end(),
                      "indexer warm-up: skipped on resume (it runs before step 1 of a new run; "
                      "step-1 holds whatever indexers the run has)"),
            said.end());
  // A model without sparse attention refuses it by name.
  o.model.sparse_attention_layer_ids.clear();
  o.resume = false;
  try {
    train::Training none(Runtime::current(), o, ev);
    FAIL() << "a warm-up of no indexer was accepted";
  } catch (const InputError& e) {
    EXPECT_EQ(std::string(e.what()),
              "[train] --indexer-warmup 8: model 'code-s' has no sparse attention layer whose "
              "indexer it would train; give --indexer-warmup 0 or a model with "
              "sparse_attention_layers");
  }
}

// The micro-batch loop is a scan: its sums equal the unrolled sums in the same tree bit for
// bit (reference and CPU backends), and the program does not grow with K.
TEST(TrainStep, ScannedAccumulationEqualsUnrolledBitForBitAndDoesNotGrowWithK) {
  testing_support::TempDir dir("accumulation");
  nn::GptConfig c = tiny_model();
  c.moe_every = 1;
  c.moe.hidden = 8;
  c.mtp_weights = {0.3};
  using Out = std::tuple<NamedTensors, Tensor, Tensor, std::vector<Tensor>, train::Counters>;
  auto sums = [&](train::Accumulation how) {
    return compile(
        "sums",
        [c, how](const NamedTensors& p, const train::Counters& counters,
                 const std::vector<Tensor>& b) {
          train::MicroSums s = train::accumulate_micro_batches(
              c, p, b, train::step_denominators(c, b), counters, {.how = how});
          return Out{s.grads, s.loss, s.aux, s.mtp_loss, s.counters};
        },
        [] {
          CompileOptions o;
          o.varying_arguments[2] = {train::kDataAxis};  // the batch
          return o;
        }());
  };
  const NamedTensors p = train::make_gpt_init(c)(Scalar(2.0));
  const std::vector<Tensor> batch = rows_batch(4, 2, 8, c.vocab);
  for (const bool on_cpu : {false, true}) {
    std::optional<JitScope> scope;
    if (on_cpu) scope.emplace(testing_support::cpu_jit(dir));
    auto scanned = sums(train::Accumulation::scanned),
         unrolled = sums(train::Accumulation::unrolled);
    Out a = scanned(p, train::zero_counters(c), batch);
    Out b = unrolled(p, train::zero_counters(c), batch);
    for (const auto& [name, g] : std::get<0>(a)) {
      const Array &x = g.array(), &y = std::get<0>(b).at(name).array();
      EXPECT_EQ(std::memcmp(x.data(), y.data(), x.nbytes()), 0) << "cpu " << on_cpu << " " << name;
    }
    EXPECT_EQ(std::get<1>(a).item(), std::get<1>(b).item());
    EXPECT_EQ(std::get<2>(a).item(), std::get<2>(b).item());
    EXPECT_EQ(std::get<3>(a)[0].item(), std::get<3>(b)[0].item());
    EXPECT_TRUE(
        std::get<4>(a).at("moe.load").array().same_bytes(std::get<4>(b).at("moe.load").array()));
    EXPECT_NE(print_graph(scanned.programs()[0]->graph).find("scan("), std::string::npos);
  }
  // The pairwise tree nests one scan per halving inside the loop's body, so the top level is
  // the same for any K above 2.
  auto step = plain_step(c);
  const NamedTensors z = train::zeros_like_params(c);
  for (int64_t K : {4, 16}) {
    step.prepare(p, z, z, train::zero_counters(c), rows_batch(K, 2, 8, c.vocab),
                 train::step_scalars(train::Hyper{}, 1));
  }
  ASSERT_EQ(step.programs().size(), 2u);
  EXPECT_EQ(step.programs()[0]->graph.size(), step.programs()[1]->graph.size());
}

// Contract 10's record: the newest record of a config is read back (records written before
// "config_id" too), and a budget below its corrected prediction stops the launch naming both
// figures, the file and the knobs.
TEST(Calibration, NewestRecordDecidesAgainstTheBudget) {
  testing_support::TempDir dir("calibration");
  const std::string file = dir / "calibration.jsonl";
  EXPECT_EQ(train::read_calibration(file, "a"), std::nullopt);
  testing_support::write(
      file, "{\"key\":\"a\",\"predicted_peak_bytes\":100,\"observed_peak_bytes\":150}\n");
  train::append_calibration(file, {"b", 1 << 20, 2 << 20});
  train::append_calibration(file, {"a", 100 << 20, 300 << 20});
  const std::optional<train::Calibration> a = train::read_calibration(file, "a");
  ASSERT_TRUE(a);
  EXPECT_EQ(a->predicted_peak_bytes, 100 << 20);
  EXPECT_DOUBLE_EQ(a->ratio(), 3.0);
  EXPECT_NO_THROW(train::check_memory_budget(a, 300 << 20, file));
  EXPECT_NO_THROW(train::check_memory_budget(a, 0, file));  // no budget
  try {
    train::check_memory_budget(a, 200 << 20, file);
    ADD_FAILURE() << "a budget below the corrected prediction was accepted";
  } catch (const InputError& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("needed 300 MiB at its peak last time (predicted 100 MiB x observed/predicted "
                     "3.00, " +
                     file +
                     ") but launch.memory_budget_bytes is 200 MiB per host; stopped "
                     "before compiling"),
              std::string::npos)
        << m;
    EXPECT_NE(m.find("--batch-size"), std::string::npos) << m;
    EXPECT_NE(m.find("launch.layer_layout=split:N"), std::string::npos) << m;
  }
  // The budget is the host's: 2 processes on it need twice the figure (issue 15).
  EXPECT_NO_THROW(train::check_memory_budget(a, 600 << 20, file, 2));
  try {
    train::check_memory_budget(a, 400 << 20, file, 2);
    ADD_FAILURE() << "two processes over a host's budget together were accepted";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("), x 2 processes on this host = 600 MiB but "
                                         "launch.memory_budget_bytes is 400 MiB per host"),
              std::string::npos)
        << e.what();
  }
  testing_support::write(dir / "bad.jsonl", "{\"key\": 3}\n");
  EXPECT_THROW(train::read_calibration(dir / "bad.jsonl", "a"), InputError);
}

TEST(TrainStep, EvalSumsNatsOverLiveTargets) {
  nn::GptConfig c = tiny_model();
  NamedTensors p = train::make_gpt_init(c)(Scalar(1.0));
  std::vector<Tensor> batch = rows_batch(1, 4, 8, c.vocab);
  auto [nats, count] = train::make_eval_step(c)(p, batch);
  EXPECT_NEAR(count.item(), 25.0, 0);                            // 32 targets, every fifth dead
  EXPECT_NEAR(nats.item() / count.item(), std::log(32.0), 0.2);  // near-uniform at init
}

// keel sample with prompts of many lengths (issue 16): bucketed context lengths, at most the
// budget of programs, and the same samples as the one-program sampler (padding after the last
// real position cannot change its logits: attention is causal).
// The tiny model over bytes, at `seq` tokens, with parameters from `seed`.
std::pair<nn::GptConfig, NamedTensors> tiny_byte_model(int64_t seq, double seed) {
  nn::GptConfig c = tiny_model();
  c.vocab = 256;
  c.seq = seq;
  return {c, train::make_gpt_init(c)(Scalar(seed))};
}

TEST(Sampler, PromptsOfManyLengthsCompileAtMostTheBudgetAndSampleTheSame) {
  const auto model = tiny_byte_model(32, 6.0);  // no structured binding: clang 14 cannot capture it
  const nn::GptConfig& c = model.first;
  const NamedTensors& p = model.second;
  std::vector<std::string> prompts;
  for (int n = 0; n < 40; n += 3) prompts.push_back(std::string(size_t(n), char('a' + n % 20)));
  for (int64_t budget : {2, 5}) {
    BucketStats stats;
    const std::vector<std::string> out =
        train::sample_texts(c, p, prompts, 6, 11, 0.8, budget, &stats);
    ASSERT_EQ(out.size(), prompts.size());
    EXPECT_LE(int64_t(stats.buckets.size()), budget);
    EXPECT_LE(stats.used.size(), stats.buckets.size());
    EXPECT_EQ(stats.buckets.back(), c.seq - 1);  // a context holds at most T-1 tokens
    EXPECT_GT(stats.calls, 0);
    for (size_t i = 0; i < prompts.size(); ++i) {
      EXPECT_EQ(out[i], train::sample_text(c, p, prompts[i], 6, 11, 0.8)) << "prompt " << i;
    }
  }
}

// Temperature 0 is greedy: the same bytes whatever the seed, and those a near-zero temperature
// draws; a negative or non-finite temperature is refused before anything compiles.
TEST(Sampler, TemperatureZeroTakesTheMostLikelyByte) {
  const auto model = tiny_byte_model(32, 6.0);
  const nn::GptConfig& c = model.first;
  const NamedTensors& p = model.second;
  const std::string greedy = train::sample_text(c, p, "int ", 12, 1, 0.0);
  EXPECT_EQ(train::sample_text(c, p, "int ", 12, 2, 0.0), greedy);
  EXPECT_EQ(train::sample_text(c, p, "int ", 12, 3, 1e-6), greedy);
  EXPECT_NE(train::sample_text(c, p, "int ", 12, 3, 50.0), greedy);  // a hot draw is not greedy
  for (double bad : {-1.0, std::nan(""), double(INFINITY)}) {
    EXPECT_THROW(train::sample_text(c, p, "int ", 12, 1, bad), InputError) << bad;
  }
}

// A continuation never draws a fill-in-the-middle marker, even the most likely token (as after
// a document's start, where half the training documents have one); only the end of the
// document ends it. An empty prompt samples too.
TEST(Sampler, FillInTheMiddleMarkersAreNeverDrawnAndTheEndOfTheDocumentEndsTheSample) {
  int64_t calls = 0;
  std::vector<std::vector<int64_t>> contexts;
  const train::LogitsFn logits = [&](const std::vector<int64_t>& tokens, int64_t) {
    contexts.push_back(tokens);
    std::vector<float> l(260, 0.0f);
    for (int64_t t = data::kFimPrefix; t <= data::kFimMiddle; ++t) l[size_t(t)] = 50.0f;
    l[size_t('a' + calls % 3)] = 20.0f;
    if (++calls == 5) l[data::kEndOfDocument] = 40.0f;  // then the end, above every byte
    return l;
  };
  for (double temperature : {0.0, 0.8}) {
    calls = 0;
    contexts.clear();
    EXPECT_EQ(train::sample_with(logits, 8, "", 12, 7, temperature), "abca") << temperature;
    ASSERT_EQ(contexts.size(), 5u);
    EXPECT_TRUE(contexts[0].empty());  // the empty prompt: the model's row starts the document
    EXPECT_EQ(contexts[4], (std::vector<int64_t>{'a', 'b', 'c', 'a'}));
  }
}

// Whole documents of any length (issue 16): windows of the model's length, the last of each
// document bucketed and masked; the figure equals scoring every window at its own length.
TEST(EvaluateDocuments, BucketedWindowsEqualTheUnpaddedScore) {
  const auto model = tiny_byte_model(16, 8.0);
  const nn::GptConfig& c = model.first;
  const NamedTensors& p = model.second;
  std::vector<data::Document> docs;
  for (int n : {1, 5, 15, 16, 17, 40, 3, 31, 9, 64, 2, 23}) {
    std::string text;
    for (int i = 0; i < n; ++i) text.push_back(char('a' + (i * 7 + n) % 26));
    docs.push_back({"doc" + std::to_string(n), text});
  }
  BucketStats stats;
  const train::EvalLog got = train::evaluate_documents(c, p, docs, 3, &stats);
  EXPECT_LE(int64_t(stats.buckets.size()), 3);
  EXPECT_GT(stats.padded_positions, 0);
  // The reference: one unpadded program per window length.
  auto score =
      compile("score_window", [c](const NamedTensors& q, const std::vector<Tensor>& w) -> Tensor {
        const Tensor logits = nn::gpt_logits(c, q, w[0], w[2], zeros_like(w[0]));
        return nn::cross_entropy_sum(logits, w[1], full(w[0].shape(), 1.0));
      });
  double nats = 0, count = 0;
  for (const data::Document& d : docs) {
    std::vector<int64_t> seq{data::kEndOfDocument};
    for (unsigned char ch : d.bytes) seq.push_back(ch);
    seq.push_back(data::kEndOfDocument);
    for (size_t at = 0; at + 1 < seq.size(); at += size_t(c.seq)) {
      const int64_t L = std::min<int64_t>(c.seq, int64_t(seq.size() - 1 - at));
      Array tok(DType::i64, {1, L}), tgt(DType::i64, {1, L}), pos(DType::i64, {1, L});
      for (int64_t t = 0; t < L; ++t) {
        tok.set_i64(t, seq[at + size_t(t)]);
        tgt.set_i64(t, seq[at + size_t(t) + 1]);
        pos.set_i64(t, t);
      }
      nats += score(p, {Tensor(tok), Tensor(tgt), Tensor(pos)}).item();
      count += double(L);
    }
  }
  EXPECT_EQ(stats.real_positions, int64_t(count));
  EXPECT_NEAR(got.loss, nats / count, 1e-5 * nats / count);
  EXPECT_GT(score.programs().size(), 3u);  // the unpadded way needs a program per length
}

// A resume from step 2 drops the log points of steps 3.. (and a torn last line) from
// metrics.jsonl, so the file holds each step once; nothing to drop leaves the file alone.
TEST(Metrics, AResumeDropsTheLogPointsAfterItsCheckpoint) {
  testing_support::TempDir dir("metrics_resume");
  const std::string file = dir / "metrics.jsonl";
  testing_support::write(file,
                         "{\"step\":1,\"loss\":5}\n{\"step\":2,\"loss\":4}\n"
                         "{\"step\":2,\"val_loss\":4.5}\n{\"step\":3,\"loss\":3}\n"
                         "{\"step\":4,\"lo");
  EXPECT_EQ(train::drop_metrics_after(dir.str(), 2), 2);
  EXPECT_EQ(testing_support::slurp(file),
            "{\"step\":1,\"loss\":5}\n{\"step\":2,\"loss\":4}\n{\"step\":2,\"val_loss\":4.5}\n");
  EXPECT_EQ(train::drop_metrics_after(dir.str(), 2), 0);
  EXPECT_EQ(train::drop_metrics_after(dir / "nothing-here", 2), 0);
}

// A stop request keeps the first signal (a second SIGINT after a SIGTERM does not rename it)
// until cleared, so a later run in the same process trains to its end.
TEST(StopRequest, KeepsTheFirstSignalUntilCleared) {
  train::clear_stop_request();
  EXPECT_EQ(train::stop_requested(), 0);
  train::request_stop(15);
  train::request_stop(2);
  EXPECT_EQ(train::stop_requested(), 15);
  train::clear_stop_request();
  EXPECT_EQ(train::stop_requested(), 0);
}

// In one process the after-step exchange passes the stop request on and has no busy figures.
// The log line names the slowest process only when it is clearly slower than the others: 1.5x
// their median and 10 ms more.
TEST(DataParallel, TheLogNamesOnlyAClearlySlowestProcess) {
  const train::AfterStep alone = train::agree_after_step(15, 0.25, 3);
  EXPECT_EQ(alone.stop, 15);
  EXPECT_TRUE(alone.busy_s.empty());
  EXPECT_EQ(train::straggler_note({}), "");
  EXPECT_EQ(train::straggler_note({100}), "");
  EXPECT_EQ(train::straggler_note({100, 140, 110}), "");  // 1.33x
  EXPECT_EQ(train::straggler_note({4, 9}), "");           // 2.25x, but 5 ms
  EXPECT_EQ(train::straggler_note({100, 100, 400, 120}),
            "  slowest: rank 2 (host ?), busy 400 ms a step, 4.0x the others");
  EXPECT_EQ(train::straggler_note({368, 3376}),
            "  slowest: rank 1 (host ?), busy 3376 ms a step, 9.2x the others");
}

}  // namespace
}  // namespace keel
