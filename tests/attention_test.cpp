// The fused attention op (one `attention` node, its VJP the attention_lse / _dq / _dk / _dv
// nodes) against the unfused graph it replaces (scores [B, H, T, T], a mask, softmax, k and v
// repeated per group) on the reference interpreter, against finite differences, and compiled for
// the CPU against the reference; then a model with rotary, GQA, packed documents and an MTP head
// on both backends.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "autodiff/value_and_grad.h"
#include "cpu_jit.h"
#include "grad_check.h"
#include "nn/gpt.h"
#include "nn/layers.h"
#include "trace/compile.h"
#include "train/gpt_step.h"

namespace keel {
namespace {

using Ints = std::vector<int64_t>;

struct Case {
  const char* name;
  int64_t B, H, KV, T, D;
  Ints docs;  // document lengths of every row (summing to T); empty: one document per row
  bool rotary = false;
};

const std::vector<Case>& cases() {
  static const std::vector<Case> all = {
      {"gqa", 1, 8, 2, 6, 4, {}},
      {"gqa_rotary", 2, 8, 2, 5, 4, {}, true},
      {"packed", 2, 4, 2, 9, 4, {3, 1, 4, 1}, true},  // documents of length 1 in the middle, last
      {"odd_t", 1, 2, 1, 67, 3, {30, 1, 36}},         // past one 64-row tile
      {"t1", 2, 2, 2, 1, 4, {}},
  };
  return all;
}

Tensor randn(Shape s, uint32_t seed, double scale) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, static_cast<float>(scale));
  std::vector<float> v(static_cast<size_t>(numel(s)));
  for (float& x : v) x = d(rng);
  return Tensor(Array::from_f32(std::move(s), v));
}

Tensor doc_ids(const Case& c) {
  Array a(DType::i64, {c.B, c.T});
  for (int64_t b = 0; b < c.B; ++b) {
    int64_t t = 0, id = 0;
    for (int64_t len : c.docs) {
      for (int64_t i = 0; i < len; ++i) a.set_i64(b * c.T + t++, id);
      ++id;
    }
  }
  return Tensor(a);
}

// GPT-NeoX rotary on [B, H, T, D] at positions that restart per document, as the model does.
Tensor rotate(const Tensor& x, const Tensor& pos) {
  const Shape& s = x.shape();
  const int64_t h = s[3] / 2;
  Tensor angle = reshape(cast(pos, DType::f32), {s[0], 1, s[2], 1}) *
                 reshape(exp(cast(iota({h}, 0), DType::f32) * -0.5), {1, 1, 1, h});
  Tensor a = slice(x, {0, 0, 0, 0}, {s[0], s[1], s[2], h});
  Tensor b = slice(x, {0, 0, 0, h}, {s[0], s[1], s[2], s[3]});
  return concat({a * cos(angle) - b * sin(angle), b * cos(angle) + a * sin(angle)}, 3);
}

// sum(attention(q, k, v) · w) and its gradient with respect to q, k and v. Layout bthd: the
// fused op reads q, k, v transposed to [B, T, H, D] and its result is transposed back.
auto attention_loss(const Case& c, bool fused, CompileOptions options = {},
                    AttentionLayout layout = AttentionLayout::bhtd) {
  const bool bthd = layout == AttentionLayout::bthd;
  return compile(
      fmt::format("{}_{}{}", c.name, fused ? "fused" : "unfused", bthd ? "_bthd" : ""),
      [c, fused, bthd, layout](const NamedTensors& p, const Tensor& w, const Tensor& doc,
                               const Tensor& pos) {
        auto fn = [&](const NamedTensors& r, const Tensor& weight) {
          Tensor q = r.at("q"), k = r.at("k");
          if (c.rotary) {
            q = rotate(q, pos);
            k = rotate(k, pos);
          }
          const bool docs = !c.docs.empty();
          Tensor y;
          auto swap = [bthd](const Tensor& x) { return bthd ? transpose(x, {0, 2, 1, 3}) : x; };
          if (fused) {
            y = swap(
                nn::attention(swap(q), swap(k), swap(r.at("v")), docs ? doc : Tensor(), layout));
          } else {
            Tensor mask = docs ? nn::document_mask(doc) : nn::causal_mask(c.T);
            y = nn::attention_unfused(q, k, r.at("v"), mask);
          }
          return sum(y * weight);
        };
        return value_and_grad(fn)(p, w);
      },
      std::move(options));
}

