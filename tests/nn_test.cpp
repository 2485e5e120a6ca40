#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <random>

#include "autodiff/value_and_grad.h"
#include "backend/host_memory.h"
#include "config_refusal.h"
#include "cpu_jit.h"
#include "grad_check.h"
#include "ir/error.h"
#include "nn/gpt.h"
#include "nn/layer_stack.h"
#include "nn/layers.h"
#include "nn/tensor_parallel.h"
#include "nn/variables.h"
#include "tests/fake_device.h"
#include "tests/tiny_gpt.h"
#include "trace/compile.h"
#include "trace/scan.h"
#include "train/gpt_step.h"

namespace keel {
namespace {

class NnTest : public ::testing::Test {
 protected:
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

// Variables: storage that never moves. Values that are not in it are copied in, a value that is
// another variable's storage (a swap) is read before anything is overwritten, and a bad set of
// values writes nothing and names only what is wrong.
TEST(Variables, UpdateCopiesIntoFixedStorageSafely) {
  auto value = [](std::vector<float> v) {
    return Tensor(Array::from_f32({static_cast<int64_t>(v.size())}, v));
  };
  nn::Variables vars({{"a", value({1, 2})}, {"b", value({3, 4})}});
  const auto where = vars.storage();
  const NamedTensors before = vars.tensors();
  vars.update({{"a", before.at("b")}, {"b", before.at("a")}});  // a swap through the storage
  EXPECT_EQ(vars.tensors().at("a").to_f32(), (std::vector<float>{3, 4}));
  EXPECT_EQ(vars.tensors().at("b").to_f32(), (std::vector<float>{1, 2}));
  EXPECT_EQ(vars.storage(), where);
  EXPECT_EQ(vars.copies(), 2);
  try {
    vars.update({{"a", value({5, 6})}, {"b", value({7})}});
    ADD_FAILURE() << "a value of another shape was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()),
              "[nn] variables cannot take these values: b is f32[1], the variable f32[2]; pass "
              "exactly the variables' names, shapes and dtypes (a step returns what it took)");
  }
  EXPECT_EQ(vars.tensors().at("a").to_f32(), (std::vector<float>{3, 4}));  // nothing written
  const Tensor shared = value({0, 0});
  EXPECT_THROW(nn::Variables({{"m", shared}, {"v", shared}}), Error);  // one buffer, two names
}

// Variables on a device whose memory is not the host's: placed through the current JIT, updated
// with the device's own copies (a swap too) or from the host, and a value on another device is
// refused before anything is written.
TEST(Variables, LiveOnADeviceWhoseMemoryIsNotTheHosts) {
  JitScope scope(std::make_shared<testing_support::FakeDeviceJit>());
  auto value = [](std::vector<float> v) {
    return Tensor(Array::from_f32({static_cast<int64_t>(v.size())}, v));
  };
  nn::Variables vars({{"a", value({1, 2})}, {"b", value({3, 4})}});
  EXPECT_EQ(vars.tensors().at("a").buffer().device(), "fake:0");
  const auto where = vars.storage();
  const NamedTensors before = vars.tensors();
  vars.update({{"a", before.at("b")}, {"b", before.at("a")}});
  EXPECT_EQ(vars.tensors().at("a").to_f32(), (std::vector<float>{3, 4}));
  EXPECT_EQ(vars.tensors().at("b").to_f32(), (std::vector<float>{1, 2}));
  vars.assign({{"a", value({5, 6})}, {"b", value({7, 8})}});
  EXPECT_EQ(vars.tensors().at("a").to_f32(), (std::vector<float>{5, 6}));
  EXPECT_EQ(vars.storage(), where);
  const Tensor on_cpu = Tensor::held_by_device(
      backend::adopt_host_array(Array::from_f32({2}, std::vector<float>{0, 0}), {0, "cpu"}));
  try {
    vars.update({{"a", on_cpu}, {"b", vars.tensors().at("b")}});
    ADD_FAILURE() << "a value on another device was written";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()),
              "[nn] variables cannot take these values: a is on cpu:0, the variable on fake:0; "
              "pass exactly the variables' names, shapes and dtypes (a step returns what it "
              "took)");
  }
  EXPECT_EQ(vars.tensors().at("a").to_f32(), (std::vector<float>{5, 6}));
}

// A Variable's values are the device's: handing them to a program or back into the Variables
// reads nothing on the host; reading one's value does, once per read.
TEST(Variables, HoldTheirValuesOnTheDeviceAndUpdateWithoutHostReads) {
  const std::vector<float> w0 = {1, 2};
  nn::Variables vars(NamedTensors{{"w", Tensor(Array::from_f32({2}, w0))}});
  auto step = compile("step", [](const Tensor& w) { return w * 2.0; });
  const int64_t before = host_read_count();
  const Tensor w = vars.tensors().at("w");
  EXPECT_TRUE(w.is_held_by_device());
  const Tensor next = step(w);
  EXPECT_TRUE(next.is_held_by_device());
  vars.update({{"w", next}});
  EXPECT_EQ(host_read_count(), before);
  EXPECT_EQ(vars.tensors().at("w").to_f32(), (std::vector<float>{2, 4}));
  EXPECT_EQ(host_read_count(), before + 1);
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
    return nn::attention(q, k, v);
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
  NamedTensors p = train::make_gpt_init(c)(Scalar(3.0));
  EXPECT_EQ(p.size(), shapes.size());
  auto loss = compile("loss", [c](const NamedTensors& q, const Tensor& x, const Tensor& y) {
    return nn::gpt_loss(c, q, x, y, full(x.shape(), 1.0));
  });
  double l = loss(p, tokens_for(c, 0), tokens_for(c, 1)).item();
  EXPECT_NEAR(l, std::log(32.0), 0.1);
}

