#pragma once
// A model's scanned layer stack against its unrolled one on a packed batch (two rows of 8, two
// documents each): the loss, and every gradient within `relative` of its largest entry. Returns
// the unrolled gradients for further checks.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "autodiff/value_and_grad.h"
#include "nn/gpt.h"
#include "trace/compile.h"

namespace keel::testing_support {

inline NamedTensors expect_scanned_equals_unrolled(const nn::GptConfig& c, const NamedTensors& p,
                                                   double relative) {
  auto program = [](nn::GptConfig config) {
    return compile("losses", [config](const NamedTensors& q, const Tensor& x, const Tensor& y,
                                      const Tensor& pos, const Tensor& doc) {
      auto fn = [&](const NamedTensors& r) {
        return nn::gpt_losses(config, r, x, y, full(x.shape(), 1.0), pos, doc).nll;
      };
      return value_and_grad(fn)(q);
    });
  };
  Array x(DType::i64, {2, 8}), y(DType::i64, {2, 8}), pos(DType::i64, {2, 8}),
      doc(DType::i64, {2, 8});
  for (int64_t i = 0; i < 16; ++i) {
    x.set_i64(i, (i * 37 + 5) % 256);
    y.set_i64(i, (i * 11 + 2) % 256);
    pos.set_i64(i, i % 8 < 3 ? i % 8 : i % 8 - 3);
    doc.set_i64(i, i % 8 < 3 ? 0 : 1);
  }
  nn::GptConfig scanned = c;
  scanned.layout.scanned = true;
  auto [l1, g1] = program(c)(p, Tensor(x), Tensor(y), Tensor(pos), Tensor(doc));
  auto [l2, g2] = program(scanned)(p, Tensor(x), Tensor(y), Tensor(pos), Tensor(doc));
  EXPECT_NEAR(l2.item(), l1.item(), 1e-5 * std::abs(l1.item()));
  EXPECT_EQ(g1.size(), g2.size());
  for (const auto& [name, g] : g1) {
    const std::vector<float> a = g.to_f32(), b = g2.at(name).to_f32();
    EXPECT_EQ(a.size(), b.size()) << name;
    double worst = 0, scale = 0;
    for (size_t i = 0; i < a.size() && i < b.size(); ++i) {
      worst = std::max(worst, std::abs(static_cast<double>(a[i]) - b[i]));
      scale = std::max(scale, static_cast<double>(std::abs(a[i])));
    }
    EXPECT_LE(worst, relative * scale + 1e-7) << name;
  }
  return g1;
}

}  // namespace keel::testing_support
