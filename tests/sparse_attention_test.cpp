// Sparse attention (nn/sparse_attention.h): the keys each query attends against a host selection,
// the fused op against the dense masked graph (values and gradients), packed documents that never
// see each other, the indexer's loss and its gradient (reaching the indexer alone), stability at
// large scores, one program for any layout, and the layers in a model (config, scan).
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <set>

#include "autodiff/value_and_grad.h"
#include "config_refusal.h"
#include "cpu_jit.h"
#include "grad_check.h"
#include "ir/error.h"
#include "nn/gpt.h"
#include "nn/layer_stack.h"
#include "nn/layers.h"
#include "nn/sparse_attention.h"
#include "rows_batch.h"
#include "scan_equality.h"
#include "trace/compile.h"
#include "train/gpt_step.h"
#include "train/step.h"

namespace keel {
namespace {

constexpr int64_t B = 2, T = 12, C = 8, H = 4, KV = 2, D = 4;

nn::SparseAttentionConfig small() {
  nn::SparseAttentionConfig s;
  s.keys = 3;
  s.window = 2;
  s.indexer_heads = 2;
  s.indexer_dim = 4;
  return s;
}

Tensor random(const Shape& shape, uint32_t seed, float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, scale);
  std::vector<float> v(static_cast<size_t>(numel(shape)));
  for (float& x : v) x = normal(rng);
  return Tensor(Array::from_f32(shape, v));
}

NamedTensors indexer_params(const nn::SparseAttentionConfig& s, uint32_t seed) {
  NamedTensors p;
  for (const auto& [name, shape] : nn::sparse_indexer_param_shapes(s, "attn.indexer", C)) {
    p[name] = random(shape, seed++, 0.5f);
  }
  return p;
}

// Row 0 packs documents of 5 and 7 positions; row 1 starts 3 positions into its one document.
Array packed_positions() {
  Array pos(DType::i64, {B, T});
  for (int64_t t = 0; t < T; ++t) {
    pos.set_i64(t, t < 5 ? t : t - 5);
    pos.set_i64(T + t, t + 3);
  }
  return pos;
}

std::vector<int64_t> ints(const Tensor& t) {
  std::vector<int64_t> out;
  for (int64_t i = 0; i < t.array().numel(); ++i) out.push_back(t.array().get_i64(i));
  return out;
}

// The window (t, t - 1, .. within the document), then the `keys` highest scores among the
// document's positions before the window, ties by lower position, -1 where there are fewer:
// what sparse_keys gives, computed on the host from the same scores.
TEST(SparseAttention, KeysAreTheWindowThenTheIndexersBestInTheDocument) {
  const nn::SparseAttentionConfig s = small();
  const Array pos = packed_positions();
  const Tensor scores = random({B, T, T}, 1);
  const std::vector<int64_t> got = ints(compile("keys", [s](const Tensor& x, const Tensor& p) {
    return nn::sparse_keys(s, x, p);
  })(scores, Tensor(pos)));
  const std::vector<float> sc = scores.to_f32();
  const int64_t S = s.window + s.keys;
  ASSERT_EQ(got.size(), static_cast<size_t>(B * T * S));
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t t = 0; t < T; ++t) {
      const int64_t place = std::min(pos.get_i64(b * T + t), t), start = t - place;
      std::vector<int64_t> want;
      for (int64_t j = 0; j < s.window; ++j) want.push_back(j <= place ? t - j : -1);
      std::vector<int64_t> candidates;
      for (int64_t k = start; k <= t - s.window; ++k) candidates.push_back(k);
      std::stable_sort(candidates.begin(), candidates.end(), [&](int64_t x, int64_t y) {
        return sc[(b * T + t) * T + x] > sc[(b * T + t) * T + y];
      });
      for (int64_t j = 0; j < s.keys; ++j) {
        want.push_back(j < static_cast<int64_t>(candidates.size()) ? candidates[j] : -1);
      }
      const std::vector<int64_t> row(got.begin() + (b * T + t) * S,
                                     got.begin() + (b * T + t + 1) * S);
      EXPECT_EQ(row, want) << "row " << b << " query " << t;
    }
  }
}