template <class F>
void expect_gradients_match(F& f, const NamedTensors& p, const Tensor& x, const Tensor& y,
                            const std::vector<std::string>& names) {
  auto [loss, grads] = f(p, x, y);
  testing_support::expect_gradients_match_fd(
      p, grads, names, [&](const NamedTensors& q) { return f(q, x, y).first.item(); }, 2e-3, 2e-2);
}

TEST_F(NnTest, GptGradientMatchesFiniteDifference) {
  nn::GptConfig c = tiny();
  NamedTensors p = train::make_gpt_init(c)(Scalar(5.0));
  auto f = compile("vg", [c](const NamedTensors& q, const Tensor& x, const Tensor& y) {
    auto fn = [&c](const NamedTensors& r, const Tensor& a, const Tensor& b) {
      return nn::gpt_loss(c, r, a, b, full(a.shape(), 1.0));
    };
    return value_and_grad(fn)(q, x, y);
  });
  expect_gradients_match(f, p, tokens_for(c, 0), tokens_for(c, 3),
                         {"h.1.mlp.c_fc.weight", "h.0.attn.c_attn.weight", "wte.weight"});
}

using testing_support::tiny_code;

// RMSNorm, rotary positions, grouped-query attention with the fused QKV and SwiGLU: every
// parameter's gradient agrees with finite differences.
TEST_F(NnTest, CodePresetGradientMatchesFiniteDifference) {
  nn::GptConfig c = tiny_code();
  NamedTensors p = train::make_gpt_init(c)(Scalar(3.0));
  EXPECT_EQ(p.count("wpe.weight"), 0u);  // rotary: no learned positions
  EXPECT_EQ(p.at("h.0.attn.c_attn.weight").shape(), (Shape{16, (4 + 2 * 2) * 4}));
  EXPECT_EQ(p.at("h.0.mlp.c_fc.weight").shape(), (Shape{16, 48}));
  auto f = compile("vg_code", [c](const NamedTensors& q, const Tensor& x, const Tensor& y) {
    auto fn = [&c](const NamedTensors& r, const Tensor& a, const Tensor& b) {
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
    NamedTensors p = train::make_gpt_init(c)(Scalar(2.0));
    auto packed =
        compile("packed", [c](const NamedTensors& q, const Tensor& t, const Tensor& pos,
                              const Tensor& doc) { return nn::gpt_logits(c, q, t, pos, doc); });
    auto alone = compile(
        "alone", [c](const NamedTensors& q, const Tensor& t) { return nn::gpt_logits(c, q, t); });
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

// The one-line error of reading `json` as the config file m.json, or "no error".
std::string config_error(const std::string& json) {
  return testing_support::config_refusal(json, "no error");
}

// Split over "model": the fused QKV weight per head (q, k and v each cut in M), the MLP's hidden
// units (SwiGLU's gate and up each), the output projections by rows; norms, embeddings and the
// output biases whole. A head count, kv head count or hidden width M does not divide, or MoE
// layers, are refused in one line.
TEST_F(NnTest, ModelSplitsCutHeadsAndHiddenUnitsAndRefuseWhatDoesNotDivide) {
  nn::GptConfig c = nn::gpt_preset("code-s");  // 8 heads, 2 kv heads, hidden 704, no biases
  EXPECT_TRUE(nn::gpt_model_splits(c).empty());
  c.model_parallel = 2;
  c.validate("m.json");
  const std::map<std::string, nn::ModelSplit> s = nn::gpt_model_splits(c);
  EXPECT_EQ(s.size(), size_t(4 * c.layers));
  EXPECT_EQ(s.at("h.0.attn.c_attn.weight").dim, 1);
  EXPECT_EQ(s.at("h.0.attn.c_attn.weight").parts, (std::vector<int64_t>{256, 64, 64}));
  EXPECT_EQ(s.at("h.3.attn.c_proj.weight").dim, 0);
  EXPECT_EQ(s.at("h.3.attn.c_proj.weight").parts, (std::vector<int64_t>{256}));
  EXPECT_EQ(s.at("h.1.mlp.c_fc.weight").parts, (std::vector<int64_t>{704, 704}));
  EXPECT_EQ(s.at("h.1.mlp.c_proj.weight").parts, (std::vector<int64_t>{704}));
  EXPECT_EQ(s.count("wte.weight") + s.count("h.0.ln_1.weight"), 0u);
  nn::GptConfig g = nn::gpt_preset("gpt2-s");
  g.model_parallel = 3;  // 6 heads, hidden 1536
  const auto gs = nn::gpt_model_splits(g);
  EXPECT_EQ(gs.at("h.0.attn.c_attn.bias").parts, (std::vector<int64_t>{384, 384, 384}));
  EXPECT_EQ(gs.at("h.0.mlp.c_fc.bias").parts, (std::vector<int64_t>{1536}));
  EXPECT_EQ(gs.count("h.0.attn.c_proj.bias"), 0u);
  // [2, 6] split along dim 1 as parts 4 and 2 over 2 processes: each holds [2, 3].
  const nn::ModelSplit cols{1, {4, 2}};
  EXPECT_EQ(nn::model_shard_shape({2, 6}, cols, 2), (Shape{2, 3}));
  for (int64_t p : {0, 1}) {
    std::vector<int64_t> from;
    for (int64_t i = 0; i < 6; ++i) from.push_back(nn::model_shard_source({2, 6}, cols, p, 2, i));
    EXPECT_EQ(from, p == 0 ? (std::vector<int64_t>{0, 1, 4, 6, 7, 10})
                           : (std::vector<int64_t>{2, 3, 5, 8, 9, 11}));
  }
  const nn::ModelSplit rows{0, {4}};  // [4, 2] by rows over 2: rows 2 and 3 on process 1
  EXPECT_EQ(nn::model_shard_source({4, 2}, rows, 1, 2, 3), 7);

  auto error_of = [](nn::GptConfig x) {
    try {
      x.validate("m.json");
    } catch (const InputError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  c.model_parallel = 4;  // 2 kv heads
  EXPECT_EQ(error_of(c),
            "[nn] m.json: h.0.attn.c_attn.weight: dimension heads (8 query heads, 2 kv heads) "
            "does not split over 4 processes of mesh axis 'model'; give 'model' a size that "
            "divides both, or drop heads=model from sharding.rules");
  c.split_heads = false;  // the MLP alone: 704 hidden units over 4, then over 3
  EXPECT_EQ(error_of(c), "no error");
  c.model_parallel = 3;
  EXPECT_EQ(error_of(c),
            "[nn] m.json: h.0.mlp.c_fc.weight: dimension mlp (704 hidden units) does not split "
            "over 3 processes of mesh axis 'model'; give 'model' a size that divides it, or drop "
            "mlp=model from sharding.rules");
  c.split_mlp = false;
  EXPECT_EQ(error_of(c),
            "[nn] m.json: the blocks split over 3 processes of mesh axis 'model', but neither "
            "the heads nor the MLP's hidden units nor the n-gram memories' rows nor the experts "
            "nor the vocabulary are split (sharding.rules); map heads, mlp, memory, experts or "
            "vocab to 'model'");
  // MoE layers' experts stay whole by default: code-moe-s splits its attention, its dense
  // layers' MLPs and its MTP block's; a model whose every feed-forward is MoE has no MLP to split.
  nn::GptConfig moe = nn::gpt_preset("code-moe-s");
  moe.model_parallel = 2;
  EXPECT_EQ(error_of(moe), "no error");
  moe.moe_every = 1;
  moe.mtp_weights.clear();
  EXPECT_EQ(error_of(moe),
            "[nn] m.json: sharding.rules maps mlp to mesh axis 'model', which shards nothing "
            "here: every feed-forward layer is MoE (experts=model splits experts); drop mlp=model");
  moe.split_mlp = false;
  EXPECT_EQ(error_of(moe), "no error");
  // The memory rule: a model without an n-gram memory has nothing for it to split, and the
  // tables' rows must divide (nam-s: 8 tables of the prime 2039 rows, over 2 and then 16).
  moe.split_memory = true;
  EXPECT_EQ(error_of(moe),
            "[nn] m.json: sharding.rules maps memory to mesh axis 'model', which shards nothing "
            "here: the model has no n-gram memory layer; drop memory=model");
  nn::GptConfig nam = nn::gpt_preset("nam-s");
  nam.model_parallel = 2;
  nam.split_memory = true;
  EXPECT_EQ(error_of(nam), "no error");
  nam.split_heads = nam.split_mlp = false;
  nam.model_parallel = 16;
  EXPECT_EQ(
      error_of(nam),
      fmt::format("[nn] m.json: h.{}.engram.table: dimension memory ({} tables of 2039 "
                  "rows) does not split over 16 processes of mesh axis 'model'; give "
                  "'model' a size that divides {}, or drop memory=model from "
                  "sharding.rules",
                  nam.engram_layer_ids.front(), nam.engram.tables(), nam.engram.tables() * 2039));
  // The experts rule: a model without MoE layers has nothing for it to split, and the experts
  // must divide (code-moe-s: 4 experts, over 2 and then 3).
  nn::GptConfig dense = nn::gpt_preset("code-s");
  dense.model_parallel = 2;
  dense.split_experts = true;
  EXPECT_EQ(error_of(dense),
            "[nn] m.json: sharding.rules maps experts to mesh axis 'model', which shards "
            "nothing here: the model has no MoE layer; drop experts=model");
  nn::GptConfig experts = nn::gpt_preset("code-moe-s");
  experts.model_parallel = 2;
  experts.split_heads = experts.split_mlp = false;
  experts.split_experts = true;
  EXPECT_EQ(error_of(experts), "no error");
  experts.model_parallel = 3;
  EXPECT_EQ(error_of(experts),
            "[nn] m.json: h.1.moe.experts.c_fc.weight: dimension experts (4 experts) does not "
            "split over 3 processes of mesh axis 'model'; give 'model' a size that divides it, "
            "or drop experts=model from sharding.rules");
  // The vocab rule: the tied embedding's rows must divide (258 over 2, then 4).
  nn::GptConfig vocab = nn::gpt_preset("code-s");
  vocab.vocab = 258;
  vocab.model_parallel = 2;
  vocab.split_heads = vocab.split_mlp = false;
  vocab.split_vocab = true;
  EXPECT_EQ(error_of(vocab), "no error");
  vocab.model_parallel = 4;
  EXPECT_EQ(error_of(vocab),
            "[nn] m.json: wte.weight: dimension vocab (258 tokens) does not split over 4 "
            "processes of mesh axis 'model'; give 'model' a size that divides it, set vocab to "
            "a multiple of 4 (rows no token reads), or drop vocab=model from sharding.rules");
}

// A config file's vocab below what the data holds, a name that is not a string or a preset,
// and shapes whose element counts overflow int64 are each one line naming the file and the
// fields, never a clamped gather, a raw JSON exception or a wrapped-around shape.
TEST_F(NnTest, ConfigRefusesSmallVocabBadNameAndOverflowingShapes) {
  auto error_with_min_vocab = [](const std::string& json, int64_t min_vocab) {
    try {
      nn::GptConfig::from_json(json, "m.json", min_vocab);
    } catch (const InputError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_EQ(error_with_min_vocab(R"({"name": "code-s", "vocab": 100})", 256),
            "[nn] m.json: field 'vocab' must be at least 256 (an embedding row for every token "
            "the data holds), got 100");
  EXPECT_EQ(error_with_min_vocab(R"({"name": "code-s", "vocab": 256})", 256), "no error");
  EXPECT_EQ(config_error(R"({"name": "code-s", "vocab": 100})"), "no error");  // nn alone: >= 2
  nn::GptConfig small = nn::gpt_preset("code-s");
  small.vocab = 255;
  EXPECT_THROW(small.validate("--config", 256), InputError);

  EXPECT_EQ(config_error(R"({"name": 7, "layers": 2})"),
            "[nn] m.json: field 'name' must be a string");
  EXPECT_EQ(config_error(R"({"name": "gpt5"})"),
            "[nn] m.json: field 'name' is \"gpt5\", not a preset; presets: code-moe-s, code-s, "
            "gpt2-s, gpt2-m, nam-s");

  const std::string huge = "4611686018427387904";  // 2^62
  EXPECT_EQ(config_error(R"({"name": "code-s", "vocab": )" + huge + "}"),
            "[nn] m.json: fields 'vocab' (" + huge +
                ") x 'width' (256): wte.weight would hold more than 2^60 elements (bytes must fit "
                "int64); use smaller values");
  for (const auto& [json, fields] : std::vector<std::pair<std::string, std::string>>{
           {R"({"name": "code-s", "width": )" + huge + R"(, "heads": 1, "kv_heads": 1})",
            "fields 'width' (" + huge + ") x 'width' (" + huge + "): attn.c_proj.weight"},
           {R"({"name": "code-s", "mlp_hidden": )" + huge + "}",
            "fields 'width' (256) x 'mlp_hidden' (" + huge + "): the MLP's weights"},
           {R"({"name": "code-s", "layers": 1099511627776, "width": 1048576, "heads": 1,
               "kv_heads": 1})",
            "fields 'layers' (1099511627776): the dense layers' parameters"},
           {R"({"name": "code-s", "batch": 1073741824, "seq": 1073741824})",
            "fields 'batch' (1073741824) x 'seq' (1073741824) x 'vocab' (256): the logits"},
           {R"({"name": "code-moe-s", "moe": {"experts": 1125899906842624, "top_k": 1}})",
            "fields 'moe.experts' (1125899906842624) x 'width' (256) x 'moe.hidden' (352): the "
            "experts' weights"}}) {
    const std::string m = config_error(json);
    EXPECT_TRUE(m.starts_with("[nn] m.json: " + fields + " would hold more than 2^60 elements"))
        << json << "\n"
        << m;
  }
}

// code-moe-s: MoE in every second layer (router, stacked experts, shared expert instead of the
// MLP), one MTP head; the config round-trips through JSON and bad fields name themselves.
TEST_F(NnTest, MoeAndMtpConfig) {
  nn::GptConfig c = nn::gpt_preset("code-moe-s");
  EXPECT_FALSE(c.is_moe_layer(0));
  EXPECT_TRUE(c.is_moe_layer(1));
  EXPECT_TRUE(c.is_moe_layer(3));
  EXPECT_EQ(c.moe_layers(), 2);
  EXPECT_EQ(c.mtp_depth(), 1);
  std::map<std::string, Shape> shapes;
  for (const auto& [name, shape] : nn::gpt_param_shapes(c)) shapes[name] = shape;
  const int64_t C = c.width, E = c.moe.experts, F = c.moe.hidden;
  EXPECT_EQ(shapes.at("h.0.mlp.c_fc.weight"), (Shape{C, 2 * c.hidden()}));
  EXPECT_EQ(shapes.count("h.1.mlp.c_fc.weight"), 0u);
  EXPECT_EQ(shapes.at("h.1.moe.router.weight"), (Shape{C, E}));
  EXPECT_EQ(shapes.at("h.3.moe.experts.c_fc.weight"), (Shape{E, C, 2 * F}));
  EXPECT_EQ(shapes.at("h.3.moe.shared.c_proj.weight"), (Shape{F, C}));
  EXPECT_EQ(shapes.at("mtp.1.proj.weight"), (Shape{2 * C, C}));
  EXPECT_EQ(shapes.at("mtp.1.attn.c_attn.weight"), shapes.at("h.0.attn.c_attn.weight"));
  EXPECT_EQ(shapes.count("mtp.2.proj.weight"), 0u);
  EXPECT_EQ(nn::GptConfig::from_json(c.to_json(), "t").to_json(), c.to_json());
  EXPECT_EQ(nn::gpt_preset("code-s").to_json().find("moe"), std::string::npos);
  EXPECT_EQ(config_error(R"({"name": "code-moe-s", "moe": {"experts": 1, "top_k": 2}})"),
            "[nn] m.json: moe: top_k must be in 1..experts (1), got 2");
  EXPECT_NE(config_error(R"({"name": "code-moe-s", "moe": {"expertz": 4}})")
                .find("field 'moe': unknown field 'expertz'"),
            std::string::npos);
  EXPECT_NE(config_error(R"({"mtp_weights": [0.1, 0.1, 0.1, 0.1]})").find("at most 3 depths"),
            std::string::npos);
  EXPECT_NE(config_error(R"({"moe_every": 9})").find("moe_every must be in 0..layers (6)"),
            std::string::npos);
}

// MoE in listed layers (all but the first, as DeepSeek-V3 does): the list replaces the
// preset's pattern, round-trips, is checked, and the layer plan scans the MoE run.
TEST_F(NnTest, MoeLayersCanBeListed) {
  nn::GptConfig c =
      nn::GptConfig::from_json(R"({"name": "code-moe-s", "moe_layers": [1, 2, 3]})", "m.json");
  EXPECT_EQ(c.moe_every, 0);
  EXPECT_EQ(c.moe_layers(), 3);
  EXPECT_FALSE(c.is_moe_layer(0));
  for (int64_t i : {1, 2, 3}) EXPECT_TRUE(c.is_moe_layer(i)) << i;
  EXPECT_EQ(nn::GptConfig::from_json(c.to_json(), "t").to_json(), c.to_json());
  std::map<std::string, Shape> shapes;
  for (const auto& [name, shape] : nn::gpt_param_shapes(c)) shapes[name] = shape;
  EXPECT_EQ(shapes.count("h.0.mlp.c_fc.weight"), 1u);
  EXPECT_EQ(shapes.count("h.2.moe.router.weight"), 1u);
  EXPECT_EQ(nn::layer_plan(c, 0, 4).why,
            "scan: layers 0..3 are not one repeated block ([dense, MoE, MoE, MoE]); scanned: "
            "1..3 (3 x [MoE]); unrolled: 0 ([dense])");
  EXPECT_EQ(config_error(R"({"name": "code-s", "moe_layers": [3, 1]})"),
            "[nn] m.json: moe_layers must be ascending layer indices in 0..3, got 1 at 1");
  EXPECT_EQ(config_error(R"({"name": "code-s", "moe_layers": [4]})"),
            "[nn] m.json: moe_layers must be ascending layer indices in 0..3, got 4 at 0");
  EXPECT_EQ(config_error(R"({"name": "code-s", "moe_every": 2, "moe_layers": [1]})"),
            "[nn] m.json: give moe_every or moe_layers, not both");
  EXPECT_EQ(config_error(R"({"name": "code-s", "moe_layers": 1})"),
            "[nn] m.json: field 'moe_layers' must be a list of layer indices, ascending");
}

// MTP depth d at position t predicts targets[t + d]: live only where that target is live, inside
// the row and in the same document.
TEST_F(NnTest, MtpLiveTargetsStayInTheDocument) {
  Array mask(DType::f32, {1, 8}), doc(DType::i64, {1, 8});
  for (int64_t t = 0; t < 8; ++t) {
    mask.set_f64(t, t == 6 ? 0.0 : 1.0);
    doc.set_i64(t, t < 3 ? 0 : 1);
  }
  auto live = compile("live", [](const Tensor& m, const Tensor& d, const Tensor& depth) {
    (void)depth;
    return std::pair<Tensor, Tensor>{nn::mtp_live(m, d, 1), nn::mtp_live(m, d, 2)};
  });
  auto [one, two] = live(Tensor(mask), Tensor(doc), Tensor(Array::scalar(0)));
  EXPECT_EQ(one.to_f32(), (std::vector<float>{1, 1, 0, 1, 1, 0, 1, 0}));
  EXPECT_EQ(two.to_f32(), (std::vector<float>{1, 0, 0, 1, 0, 1, 0, 0}));
}

// The MTP heads' gradients (projection, norms, block, the tied embedding they share) agree
// with finite differences of the combined objective.
TEST_F(NnTest, MtpGradientMatchesFiniteDifference) {
  nn::GptConfig c = tiny_code();
  c.mtp_weights = {0.5, 0.25};
  NamedTensors p = train::make_gpt_init(c)(Scalar(6.0));
  auto f = compile("vg_mtp", [c](const NamedTensors& q, const Tensor& x, const Tensor& y) {
    auto fn = [&c](const NamedTensors& r, const Tensor& a, const Tensor& b) {
      const int64_t B = a.shape()[0], T = a.shape()[1];
      Tensor ones = full(a.shape(), 1.0);
      Tensor pos = broadcast_to(iota({1, T}, 1), {B, T});
      Tensor doc = full(a.shape(), 0.0, DType::i64);
      nn::GptLosses l = nn::gpt_losses(c, r, a, b, ones, pos, doc);
      return l.nll / double(B * T) + 0.5 * (l.mtp_nll[0] / l.mtp_count[0]) +
             0.25 * (l.mtp_nll[1] / l.mtp_count[1]);
    };
    return value_and_grad(fn)(q, x, y);
  });
  expect_gradients_match(f, p, tokens_for(c, 0), tokens_for(c, 3),
                         {"mtp.1.proj.weight", "mtp.1.ln_e.weight", "mtp.2.attn.c_attn.weight",
                          "mtp.2.mlp.c_proj.weight", "mtp.1.ln_f.weight", "wte.weight"});
}

// MTP depth d at position t sees tokens up to t + d and predicts targets[t + d]. Without a
// leak its probabilities over every value that target can take sum to 1, and later tokens and
// targets change nothing; the token at t + d (targets[t + d - 1]) is an input.
TEST_F(NnTest, MtpHeadsNeverSeeTheirTarget) {
  nn::GptConfig c = tiny_code();
  c.mtp_weights = {0.5, 0.25};
  NamedTensors p = train::make_gpt_init(c)(Scalar(8.0));
  const int64_t B = 1, T = c.seq, t = 2;
  auto losses = compile(
      "mtp_at", [c](const NamedTensors& q, const Tensor& x, const Tensor& y, const Tensor& m) {
        Tensor pos = broadcast_to(iota({1, x.shape()[1]}, 1), x.shape());
        nn::GptLosses l = nn::gpt_losses(c, q, x, y, m, pos, full(x.shape(), 0.0, DType::i64));
        return std::pair<Tensor, Tensor>{l.mtp_nll[0], l.mtp_nll[1]};
      });
  for (int64_t d = 1; d <= 2; ++d) {
    Array mask(DType::f32, {B, T});
    mask.set_f64(t + d, 1.0);  // mtp_live(mask, d)[t] = mask[t + d]: only position t counts
    Array tokens(DType::i64, {B, T}), targets(DType::i64, {B, T});
    for (int64_t i = 0; i < T; ++i) {
      tokens.set_i64(i, (3 * i + 1) % c.vocab);
      targets.set_i64(i, (3 * i + 4) % c.vocab);
    }
    auto nll = [&](const Array& x, const Array& y) {
      auto [one, two] = losses(p, Tensor(x), Tensor(y), Tensor(mask));
      return static_cast<double>((d == 1 ? one : two).to_f32()[0]);
    };
    double total = 0;
    for (int64_t v = 0; v < c.vocab; ++v) {
      Array y = targets.clone();
      y.set_i64(t + d, v);
      total += std::exp(-nll(tokens, y));
    }
    EXPECT_NEAR(total, 1.0, 1e-4) << "depth " << d;
    const double base = nll(tokens, targets);
    Array later_x = tokens.clone(), later_y = targets.clone();
    for (int64_t i = t + d + 1; i < T; ++i) {
      later_x.set_i64(i, (later_x.get_i64(i) + 7) % c.vocab);
      later_y.set_i64(i, (later_y.get_i64(i) + 11) % c.vocab);
    }
    EXPECT_EQ(nll(later_x, later_y), base) << "depth " << d;
    Array input = targets.clone();
    input.set_i64(t + d - 1, (input.get_i64(t + d - 1) + 5) % c.vocab);
    EXPECT_NE(nll(tokens, input), base) << "depth " << d;
  }
}

// The layer plan: the shortest block repeating over the whole stack is scanned; a stack that
// is not one repeated block scans each run of one kind and says why in one line.
TEST_F(NnTest, LayerPlanScansRepeatedBlocksAndSaysWhy) {
  nn::GptConfig dense = nn::gpt_preset("code-s");
  nn::LayerPlan a = nn::layer_plan(dense, 0, 4);
  ASSERT_EQ(a.runs.size(), 1u);
  EXPECT_EQ(a.runs[0].period, 1);
  EXPECT_EQ(a.runs[0].repeats, 4);
  EXPECT_EQ(a.why, "scan: layers 0..3 as 4 iterations of one 1-layer body [dense]");
  nn::LayerPlan b = nn::layer_plan(nn::gpt_preset("code-moe-s"), 0, 4);
  ASSERT_EQ(b.runs.size(), 1u);
  EXPECT_EQ(b.runs[0].period, 2);
  EXPECT_EQ(b.why, "scan: layers 0..3 as 2 iterations of one 2-layer body [dense, MoE]");
  nn::GptConfig mixed = dense;
  mixed.layers = 5;
  mixed.moe_every = 3;  // dense dense MoE dense dense
  nn::LayerPlan m = nn::layer_plan(mixed, 0, 5);
  ASSERT_EQ(m.runs.size(), 3u);
  EXPECT_EQ(m.runs[0].repeats, 2);
  EXPECT_EQ(m.runs[1].repeats, 1);
  EXPECT_EQ(m.runs[2].first, 3);
  EXPECT_EQ(m.why,
            "scan: layers 0..4 are not one repeated block ([dense, dense, MoE, dense, dense]); "
            "scanned: 0..1 (2 x [dense]), 3..4 (2 x [dense]); unrolled: 2 ([MoE])");
  mixed.moe_every = 2;  // an odd stack of [dense, MoE] pairs: the pairs scan, the last unrolls
  nn::LayerPlan odd = nn::layer_plan(mixed, 0, 5);
  ASSERT_EQ(odd.runs.size(), 2u);
  EXPECT_EQ(odd.runs[0].period, 2);
  EXPECT_EQ(odd.runs[0].repeats, 2);
  EXPECT_EQ(odd.why,
            "scan: layers 0..4 are not one repeated block ([dense, MoE, dense, MoE, dense]); "
            "scanned: 0..3 (2 x [dense, MoE]); unrolled: 4 ([dense])");
}

// Scanning the stack computes what the unrolled stack computes: losses, MoE counters and every
// gradient, for a dense stack, a [dense, MoE] body and a mixed stack (scanned runs plus
// unrolled layers).
TEST_F(NnTest, ScannedStackEqualsUnrolled) {
  struct Case {
    int64_t layers, moe_every;
  };
  for (const Case& k : {Case{3, 0}, Case{4, 2}, Case{5, 3}, Case{5, 2}}) {
    nn::GptConfig c = tiny_code();
    c.layers = k.layers;
    c.moe_every = k.moe_every;
    c.moe.hidden = 8;
    c.mtp_weights = {0.25};
    NamedTensors p = train::make_gpt_init(c)(Scalar(8.0));
    auto program = [](nn::GptConfig config) {
      return compile("losses", [config](const NamedTensors& q, const Tensor& x, const Tensor& y) {
        nn::GptLosses parts;
        auto fn = [&](const NamedTensors& r) {
          const int64_t B = x.shape()[0], T = x.shape()[1];
          parts = nn::gpt_losses(config, r, x, y, full(x.shape(), 1.0),
                                 broadcast_to(iota({1, T}, 1), {B, T}),
                                 full(x.shape(), 0.0, DType::i64));
          return parts.nll + parts.mtp_nll[0] + parts.aux_loss;
        };
        auto [value, g] = value_and_grad(fn)(q);
        std::vector<Tensor> extra = {parts.aux_loss};
        if (parts.moe_load.defined())
          extra.insert(extra.end(), {parts.moe_load, parts.moe_dropped});
        return std::tuple<Tensor, NamedTensors, std::vector<Tensor>>{value, g, extra};
      });
    };
    nn::GptConfig scanned = c;
    scanned.layout.scanned = true;
    auto unrolled_fn = program(c);
    auto scanned_fn = program(scanned);
    auto [l1, g1, e1] = unrolled_fn(p, tokens_for(c, 1), tokens_for(c, 4));
    auto [l2, g2, e2] = scanned_fn(p, tokens_for(c, 1), tokens_for(c, 4));
    const std::string what = fmt::format("layers {} moe_every {}", k.layers, k.moe_every);
    EXPECT_NEAR(l2.item(), l1.item(), 1e-4 * std::abs(l1.item())) << what;
    ASSERT_EQ(e1.size(), e2.size()) << what;
    for (size_t i = 0; i < e1.size(); ++i) {
      EXPECT_EQ(e2[i].shape(), e1[i].shape()) << what;
      std::vector<float> a = e1[i].to_f32(), b = e2[i].to_f32();
      for (size_t j = 0; j < a.size(); ++j)
        EXPECT_NEAR(b[j], a[j], 1e-5 + 1e-4 * std::abs(a[j])) << what;
    }
    for (const auto& [name, t] : g1) {
      std::vector<float> a = t.to_f32(), b = g2.at(name).to_f32();
      for (size_t j = 0; j < a.size(); ++j) {
        ASSERT_NEAR(b[j], a[j], 1e-5 + 1e-3 * std::abs(a[j]))
            << what << " " << name << "[" << j << "]";
      }
    }
    // Fed stacked parameters, the same values and gradients (which come out stacked).
    auto [l3, g3, e3] =
        scanned_fn(nn::stack_layer_params(scanned, p), tokens_for(c, 1), tokens_for(c, 4));
    EXPECT_NEAR(l3.item(), l1.item(), 1e-4 * std::abs(l1.item())) << what;
    NamedTensors g3_layers = nn::unstack_layer_params(scanned, g3);
    ASSERT_EQ(g3_layers.size(), g1.size()) << what;
    for (const auto& [name, t] : g1) {
      std::vector<float> a = t.to_f32(), b = g3_layers.at(name).to_f32();
      for (size_t j = 0; j < a.size(); ++j) {
        ASSERT_NEAR(b[j], a[j], 1e-5 + 1e-3 * std::abs(a[j])) << what << " stacked " << name;
      }
    }
    // The scanned program holds each distinct block once: its size does not follow the depth.
    EXPECT_LT(scanned_fn.programs()[0]->graph.size(), unrolled_fn.programs()[0]->graph.size())
        << what;
  }
}

// With scan and the parameters stored stacked, a 2-layer and a 12-layer stack trace to
// programs of the same size; fed per-layer parameters, only the stacking grows with depth.
TEST_F(NnTest, ScannedProgramDoesNotGrowWithDepth) {
  auto nodes = [](int64_t layers, bool scan, bool stacked) {
    nn::GptConfig c = tiny_code();
    c.layers = layers;
    c.layout.scanned = scan;
    auto f = compile("loss", [c](const NamedTensors& q, const Tensor& x, const Tensor& y) {
      return value_and_grad(
          [&](const NamedTensors& r) { return nn::gpt_loss(c, r, x, y, full(x.shape(), 1.0)); })(q);
    });
    NamedTensors p = train::zeros_like_params(c);
    f.prepare(stacked ? nn::stack_layer_params(c, p) : p, tokens_for(c, 0), tokens_for(c, 1));
    return static_cast<int64_t>(f.programs()[0]->graph.size());
  };
  EXPECT_EQ(nodes(12, true, true), nodes(2, true, true));
  const int64_t unrolled = nodes(12, false, false) - nodes(2, false, false);
  const int64_t per_layer = nodes(12, true, false) - nodes(2, true, false);
  EXPECT_GT(per_layer, 0);
  EXPECT_LT(per_layer * 4, unrolled) << per_layer << " vs " << unrolled;
}

// Stacked storage round-trips, and only the scanned runs' parameters are stacked.
TEST_F(NnTest, StackedLayerParamsRoundTrip) {
  nn::GptConfig c = tiny_code();
  c.layers = 5;
  c.moe_every = 3;  // dense dense MoE dense dense: runs 0..1 and 3..4 scanned, 2 unrolled
  c.moe.hidden = 8;
  c.layout.scanned = true;
  NamedTensors p = train::make_gpt_init(c)(Scalar(2.0));
  NamedTensors s = nn::stack_layer_params(c, p);
  EXPECT_EQ(s.at("scan.0.0.attn.c_attn.weight").shape()[0], 2);
  EXPECT_EQ(
      s.at("scan.3.0.mlp.c_fc.weight").shape(),
      (Shape{2, p.at("h.3.mlp.c_fc.weight").shape()[0], p.at("h.3.mlp.c_fc.weight").shape()[1]}));
  EXPECT_EQ(s.count("h.0.ln_1.weight"), 0u);
  EXPECT_EQ(s.count("h.2.moe.router.weight"), 1u);
  NamedTensors back = nn::unstack_layer_params(c, s);
  ASSERT_EQ(back.size(), p.size());
  for (const auto& [name, t] : p) EXPECT_TRUE(back.at(name).array().same_bytes(t.array())) << name;
  c.layout.scanned = false;
  EXPECT_EQ(nn::stack_layer_params(c, p).size(), p.size());
}

}  // namespace
}  // namespace keel

namespace keel {
namespace {

// ---- a stack of attention blocks scanned over stacked per-layer weights ----------------------

constexpr int64_t kB = 2, kT = 4, kC = 8, kH = 2, kD = 4, kL = 3;
using Layer = std::map<std::string, Tensor>;

Tensor block_rows(const Tensor& qkv, int64_t part) {
  Tensor t = slice(qkv, {0, 0, part * kC}, {kB, kT, (part + 1) * kC});
  return transpose(reshape(t, {kB, kT, kH, kD}), {0, 2, 1, 3});
}

// Pre-norm attention and MLP, each with a residual: x [B,T,C] -> [B,T,C].
Tensor attention_block(const Tensor& x, const Layer& w, const Tensor& doc) {
  Tensor qkv = matmul(nn::rms_norm(x, w.at("g1")), w.at("wqkv"));
  Tensor a = nn::attention(block_rows(qkv, 0), block_rows(qkv, 1), block_rows(qkv, 2), doc);
  Tensor x1 = x + matmul(reshape(transpose(a, {0, 2, 1, 3}), {kB, kT, kC}), w.at("wo"));
  return x1 + matmul(nn::gelu(matmul(nn::rms_norm(x1, w.at("g2")), w.at("w1"))), w.at("w2"));
}

Tensor stack_loss(const Layer& stacked, const Tensor& x0, const Tensor& target, bool scanned) {
  // Two documents per row: the fused attention op reads the ids as a loop-invariant const.
  Tensor second = ge(iota({1, kT}, 1), full({}, 2.0, DType::i64));  // positions 2, 3
  Tensor doc = cast(broadcast_to(second, {kB, kT}), DType::i32);
  Tensor x = x0;
  if (scanned) {
    auto [xf, ys] = scan_tree(
        [](const Tensor& c, const Layer& w, const std::vector<Tensor>& k) {
          return std::make_pair(attention_block(c, w, k[0]), std::vector<Tensor>{});
        },
        x0, stacked, std::vector<Tensor>{doc});
    x = xf;
  } else {
    for (int64_t i = 0; i < kL; ++i) {
      Layer w;
      for (const auto& [name, t] : stacked) {
        Shape lim = t.shape(), start(t.rank(), 0), one = t.shape();
        start[0] = i;
        lim[0] = i + 1;
        one.erase(one.begin());
        w[name] = reshape(slice(t, start, lim), one);
      }
      x = attention_block(x, w, doc);
    }
  }
  return sum(x * target);
}

Tensor randn(Shape s, uint32_t seed, double scale) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, static_cast<float>(scale));
  std::vector<float> v(static_cast<size_t>(numel(s)));
  for (float& f : v) f = d(rng);
  return Tensor(Array::from_f32(s, v));
}

Layer stacked_weights() {
  Layer w;
  w["g1"] = Tensor(Array::full({kL, kC}, 1.0));
  w["g2"] = Tensor(Array::full({kL, kC}, 1.0));
  w["wqkv"] = randn({kL, kC, 3 * kC}, 1, 0.3);
  w["wo"] = randn({kL, kC, kC}, 2, 0.3);
  w["w1"] = randn({kL, kC, 2 * kC}, 3, 0.3);
  w["w2"] = randn({kL, 2 * kC, kC}, 4, 0.3);
  return w;
}

auto stack_program(bool scanned, CompileOptions o = {}) {
  return compile(
      scanned ? "scanned_stack" : "unrolled_stack",
      [scanned](const Layer& w, const Tensor& x, const Tensor& target) {
        return value_and_grad([&](const Layer& q) { return stack_loss(q, x, target, scanned); })(w);
      },
      o);
}

TEST(ScanStack, AttentionBlocksScannedEqualTheUnrolledStackOnRefAndCpu) {
  const Layer w = stacked_weights();
  const Tensor x = randn({kB, kT, kC}, 5, 1.0), target = randn({kB, kT, kC}, 6, 1.0);
  auto [loss_u, grads_u] = stack_program(false)(w, x, target);
  auto [loss_s, grads_s] = stack_program(true)(w, x, target);
  testing_support::TempDir dir("scan_stack");
  auto [loss_c, grads_c] = stack_program(true, {testing_support::cpu_jit(dir)})(w, x, target);
  EXPECT_NEAR(loss_s.item(), loss_u.item(), 1e-4 * std::abs(loss_u.item()) + 1e-4);
  EXPECT_NEAR(loss_c.item(), loss_u.item(), 1e-4 * std::abs(loss_u.item()) + 1e-4);
  for (const auto& [name, g] : grads_u) {
    const std::vector<float> want = g.to_f32(), got = grads_s.at(name).to_f32(),
                             cpu = grads_c.at(name).to_f32();
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < want.size(); ++i) {
      EXPECT_NEAR(got[i], want[i], 1e-4 + 1e-3 * std::abs(want[i])) << name << "[" << i << "]";
      EXPECT_NEAR(cpu[i], want[i], 1e-3 + 1e-3 * std::abs(want[i])) << name << "[" << i << "]";
    }
  }
}

}  // namespace
}  // namespace keel
