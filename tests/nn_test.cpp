#include <gtest/gtest.h>

#include <cmath>

#include "autodiff/value_and_grad.h"
#include "backend/ref/executor.h"
#include "grad_check.h"
#include "ir/error.h"
#include "nn/gpt.h"
#include "nn/layers.h"
#include "trace/compile.h"
#include "train/gpt_step.h"

namespace keel {
namespace {

class NnTest : public ::testing::Test {
 protected:
  void SetUp() override { set_default_executor(ref::make_executor()); }
};

nn::GptConfig tiny() {
  nn::GptConfig c;
  c.name = "tiny";
  c.vocab = 32;
  c.layers = 2;
  c.width = 16;
  c.heads = 2;
  c.seq = 8;
  c.batch = 2;
  return c;
}

Tensor tokens_for(const nn::GptConfig& c, int64_t shift) {
  Array a(DType::i64, {c.batch, c.seq});
  for (int64_t i = 0; i < a.numel(); ++i) a.set_i64(i, (i * 5 + shift) % c.vocab);
  return Tensor(a);
}

TEST_F(NnTest, LayerNormAndSoftmaxNormalise) {
  auto f = compile("f", [](const Tensor& x) {
    Tensor w = full({4}, 1.0), b = full({4}, 0.0);
    return std::make_pair(nn::layer_norm(x, w, b), nn::softmax(x));
  });
  auto [ln, sm] = f(Tensor(Array::from_f32({2, 4}, std::vector<float>{1, 2, 3, 4, -1, 0, 5, 9})));
  std::vector<float> l = ln.to_f32(), s = sm.to_f32();
  for (int r = 0; r < 2; ++r) {
    double mean = 0, var = 0, total = 0;
    for (int j = 0; j < 4; ++j) mean += l[r * 4 + j] / 4.0;
    for (int j = 0; j < 4; ++j) var += (l[r * 4 + j] - mean) * (l[r * 4 + j] - mean) / 4.0;
    for (int j = 0; j < 4; ++j) total += s[r * 4 + j];
    EXPECT_NEAR(mean, 0.0, 1e-5);
    EXPECT_NEAR(var, 1.0, 1e-3);
    EXPECT_NEAR(total, 1.0, 1e-6);
  }
  EXPECT_NEAR(s[3] / s[2], std::exp(1.0), 1e-4);
}

TEST_F(NnTest, AttentionIsCausal) {
  // Changing a later position's value must not change any earlier output.
  auto f = compile("attn", [](const Tensor& q, const Tensor& k, const Tensor& v) {
    return nn::attention(q, k, v, nn::causal_mask(4));
  });
  Array q(DType::f32, {1, 1, 4, 2}), k(DType::f32, {1, 1, 4, 2}), v(DType::f32, {1, 1, 4, 2});
  for (int64_t i = 0; i < 8; ++i) {
    q.set_f64(i, 0.1 * i);
    k.set_f64(i, 0.2 * (8 - i));
    v.set_f64(i, i);
  }
  std::vector<float> a = f(Tensor(q), Tensor(k), Tensor(v)).to_f32();
  Array v2 = v.clone();
  v2.set_f64(7, 100.0);  // position 3
  std::vector<float> b = f(Tensor(q), Tensor(k), Tensor(v2)).to_f32();
  for (int i = 0; i < 6; ++i) EXPECT_EQ(a[i], b[i]) << i;
  EXPECT_NE(a[7], b[7]);
  EXPECT_EQ(a[0], 0.0f);  // the first query sees only the first value
  EXPECT_EQ(a[1], 1.0f);
}

TEST_F(NnTest, GptLossStartsNearUniformAndParamsMatchTheLayout) {
  nn::GptConfig c = tiny();
  auto shapes = nn::gpt_param_shapes(c);
  EXPECT_EQ(shapes.front().first, "wte.weight");
  EXPECT_EQ(shapes[4].first, "h.0.attn.c_attn.weight");
  EXPECT_EQ(shapes[4].second, (Shape{16, 48}));
  EXPECT_EQ(nn::gpt_param_count(c, true) - nn::gpt_param_count(c, false), 8 * 16);
  train::Params p = train::make_gpt_init(c)(Scalar(3.0));
  EXPECT_EQ(p.size(), shapes.size());
  auto loss = compile("loss", [c](const train::Params& q, const Tensor& x, const Tensor& y) {
    return nn::gpt_loss(c, q, x, y, full(x.shape(), 1.0));
  });
  double l = loss(p, tokens_for(c, 0), tokens_for(c, 1)).item();
  EXPECT_NEAR(l, std::log(32.0), 0.1);
}

template <class F>
void expect_gradients_match(F& f, const train::Params& p, const Tensor& x, const Tensor& y,
                            const std::vector<std::string>& names) {
  auto [loss, grads] = f(p, x, y);
  testing_support::expect_gradients_match_fd(
      p, grads, names, [&](const train::Params& q) { return f(q, x, y).first.item(); }, 2e-3, 2e-2);
}

TEST_F(NnTest, GptGradientMatchesFiniteDifference) {
  nn::GptConfig c = tiny();
  train::Params p = train::make_gpt_init(c)(Scalar(5.0));
  auto f = compile("vg", [c](const train::Params& q, const Tensor& x, const Tensor& y) {
    auto fn = [&c](const train::Params& r, const Tensor& a, const Tensor& b) {
      return nn::gpt_loss(c, r, a, b, full(a.shape(), 1.0));
    };
    return value_and_grad(fn)(q, x, y);
  });
  expect_gradients_match(f, p, tokens_for(c, 0), tokens_for(c, 3),
                         {"h.1.mlp.c_fc.weight", "h.0.attn.c_attn.weight", "wte.weight"});
}

nn::GptConfig tiny_code() {
  nn::GptConfig c = nn::gpt_preset("code-s");
  c.name = "tiny-code";
  c.vocab = 32;
  c.layers = 2;
  c.width = 16;
  c.heads = 4;
  c.kv_heads = 2;
  c.mlp_hidden = 24;
  c.seq = 8;
  c.batch = 2;
  return c;
}

// RMSNorm, rotary positions, grouped-query attention with the fused QKV and SwiGLU: every
// parameter's gradient agrees with finite differences.
TEST_F(NnTest, CodePresetGradientMatchesFiniteDifference) {
  nn::GptConfig c = tiny_code();
  train::Params p = train::make_gpt_init(c)(Scalar(3.0));
  EXPECT_EQ(p.count("wpe.weight"), 0u);  // rotary: no learned positions
  EXPECT_EQ(p.at("h.0.attn.c_attn.weight").shape(), (Shape{16, (4 + 2 * 2) * 4}));
  EXPECT_EQ(p.at("h.0.mlp.c_fc.weight").shape(), (Shape{16, 48}));
  auto f = compile("vg_code", [c](const train::Params& q, const Tensor& x, const Tensor& y) {
    auto fn = [&c](const train::Params& r, const Tensor& a, const Tensor& b) {
      return nn::gpt_loss(c, r, a, b, full(a.shape(), 1.0));
    };
    return value_and_grad(fn)(q, x, y);
  });
  expect_gradients_match(f, p, tokens_for(c, 0), tokens_for(c, 3),
                         {"h.1.mlp.c_fc.weight", "h.0.attn.c_attn.weight", "h.1.ln_2.weight",
                          "h.0.mlp.c_proj.weight", "wte.weight"});
}

// A packed row of two documents computes exactly what each document computes alone: attention
// stops at the boundary and positions restart (learned and rotary alike).
TEST_F(NnTest, PackedDocumentsDoNotSeeEachOther) {
  for (nn::GptConfig c : {tiny(), tiny_code()}) {
    c.batch = 1;
    train::Params p = train::make_gpt_init(c)(Scalar(2.0));
    auto packed =
        compile("packed", [c](const train::Params& q, const Tensor& t, const Tensor& pos,
                              const Tensor& doc) { return nn::gpt_logits(c, q, t, pos, doc); });
    auto alone = compile(
        "alone", [c](const train::Params& q, const Tensor& t) { return nn::gpt_logits(c, q, t); });
    Array tokens(DType::i64, {1, 8}), pos(DType::i64, {1, 8}), doc(DType::i64, {1, 8});
    for (int64_t i = 0; i < 8; ++i) {
      tokens.set_i64(i, (i * 7 + 3) % c.vocab);
      pos.set_i64(i, i < 3 ? i : i - 3);  // document 0: 3 tokens, document 1: 5 tokens
      doc.set_i64(i, i < 3 ? 0 : 1);
    }
    std::vector<float> both = packed(p, Tensor(tokens), Tensor(pos), Tensor(doc)).to_f32();
    // The second document alone, padded to the same length at its end (causal: no effect).
    Array second(DType::i64, {1, 8});
    for (int64_t i = 0; i < 5; ++i) second.set_i64(i, tokens.get_i64(3 + i));
    std::vector<float> solo = alone(p, Tensor(second)).to_f32();
    const int64_t V = c.vocab;
    for (int64_t t = 0; t < 5; ++t) {
      for (int64_t k = 0; k < V; ++k) {
        ASSERT_NEAR(both[(3 + t) * V + k], solo[t * V + k], 1e-4) << c.name << " t " << t;
      }
    }
  }
}

TEST_F(NnTest, PresetsAndConfigValidation) {
  nn::GptConfig s = nn::gpt_preset("code-s");
  EXPECT_EQ(s.norm, "rmsnorm");
  EXPECT_EQ(s.positions, "rotary");
  EXPECT_EQ(s.mlp, "swiglu");
  EXPECT_LT(s.kv(), s.heads);
  EXPECT_EQ(nn::GptConfig::from_json(s.to_json(), "t").to_json(), s.to_json());
  EXPECT_EQ(nn::gpt_param_count(nn::gpt_preset("gpt2-s"), false), 10745856);
  EXPECT_THROW(nn::gpt_preset("gpt5"), InputError);
  EXPECT_THROW(nn::GptConfig::from_json("{\"name\": \"code-s\", \"heads\": 7}", "c.json"),
               InputError);
  EXPECT_THROW(nn::GptConfig::from_json("{\"layerz\": 2}", "c.json"), InputError);
  EXPECT_THROW(nn::GptConfig::from_json("{\"kv_heads\": 5}", "c.json"), InputError);
}

}  // namespace
}  // namespace keel