// A row shorter than the keys a query may pick (evaluation and sampling buckets): every earlier
// position of the document is listed, the rest -1.
TEST(SparseAttention, RowsShorterThanTheKeysListEveryEarlierPosition) {
  nn::SparseAttentionConfig s = small();  // 3 keys
  s.window = 1;
  Array pos(DType::i64, {1, 2});
  for (int64_t t = 0; t < 2; ++t) pos.set_i64(t, t);
  const std::vector<int64_t> got = ints(compile("short", [s](const Tensor& x, const Tensor& p) {
    return nn::sparse_keys(s, x, p);
  })(random({1, 2, 2}, 9), Tensor(pos)));
  // Per query: the window (itself), then min(keys, T) = 2 picks.
  EXPECT_EQ(got, (std::vector<int64_t>{0, -1, -1, 1, 0, -1}));
}

// The fused op equals the dense masked graph (scores [B, H, T, T] with every unlisted key
// masked) in values and in the gradients of q, k and v, on the reference interpreter and on the
// CPU backend.
TEST(SparseAttention, FusedOpEqualsTheDenseMaskedGraphWithGradients) {
  const Array pos = packed_positions();
  const Tensor scores = random({B, T, T}, 2);
  const Tensor keys = compile("keys", [](const Tensor& x, const Tensor& p) {
    return nn::sparse_keys(small(), x, p);
  })(scores, Tensor(pos));
  // allowed[b, 0, t, s]: s is listed for query t.
  Array allowed(DType::boolean, {B, 1, T, T});
  const std::vector<int64_t> k = ints(keys);
  const int64_t S = small().window + small().keys;
  for (int64_t r = 0; r < B * T; ++r) {
    for (int64_t e = 0; e < S; ++e) {
      if (k[r * S + e] >= 0) allowed.set_i64(r * T + k[r * S + e], 1);
    }
  }
  NamedTensors p = {{"q", random({B, T, H, D}, 3)},
                    {"k", random({B, T, KV, D}, 4)},
                    {"v", random({B, T, KV, D}, 5)}};
  const Tensor w = random({B, T, H, D}, 6);
  auto program = [&](bool fused, CompileOptions options) {
    return compile(
        fused ? "sparse" : "dense_masked",
        [fused](const NamedTensors& q, const Tensor& weight, const Tensor& listed,
                const Tensor& mask) {
          auto f = [&](const NamedTensors& r) {
            Tensor y;
            if (fused) {
              y = sparse_attention(r.at("q"), r.at("k"), r.at("v"), listed, 0.5);
            } else {  // bhtd for the graph of plain ops, scale 0.5 folded into q
              auto bhtd = [](const Tensor& x) { return transpose(x, {0, 2, 1, 3}); };
              y = bhtd(nn::attention_unfused(bhtd(r.at("q") * 0.5 * std::sqrt(double(D))),
                                             bhtd(r.at("k")), bhtd(r.at("v")), mask));
            }
            return sum(y * weight);
          };
          return value_and_grad(f)(q);
        },
        std::move(options));
  };
  testing_support::TempDir dir("sparse_cpu");
  CompileOptions on_cpu;
  on_cpu.jit = testing_support::cpu_jit(dir);
  auto [want, want_grads] = program(false, {})(p, w, keys, Tensor(allowed));
  for (CompileOptions options : {CompileOptions{}, on_cpu}) {
    auto [got, grads] = program(true, options)(p, w, keys, Tensor(allowed));
    EXPECT_NEAR(got.item(), want.item(), 1e-4);
    for (const char* name : {"q", "k", "v"}) {
      const std::vector<float> a = grads.at(name).to_f32(), b = want_grads.at(name).to_f32();
      ASSERT_EQ(a.size(), b.size());
      for (size_t i = 0; i < a.size(); ++i) EXPECT_NEAR(a[i], b[i], 1e-4) << name << " " << i;
    }
  }
}

auto mix_program(const nn::SparseAttentionConfig& s) {
  return compile("sparse_mix", [s](const NamedTensors& p, const Tensor& pos) {
    nn::SparseMix m =
        nn::sparse_attention_mix(s, p, "attn", p.at("x"), p.at("q"), p.at("k"), p.at("v"), pos);
    return std::pair<Tensor, Tensor>{m.y, m.indexer_loss};
  });
}

NamedTensors mix_params(uint32_t seed) {
  NamedTensors p = indexer_params(small(), seed);
  p["x"] = random({B, T, C}, seed + 10);
  p["q"] = random({B, T, H, D}, seed + 11);
  p["k"] = random({B, T, KV, D}, seed + 12);
  p["v"] = random({B, T, KV, D}, seed + 13);
  return p;
}