struct Inputs {
  NamedTensors p;
  Tensor w, doc, pos;
};

Inputs inputs_for(const Case& c, uint32_t seed) {
  Inputs in;
  in.p["q"] = randn({c.B, c.H, c.T, c.D}, seed, 1.0);
  in.p["k"] = randn({c.B, c.KV, c.T, c.D}, seed + 1, 1.0);
  in.p["v"] = randn({c.B, c.KV, c.T, c.D}, seed + 2, 1.0);
  in.w = randn({c.B, c.H, c.T, c.D}, seed + 3, 1.0);
  in.doc =
      c.docs.empty() ? Tensor(Array::from_i64({c.B, c.T}, Ints(size_t(c.B * c.T), 0))) : doc_ids(c);
  const Array& doc = in.doc.array();
  Array pos(DType::i64, {c.B, c.T});  // restarting at every document, as the loader writes them
  for (int64_t b = 0; b < c.B; ++b) {
    int64_t start = 0;
    for (int64_t t = 0; t < c.T; ++t) {
      if (t > 0 && doc.get_i64(b * c.T + t) != doc.get_i64(b * c.T + t - 1)) start = t;
      pos.set_i64(b * c.T + t, t - start);
    }
  }
  in.pos = Tensor(pos);
  return in;
}

void expect_close(const Tensor& got, const Tensor& want, double tol, const std::string& what) {
  const std::vector<float> g = got.to_f32(), w = want.to_f32();
  ASSERT_EQ(g.size(), w.size()) << what;
  for (size_t i = 0; i < w.size(); ++i) {
    ASSERT_NEAR(g[i], w[i], tol * (1.0 + std::abs(w[i]))) << what << " [" << i << "]";
  }
}

// Same loss and gradients as the graph it replaces, on the reference interpreter.
TEST(FusedAttention, MatchesTheUnfusedGraphOnTheReference) {
  for (const Case& c : cases()) {
    const Inputs in = inputs_for(c, 11);
    auto [loss_f, grad_f] = attention_loss(c, true)(in.p, in.w, in.doc, in.pos);
    auto [loss_u, grad_u] = attention_loss(c, false)(in.p, in.w, in.doc, in.pos);
    expect_close(loss_f, loss_u, 1e-5, std::string(c.name) + " loss");
    for (const char* name : {"q", "k", "v"}) {
      expect_close(grad_f.at(name), grad_u.at(name), 1e-5, std::string(c.name) + " d" + name);
    }
  }
}

// Layout bthd computes what bhtd does, in the same arithmetic: the same bits on the reference.
TEST(FusedAttention, LayoutBthdEqualsBhtdOnTheReference) {
  for (const Case& c : cases()) {
    const Inputs in = inputs_for(c, 13);
    auto [loss_t, grad_t] =
        attention_loss(c, true, {}, AttentionLayout::bthd)(in.p, in.w, in.doc, in.pos);
    auto [loss_h, grad_h] = attention_loss(c, true)(in.p, in.w, in.doc, in.pos);
    expect_close(loss_t, loss_h, 0.0, std::string(c.name) + " loss");
    for (const char* name : {"q", "k", "v"}) {
      expect_close(grad_t.at(name), grad_h.at(name), 0.0, std::string(c.name) + " d" + name);
    }
  }
}

