#include <gtest/gtest.h>

#include <cmath>

#include "autodiff/value_and_grad.h"
#include "backend/ref/executor.h"
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

TEST_F(NnTest, GptGradientMatchesFiniteDifference) {
  nn::GptConfig c = tiny();
  train::Params p = train::make_gpt_init(c)(Scalar(5.0));
  auto f = compile("vg", [c](const train::Params& q, const Tensor& x, const Tensor& y) {
    auto fn = [&c](const train::Params& r, const Tensor& a, const Tensor& b) {
      return nn::gpt_loss(c, r, a, b, full(a.shape(), 1.0));
    };
    return value_and_grad(fn)(q, x, y);
  });
  Tensor x = tokens_for(c, 0), y = tokens_for(c, 3);
  auto [loss, grads] = f(p, x, y);
  for (const char* name : {"h.1.mlp.c_fc.weight", "h.0.attn.c_attn.weight", "wte.weight"}) {
    Array base = p.at(name).array();
    for (int64_t i : {int64_t{0}, int64_t{7}, base.numel() / 2 + 3}) {
      const double eps = 1e-2;
      auto at = [&](double delta) {
        Array a = base.clone();
        a.set_f64(i, a.get_f64(i) + delta);
        train::Params q = p;
        q[name] = Tensor(a);
        return f(q, x, y).first.item();
      };
      double fd = (at(eps) - at(-eps)) / (2 * eps);
      double an = grads.at(name).array().get_f64(i);
      EXPECT_NEAR(an, fd, 2e-3 + 2e-2 * std::abs(fd)) << name << "[" << i << "]";
    }
  }
}

TEST_F(NnTest, TrainStepIsOneProgramAndLowersTheLoss) {
  nn::GptConfig c = tiny();
  train::Params p = train::make_gpt_init(c)(Scalar(1.0));
  train::Params m = train::zeros_like_params(c), v = train::zeros_like_params(c);
  auto step = train::make_gpt_train_step(c);
  Tensor x = tokens_for(c, 0), y = tokens_for(c, 1), mask(Array::full({c.batch, c.seq}, 1.0));
  double first = 0, last = 0;
  for (int64_t s = 1; s <= 8; ++s) {
    auto [loss, p1, m1, v1] = step(p, m, v, x, y, mask, train::adamw_scalars(1e-2, s));
    if (s == 1) first = loss.item();
    last = loss.item();
    p = p1;
    m = m1;
    v = v1;
  }
  EXPECT_EQ(step.stats().traces, 1);  // lr and step count are device scalars
  EXPECT_LT(last, first - 0.5);
}

}  // namespace
}  // namespace keel