// A document reads nothing of another: changing every input of row 0's first document (its
// indexer's input too) changes no bit of the second document's output.
TEST(SparseAttention, PackedDocumentsNeverSeeEachOther) {
  const NamedTensors p = mix_params(20);
  auto f = mix_program(small());
  const Tensor pos(packed_positions());
  const std::vector<float> base = f(p, pos).first.to_f32();
  NamedTensors changed = p;
  for (const char* name : {"x", "q", "k", "v"}) {
    Array a = p.at(name).array().clone();
    const int64_t per_position = a.numel() / (B * T);
    for (int64_t i = 0; i < 5 * per_position; ++i) a.set_f64(i, a.get_f64(i) * -3.0 + 1.0);
    changed[name] = Tensor(a);
  }
  const std::vector<float> other = f(changed, pos).first.to_f32();
  const int64_t row = H * D;
  for (int64_t i = 0; i < 5 * row; ++i) EXPECT_NE(other[i], base[i]) << i;
  for (int64_t i = 5 * row; i < B * T * row; ++i) ASSERT_EQ(other[i], base[i]) << i;
  EXPECT_EQ(f.stats().traces, 1);
}

// The indexer's loss is a KL divergence: 0 when its scores on the listed keys give the main
// attention's weights, above 0 otherwise; its gradient matches central differences with the
// keys held; and in the mix, the indexer gets the loss's gradient alone while q, k and v get
// none of it.
TEST(SparseAttention, IndexerLossIsAKlWhoseGradientReachesTheIndexerAlone) {
  const nn::SparseAttentionConfig s = small();
  const Tensor pos(packed_positions());
  NamedTensors p = mix_params(30);
  // The KL with the keys and target held: central differences on the indexer's weights.
  const auto parts = compile("parts", [s](const NamedTensors& q, const Tensor& positions) {
    Tensor scores = nn::indexer_scores(s, q, "attn.indexer", q.at("x"));
    Tensor keys = nn::sparse_keys(s, scores, positions);
    Tensor target = sparse_attention_weights(q.at("q"), q.at("k"), keys, 0.5);
    return std::pair<Tensor, Tensor>{keys, target};
  })(p, pos);
  const Tensor keys = parts.first, target = parts.second;
  auto kl = compile("kl", [s](const NamedTensors& q, const Tensor& k, const Tensor& t) {
    auto f = [&](const NamedTensors& r) {
      return nn::indexer_loss(nn::indexer_scores(s, r, "attn.indexer", q.at("x")), k, t);
    };
    return value_and_grad(f)(q);
  });
  NamedTensors weights;
  for (const char* name :
       {"attn.indexer.query.weight", "attn.indexer.key.weight", "attn.indexer.weights.weight"}) {
    weights[name] = p.at(name);
  }
  weights["x"] = p.at("x");
  auto [loss, grads] = kl(weights, keys, target);
  EXPECT_GT(loss.item(), 0.0);
  testing_support::expect_gradients_match_fd(
      weights, grads,
      {"attn.indexer.query.weight", "attn.indexer.key.weight", "attn.indexer.weights.weight"},
      [&](const NamedTensors& q) { return kl(q, keys, target).first.item(); }, 2e-3, 2e-2);
  // A target equal to the indexer's own softmax on the keys: a KL of 0.
  const Tensor own = compile(
      "own",
      [](const Tensor& scores, const Tensor& k) {
        const int64_t b = k.shape()[0], t = k.shape()[1], n = k.shape()[2];
        Tensor listed = ge(k, full({}, 0.0, DType::i64));
        Tensor row = reshape(iota({b * t}, 0), {b, t, 1}) * t;
        Tensor flat = reshape(row + select(listed, k, full({}, 0.0, DType::i64)), {b * t * n});
        Tensor at = reshape(take(reshape(scores, {b * t * t}), flat), {b, t, n});
        Tensor e = select(listed, exp(at - max(at, {2}, true)), full({}, 0.0));
        return e / sum(e, {2}, true);
      })(compile("scores",
                 [s](const NamedTensors& q) {
                   return nn::indexer_scores(s, q, "attn.indexer", q.at("x"));
                 })(weights),
         keys);
  EXPECT_NEAR(kl(weights, keys, own).first.item(), 0.0, 1e-5);
  // In the mix: the indexer's gradient is the loss's alone, q, k, v's the output's alone.
  const Tensor w = random({B, T, H, D}, 31);
  auto vg = [&](bool output, bool indexer) {
    return compile(
        fmt::format("mix_{}_{}", output, indexer),
        [s, output, indexer](const NamedTensors& q, const Tensor& positions, const Tensor& weight) {
          auto f = [&](const NamedTensors& r) {
            nn::SparseMix m = nn::sparse_attention_mix(s, r, "attn", r.at("x"), r.at("q"),
                                                       r.at("k"), r.at("v"), positions);
            Tensor total = full({}, 0.0);
            if (output) total = total + sum(m.y * weight);
            if (indexer) total = total + m.indexer_loss;
            return total;
          };
          return value_and_grad(f)(q).second;
        })(p, pos, w);
  };
  const NamedTensors both = vg(true, true), out_only = vg(true, false), kl_only = vg(false, true);
  for (const auto& [name, g] : both) {
    const bool of_indexer = name.starts_with("attn.indexer");
    EXPECT_EQ(g.to_f32(), (of_indexer ? kl_only : out_only).at(name).to_f32()) << name;
    const std::vector<float> none = (of_indexer ? out_only : kl_only).at(name).to_f32();
    EXPECT_TRUE(std::all_of(none.begin(), none.end(), [](float v) { return v == 0; })) << name;
  }
}

