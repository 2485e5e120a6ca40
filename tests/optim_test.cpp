#include <gtest/gtest.h>

#include <cmath>

#include "optim/adamw.h"
#include "trace/compile.h"

namespace keel {
namespace {

TEST(AdamW, MatchesHandComputedSteps) {
  using P = NamedTensors;
  auto update = compile("adamw", [](const P& p, const P& g, const P& m, const P& v,
                                    const std::vector<Scalar>& s) {
    optim::AdamWResult r = optim::adamw_update(p, g, m, v, {s[0], s[1], s[2], s[3], s[4], s[5]});
    return std::make_tuple(r.params, r.m, r.v);
  });
  auto arr = [](std::vector<float> v) {
    return Tensor(Array::from_f32({static_cast<int64_t>(v.size())}, v));
  };
  auto mat = [](std::vector<float> v) { return Tensor(Array::from_f32({1, 2}, v)); };
  P p{{"b", arr({1.0f, -2.0f})}, {"w", mat({0.5f, 3.0f})}};
  P g{{"b", arr({0.1f, -0.2f})}, {"w", mat({1.0f, -1.0f})}};
  P m{{"b", arr({0, 0})}, {"w", mat({0, 0})}};
  P v = m;
  const double lr = 0.1, b1 = 0.9, b2 = 0.99, eps = 1e-8, wd = 0.5;
  auto s = [&](double step) {
    return std::vector<Scalar>{Scalar(lr),  Scalar(b1), Scalar(b2),
                               Scalar(eps), Scalar(wd), Scalar(step)};
  };
  auto [p1, m1, v1] = update(p, g, m, v, s(1));
  // Step 1: m̂ = g, v̂ = g², so the Adam step is lr·sign(g); only the matrix decays.
  EXPECT_NEAR(p1.at("b").to_f32()[0], 1.0 - 0.1, 1e-6);
  EXPECT_NEAR(p1.at("b").to_f32()[1], -2.0 + 0.1, 1e-6);
  EXPECT_NEAR(p1.at("w").to_f32()[0], 0.5 * (1 - 0.05) - 0.1, 1e-6);
  EXPECT_NEAR(p1.at("w").to_f32()[1], 3.0 * (1 - 0.05) + 0.1, 1e-6);
  EXPECT_NEAR(m1.at("b").to_f32()[0], 0.01, 1e-7);
  EXPECT_NEAR(v1.at("b").to_f32()[0], 0.01 * 0.01, 1e-9);
  // Step 2 with the same gradient: m = 0.19 g, v = 0.0199 g²; corrected by 0.19 and 0.0199.
  auto [p2, m2, v2] = update(p1, g, m1, v1, s(2));
  EXPECT_NEAR(p2.at("b").to_f32()[0], 1.0 - 0.1 - 0.1, 1e-5);
  EXPECT_EQ(update.stats().traces, 1);  // the step count is a device scalar
}

}  // namespace
}  // namespace keel