TEST(FusedAttention, GradientsMatchFiniteDifferences) {
  for (const Case& c : cases()) {
    for (AttentionLayout layout : {AttentionLayout::bhtd, AttentionLayout::bthd}) {
      SCOPED_TRACE(std::string(c.name) + " " + attention_layout_name(layout));
      const Inputs in = inputs_for(c, 23);
      auto f = attention_loss(c, true, {}, layout);
      auto [loss, grads] = f(in.p, in.w, in.doc, in.pos);
      testing_support::expect_gradients_match_fd(
          in.p, grads, {"q", "k", "v"},
          [&](const NamedTensors& q) {
            return double(f(q, in.w, in.doc, in.pos).first.to_f32()[0]);
          },
          2e-3, 2e-3);
    }
  }
}

// The compiled CPU program (tiled kernels, f32) against the reference interpreter; in layout
// bthd the transposes around the op fold into the strided views the kernels read and write.
TEST(FusedAttention, CpuMatchesTheReference) {
  testing_support::TempDir dir("attention_cpu");
  auto jit = testing_support::cpu_jit(dir);
  for (const Case& c : cases()) {
    for (AttentionLayout layout : {AttentionLayout::bhtd, AttentionLayout::bthd}) {
      const std::string what = std::string(c.name) + " " + attention_layout_name(layout);
      const Inputs in = inputs_for(c, 37);
      auto [loss_r, grad_r] = attention_loss(c, true)(in.p, in.w, in.doc, in.pos);
      auto [loss_c, grad_c] = attention_loss(c, true, {jit}, layout)(in.p, in.w, in.doc, in.pos);
      expect_close(loss_c, loss_r, 1e-4, what + " loss");
      for (const char* name : {"q", "k", "v"}) {
        expect_close(grad_c.at(name), grad_r.at(name), 1e-4, what + " d" + name);
      }
    }
  }
}

// A model whose every block uses the fused op: rotary, 4 query heads over 2 kv heads, packed
// rows with a one-token document, and an MTP head; the CPU program against the reference.
TEST(FusedAttention, ModelWithPackedRowsAndMtpHeadOnCpuMatchesTheReference) {
  nn::GptConfig c = nn::gpt_preset("code-moe-s");
  c.vocab = 32;
  c.layers = 2;
  c.width = 16;
  c.heads = 4;
  c.kv_heads = 2;
  c.mlp_hidden = 24;
  c.moe_every = 0;
  c.seq = 9;
  c.batch = 2;
  c.mtp_weights = {0.3};
  const Case shape{"model", c.batch, c.heads, c.kv_heads, c.seq, 4, {4, 1, 4}};
  const Inputs in = inputs_for(shape, 5);
  NamedTensors p = train::make_gpt_init(c)(Scalar(4.0));
  Array tokens(DType::i64, {c.batch, c.seq}), targets(DType::i64, {c.batch, c.seq});
  for (int64_t i = 0; i < tokens.numel(); ++i) {
    tokens.set_i64(i, (5 * i + 2) % c.vocab);
    targets.set_i64(i, (5 * i + 7) % c.vocab);
  }
  auto step = [&](CompileOptions options) {
    return compile(
        "model",
        [c](const NamedTensors& q, const Tensor& x, const Tensor& y, const Tensor& pos,
            const Tensor& doc) {
          auto fn = [&](const NamedTensors& r) {
            nn::GptLosses l = nn::gpt_losses(c, r, x, y, full(x.shape(), 1.0), pos, doc);
            return l.nll + 0.3 * l.mtp_nll[0];
          };
          return value_and_grad(fn)(q);
        },
        std::move(options));
  };
  testing_support::TempDir dir("attention_model");
  auto [loss_r, grad_r] = step({})(p, Tensor(tokens), Tensor(targets), in.pos, in.doc);
  auto [loss_c, grad_c] =
      step({testing_support::cpu_jit(dir)})(p, Tensor(tokens), Tensor(targets), in.pos, in.doc);
  expect_close(loss_c, loss_r, 1e-4, "loss");
  for (const char* name : {"h.0.attn.c_attn.weight", "mtp.1.attn.c_attn.weight", "wte.weight"}) {
    expect_close(grad_c.at(name), grad_r.at(name), 1e-3, name);
  }
}

}  // namespace
}  // namespace keel