// Scores 100 times larger than usual: the output, the loss and every gradient stay finite.
TEST(SparseAttention, LargeScoresStayFinite) {
  NamedTensors p = mix_params(40);
  p["q"] = random({B, T, H, D}, 41, 100.0f);
  p["x"] = random({B, T, C}, 42, 100.0f);
  const nn::SparseAttentionConfig s = small();
  auto f = compile("large", [s](const NamedTensors& q, const Tensor& positions) {
    auto loss = [&](const NamedTensors& r) {
      nn::SparseMix m = nn::sparse_attention_mix(s, r, "attn", r.at("x"), r.at("q"), r.at("k"),
                                                 r.at("v"), positions);
      return sum(m.y) + m.indexer_loss;
    };
    return value_and_grad(loss)(q);
  });
  auto [loss, grads] = f(p, Tensor(packed_positions()));
  EXPECT_TRUE(std::isfinite(loss.item()));
  for (const auto& [name, g] : grads) {
    for (float v : g.to_f32()) ASSERT_TRUE(std::isfinite(v)) << name;
  }
}

nn::GptConfig sparse_model() {
  return nn::GptConfig::from_json(
      R"({"name": "code-s", "layers": 4, "width": 16, "heads": 4, "kv_heads": 2,
          "mlp_hidden": 24, "seq": 8, "batch": 2, "sparse_attention_layers": [1, 3],
          "sparse_attention": {"keys": 2, "window": 2, "indexer_heads": 2, "indexer_dim": 4}})",
      "m.json");
}

// In a model: the layers listed get an indexer, the JSON round-trips, and a scanned stack of
// [dense, sparse attention + dense] pairs equals the unrolled one, loss and gradients (the
// indexers' from their loss), on packed rows.
TEST(SparseAttention, LayersOfAModelScanLikeTheUnrolledStack) {
  const nn::GptConfig c = sparse_model();
  EXPECT_EQ(nn::GptConfig::from_json(c.to_json(), "again").to_json(), c.to_json());
  std::set<std::string> names;
  for (const auto& [name, shape] : nn::gpt_param_shapes(c)) {
    if (name.find("indexer") != std::string::npos) names.insert(name);
  }
  EXPECT_EQ(names, (std::set<std::string>{
                       "h.1.attn.indexer.query.weight", "h.1.attn.indexer.key.weight",
                       "h.1.attn.indexer.weights.weight", "h.3.attn.indexer.query.weight",
                       "h.3.attn.indexer.key.weight", "h.3.attn.indexer.weights.weight"}));
  EXPECT_EQ(nn::layer_kinds(c, 0, 4), "dxdx");
  nn::GptConfig scanned = c;
  scanned.layout.scanned = true;
  EXPECT_EQ(nn::layer_plan(scanned, 0, 4).why,
            "scan: layers 0..3 as 2 iterations of one 2-layer body [dense, sparse attention + "
            "dense]");
  NamedTensors p = train::make_gpt_init(c)(Scalar(5.0));
  const NamedTensors g = testing_support::expect_scanned_equals_unrolled(c, p, 1e-4);
  const std::vector<float> indexer = g.at("h.1.attn.indexer.query.weight").to_f32();
  EXPECT_TRUE(std::any_of(indexer.begin(), indexer.end(), [](float v) { return v != 0; }));
}

// The train step reports the indexers' KL as `indexer_kl`: the sum over micro-batches of
// gpt_losses' KL, over the step's query positions (padded ones too); the logged loss stays the
// language model's.
TEST(SparseAttention, TheStepReportsTheIndexersKlPerQueryPosition) {
  const nn::GptConfig c = sparse_model();
  const NamedTensors p = train::make_gpt_init(c)(Scalar(4.0));
  const int64_t K = 2, B = 2, T = c.seq;
  const std::vector<Tensor> batch = testing_support::rows_batch(K, B, T, c.vocab);
  auto step = train::make_train_step(c, {.donate = false});
  train::Hyper h;
  const auto out = step(p, train::zeros_like_params(c), train::zeros_like_params(c),
                        train::zero_counters(c), batch, train::step_scalars(h, 1));
  const train::Counters& metrics = std::get<7>(out);
  ASSERT_EQ(metrics.count("indexer_kl"), 1u);
  const auto parts = compile("parts", [c](const NamedTensors& q, const std::vector<Tensor>& f) {
    Tensor kl = full({}, 0.0), nll = full({}, 0.0);
    for (int64_t k = 0; k < 2; ++k) {
      nn::GptLosses l =
          nn::gpt_losses(c, q, train::micro(f[0], k), train::micro(f[1], k), train::micro(f[2], k),
                         train::micro(f[3], k), train::micro(f[4], k));
      kl = kl + l.indexer_kl;
      nll = nll + l.nll;
    }
    return std::pair<Tensor, Tensor>{kl, nll / sum(f[2])};
  })(p, batch);
  const double want = parts.first.item() / double(K * B * T);
  EXPECT_GT(want, 0.0);
  EXPECT_NEAR(metrics.at("indexer_kl").item(), want, 1e-5 * want);
  EXPECT_NEAR(std::get<0>(out).item(), parts.second.item(), 1e-5);
  // Without sparse layers there is no such metric.
  nn::GptConfig dense = c;
  dense.sparse_attention_layer_ids.clear();
  const auto plain = train::make_train_step(dense, {.donate = false})(
      train::make_gpt_init(dense)(Scalar(4.0)), train::zeros_like_params(dense),
      train::zeros_like_params(dense), train::zero_counters(dense), batch,
      train::step_scalars(h, 1));
  EXPECT_EQ(std::get<7>(plain).count("indexer_kl"), 0u);
}

// DSA's dense warm-up step (StepOptions::indexer_warmup): only the indexers' parameters and
// moments change, and they learn the KL over every causal key of the document. With keys +
// window >= seq a sparse step lists every key too, so its indexers' KL, gradient (in AdamW's
// first moment, unclipped) and loss equal the warm-up's, whose own config picks 2 keys.
TEST(SparseAttention, DenseWarmupTrainsOnlyTheIndexersOnEveryKey) {
  const nn::GptConfig c = sparse_model();
  nn::GptConfig every = c;
  every.sparse_attention.keys = c.seq;
  const NamedTensors p = train::make_gpt_init(c)(Scalar(6.0));
  const std::vector<Tensor> batch = testing_support::rows_batch(2, 2, c.seq, c.vocab);
  train::Hyper h;
  h.clip_norm = 0;  // the warm-up clips over the indexers' gradients alone
  // Moments of an earlier step, so a frozen one that went through AdamW would change.
  const NamedTensors m0 = train::make_gpt_init(c)(Scalar(7.0));
  NamedTensors v0;
  for (const auto& [name, w] : p) v0[name] = Tensor(Array::full(w.shape(), 0.5));
  auto run = [&](const nn::GptConfig& config, bool warmup) {
    train::StepOptions o;
    o.donate = false;
    o.indexer_warmup = warmup;
    return train::make_train_step(config, o)(p, m0, v0, train::zero_counters(c), batch,
                                             train::step_scalars(h, 1));
  };
  const auto warm = run(c, true), sparse = run(c, false), dense_keys = run(every, false);
  const NamedTensors &params = std::get<3>(warm), &m = std::get<4>(warm), &v = std::get<5>(warm);
  int indexers = 0;
  for (const auto& [name, w] : p) {
    if (train::is_indexer_parameter(name)) {
      ++indexers;
      EXPECT_NE(params.at(name).to_f32(), w.to_f32()) << name;
      const std::vector<float> got = m.at(name).to_f32();
      const std::vector<float> want = std::get<4>(dense_keys).at(name).to_f32();
      const float largest = std::abs(*std::max_element(
          want.begin(), want.end(), [](float a, float b) { return std::abs(a) < std::abs(b); }));
      ASSERT_GT(largest, 0.0f) << name;
      for (size_t i = 0; i < got.size(); ++i) {
        ASSERT_NEAR(got[i], want[i], 1e-4f * largest) << name << " [" << i << "]";
      }
    } else {  // as they went in, bit for bit
      EXPECT_EQ(params.at(name).to_f32(), w.to_f32()) << name;
      EXPECT_EQ(m.at(name).to_f32(), m0.at(name).to_f32()) << name;
      EXPECT_EQ(v.at(name).to_f32(), v0.at(name).to_f32()) << name;
    }
  }
  EXPECT_EQ(indexers, 6);
  const double kl = std::get<7>(warm).at("indexer_kl").item();
  EXPECT_NEAR(kl, std::get<7>(dense_keys).at("indexer_kl").item(), 1e-5 * kl);
  EXPECT_GT(std::abs(kl - std::get<7>(sparse).at("indexer_kl").item()), 1e-3 * kl);
  EXPECT_NEAR(std::get<0>(warm).item(), std::get<0>(dense_keys).item(), 1e-5);
  // A model without sparse attention has nothing to warm up.
  nn::GptConfig dense = c;
  dense.sparse_attention_layer_ids.clear();
  EXPECT_THROW(train::make_train_step(dense, {.indexer_warmup = true}), InputError);
}

std::string refusal(const std::string& json) {
  return testing_support::config_refusal(json);
}

TEST(SparseAttention, ConfigRefusesBadFieldsByName) {
  EXPECT_EQ(refusal(R"({"seq": 16, "sparse_attention_layers": [1],
                       "sparse_attention": {"keys": 17}})"),
            "[nn] m.json: field 'sparse_attention': 'keys' must be in 1..seq (16), got 17");
  EXPECT_EQ(refusal(R"({"sparse_attention_layers": [1], "sparse_attention": {"window": 0}})"),
            "[nn] m.json: field 'sparse_attention': 'window' must be in 1..seq (256), got 0");
  EXPECT_EQ(refusal(R"({"sparse_attention_layers": [1],
                       "sparse_attention": {"indexer_heads": 0}})"),
            "[nn] m.json: field 'sparse_attention': 'indexer_heads' must be in 1..64, got 0");
  EXPECT_EQ(refusal(R"({"sparse_attention_layers": [1],
                       "sparse_attention": {"indexer_dim": 513}})"),
            "[nn] m.json: field 'sparse_attention': 'indexer_dim' must be in 1..512, got 513");
  EXPECT_EQ(refusal(R"({"sparse_attention": {"top_k": 3}})"),
            "[nn] m.json: field 'sparse_attention': unknown field 'top_k'; fields: keys, "
            "window, indexer_heads, indexer_dim");
  EXPECT_EQ(refusal(R"({"layers": 2, "sparse_attention_layers": [2]})"),
            "[nn] m.json: sparse_attention_layers must be ascending layer indices in 0..1, got 2 "
            "at 0");
  EXPECT_EQ(refusal(R"({"sparse_attention_layers": [1], "mamba_layers": [1]})"),
            "[nn] m.json: field 'sparse_attention_layers': layer 1 is also in mamba_layers, "
            "whose mixer has no attention to make sparse; list it in one of them");
  // The indexer's scores, [batch, seq, indexer_heads, seq], are counted before anything is built.
  EXPECT_EQ(refusal(R"({"batch": 16777216, "seq": 65536, "sparse_attention_layers": [1],
                       "sparse_attention": {"indexer_heads": 64}})"),
            "[nn] m.json: fields 'batch' (16777216) x 'seq' (65536) x "
            "'sparse_attention.indexer_heads' (64) x 'seq' (65536): the indexer's scores would "
            "hold more than 2^60 elements (bytes must fit int64); use smaller values");
  // Under tensor parallelism the heads split and the indexer stays whole (tensor_parallel_test).
  nn::GptConfig split = sparse_model();
  split.model_parallel = 2;
  EXPECT_EQ(testing_support::validate_refusal(split), "accepted");
}

}  // namespace
}  // namespace keel
