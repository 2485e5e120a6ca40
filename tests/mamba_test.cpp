// The Mamba-2 mixer (nn/mamba.h): the chunked algorithm against the plain sequential recurrence
// at several chunk sizes, packed documents that never see each other, finite-difference
// gradients, extreme decays, one program for any document layout, and the compiled CPU program
// against the reference interpreter.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <random>
#include <set>

#include "autodiff/value_and_grad.h"
#include "config_refusal.h"
#include "cpu_jit.h"
#include "grad_check.h"
#include "ir/error.h"
#include "nn/gpt.h"
#include "nn/layer_stack.h"
#include "nn/mamba.h"
#include "scan_equality.h"
#include "trace/compile.h"
#include "train/gpt_step.h"

namespace keel {
namespace {

constexpr int64_t B = 2, T = 12, C = 8;

nn::MambaConfig small(int64_t chunk) {
  nn::MambaConfig m;
  m.state = 4;
  m.head_dim = 4;
  m.expand = 2;
  m.conv = 3;
  m.chunk = chunk;
  return m;
}

// Random weights; the decays' parameters as Mamba-2 draws them (A in [1, 4], dt around 0.1 to
// 1), shifted by `dt_shift` to make the decays stronger.
NamedTensors random_params(const nn::MambaConfig& m, uint32_t seed, double dt_shift = 0) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 0.4f);
  std::uniform_real_distribution<float> uniform(0.0f, 1.0f);
  NamedTensors p;
  for (const auto& [name, shape] : nn::mamba_param_shapes(m, "mamba", C)) {
    std::vector<float> v(static_cast<size_t>(numel(shape)));
    for (float& x : v) {
      if (name.ends_with("A_log")) {
        x = std::log(1.0f + 3.0f * uniform(rng));
      } else if (name.ends_with("dt_bias")) {
        x = -1.0f + uniform(rng) + static_cast<float>(dt_shift);
      } else if (name.ends_with("ln_y.weight") || name.ends_with(".D")) {
        x = 1.0f + 0.2f * normal(rng);
      } else {
        x = normal(rng);
      }
    }
    p[name] = Tensor(Array::from_f32(shape, v));
  }
  return p;
}

Tensor random_input(uint32_t seed, int64_t length = T) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> v(static_cast<size_t>(B * length * C));
  for (float& x : v) x = normal(rng);
  return Tensor(Array::from_f32({B, length, C}, v));
}

// Row 0 packs documents of 5 and 7 positions; row 1 starts 3 positions into its one document.
struct Layout {
  Array positions{DType::i64, {B, T}}, doc_ids{DType::i64, {B, T}};
};
Layout packed() {
  Layout l;
  for (int64_t t = 0; t < T; ++t) {
    l.positions.set_i64(t, t < 5 ? t : t - 5);
    l.doc_ids.set_i64(t, t < 5 ? 0 : 1);
    l.positions.set_i64(T + t, t + 3);
    l.doc_ids.set_i64(T + t, 0);
  }
  return l;
}

auto mixer_program(const nn::MambaConfig& m, bool sequential, CompileOptions options = {}) {
  return compile(
      sequential ? "mamba_sequential" : "mamba_chunked",
      [m, sequential](const NamedTensors& p, const Tensor& u, const Tensor& pos,
                      const Tensor& doc) {
        return sequential ? nn::mamba_mixer_sequential(m, p, "mamba", u, pos, doc)
                          : nn::mamba_mixer(m, p, "mamba", u, pos, doc);
      },
      std::move(options));
}

double worst_difference(const std::vector<float>& a, const std::vector<float>& b) {
  EXPECT_EQ(a.size(), b.size());
  double worst = 0;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) {
    worst = std::max(worst, std::abs(static_cast<double>(a[i]) - b[i]));
  }
  return worst;
}

// Chunks of 1 (the recurrence itself), 4 and 5 (a document boundary inside a chunk, a chunk
// carried across one), 12 (one chunk) and 16 (padded past the row) give the sequential
// recurrence's values on the reference interpreter.
TEST(Mamba, ChunkedEqualsTheSequentialRecurrenceAtEveryChunkSize) {
  const Layout l = packed();
  NamedTensors p = random_params(small(4), 1);
  Tensor u = random_input(2);
  const std::vector<float> want =
      mixer_program(small(4), true)(p, u, Tensor(l.positions), Tensor(l.doc_ids)).to_f32();
  double scale = 0;
  for (float v : want) scale = std::max(scale, static_cast<double>(std::abs(v)));
  ASSERT_GT(scale, 0.1);
  for (int64_t chunk : {1, 4, 5, 12, 16}) {
    const std::vector<float> got =
        mixer_program(small(chunk), false)(p, u, Tensor(l.positions), Tensor(l.doc_ids)).to_f32();
    EXPECT_LT(worst_difference(got, want), 2e-5 * scale) << "chunk " << chunk;
  }
}

// The whole mixer against a host computation written from the formula, not from nn/mamba.cpp:
// the projection's columns in the order z, x, B, C, dt; the convolution's last tap on the current
// position; softplus; the recurrence restarting per document; D; RMSNorm(y * silu(z)); out_proj.
TEST(Mamba, MatchesAHostComputationOfTheFormula) {
  nn::MambaConfig m;
  m.state = 2;
  m.head_dim = 2;
  m.expand = 1;
  m.conv = 2;
  m.chunk = 2;
  constexpr int64_t L = 5, W = 4, I = 4, N = 2, H = 2, P = 2, K = 2;
  NamedTensors p;
  std::mt19937 rng(21);
  std::normal_distribution<float> normal(0.0f, 0.5f);
  std::map<std::string, std::vector<float>> host;
  for (const auto& [name, shape] : nn::mamba_param_shapes(m, "mamba", W)) {
    std::vector<float>& v = host[name];
    v.resize(static_cast<size_t>(numel(shape)));
    for (float& x : v) x = normal(rng);
    p[name] = Tensor(Array::from_f32(shape, v));
  }
  std::vector<float> u(L * W);
  for (float& x : u) x = normal(rng);
  Array pos(DType::i64, {1, L}), doc(DType::i64, {1, L});
  for (int64_t t = 0; t < L; ++t) {  // documents of 3 and 2 positions
    pos.set_i64(t, t < 3 ? t : t - 3);
    doc.set_i64(t, t < 3 ? 0 : 1);
  }
  const std::vector<float> got =
      compile("mamba_small",
              [m](const NamedTensors& q, const Tensor& x, const Tensor& ps, const Tensor& ds) {
                return nn::mamba_mixer(m, q, "mamba", x, ps, ds);
              })(p, Tensor(Array::from_f32({1, L, W}, u)), Tensor(pos), Tensor(doc))
          .to_f32();
  const auto& in = host["mamba.in_proj.weight"];  // [W, 2I + 2N + H]
  const int64_t cols = 2 * I + 2 * N + H;
  std::vector<std::vector<float>> proj(L, std::vector<float>(cols, 0.0f));
  for (int64_t t = 0; t < L; ++t) {
    for (int64_t j = 0; j < cols; ++j) {
      for (int64_t c = 0; c < W; ++c) proj[t][j] += u[t * W + c] * in[c * cols + j];
    }
  }
  auto silu = [](float v) { return v / (1.0f + std::exp(-v)); };
  const int64_t F = I + 2 * N;  // x, B, C: convolved
  std::vector<std::vector<float>> xbc(L, std::vector<float>(F));
  for (int64_t t = 0; t < L; ++t) {
    for (int64_t f = 0; f < F; ++f) {
      float acc = host["mamba.conv.bias"][f];
      for (int64_t k = 0; k < K; ++k) {
        const int64_t back = K - 1 - k;  // the last tap reads the position itself
        if (pos.get_i64(t) >= back)
          acc += host["mamba.conv.weight"][k * F + f] * proj[t - back][I + f];
      }
      xbc[t][f] = silu(acc);
    }
  }
  std::vector<float> state(H * P * N, 0.0f), want(L * W, 0.0f);
  for (int64_t t = 0; t < L; ++t) {
    if (pos.get_i64(t) == 0) std::fill(state.begin(), state.end(), 0.0f);
    std::vector<float> y(I);
    for (int64_t h = 0; h < H; ++h) {
      const float raw = proj[t][2 * I + 2 * N + h] + host["mamba.dt_bias"][h];
      const float dt = std::log1p(std::exp(raw));
      const float decay = std::exp(-dt * std::exp(host["mamba.A_log"][h]));
      for (int64_t q = 0; q < P; ++q) {
        const float x = xbc[t][h * P + q];
        float out = 0;
        for (int64_t n = 0; n < N; ++n) {
          float& s = state[(h * P + q) * N + n];
          s = decay * s + dt * x * xbc[t][I + n];
          out += s * xbc[t][I + N + n];
        }
        y[h * P + q] = out + host["mamba.D"][h] * x;
      }
    }
    double ms = 0;
    for (int64_t i = 0; i < I; ++i) {
      y[i] *= silu(proj[t][i]);
      ms += y[i] * y[i];
    }
    const float scale = 1.0f / std::sqrt(static_cast<float>(ms / I) + 1e-6f);
    for (int64_t c = 0; c < W; ++c) {
      for (int64_t i = 0; i < I; ++i) {
        want[t * W + c] +=
            y[i] * scale * host["mamba.ln_y.weight"][i] * host["mamba.out_proj.weight"][i * W + c];
      }
    }
  }
  for (int64_t i = 0; i < L * W; ++i) EXPECT_NEAR(got[i], want[i], 1e-4) << i;
}

// A document reads nothing of another: changing the first document's input changes no bit of
// the second's output, and the second document computes what it computes alone.
TEST(Mamba, PackedDocumentsNeverSeeEachOther) {
  const Layout l = packed();
  NamedTensors p = random_params(small(4), 3);
  Tensor u = random_input(4);
  auto f = mixer_program(small(4), false);
  const std::vector<float> base = f(p, u, Tensor(l.positions), Tensor(l.doc_ids)).to_f32();
  Array other = u.array().clone();
  for (int64_t i = 0; i < 5 * C; ++i) other.set_f64(i, other.get_f64(i) * -3.0 + 1.0);
  const std::vector<float> changed =
      f(p, Tensor(other), Tensor(l.positions), Tensor(l.doc_ids)).to_f32();
  for (int64_t i = 0; i < 5 * C; ++i) EXPECT_NE(changed[i], base[i]) << i;
  for (int64_t i = 5 * C; i < 2 * T * C; ++i) ASSERT_EQ(changed[i], base[i]) << i;
  // The second document alone at the start of a row (the rest of the row a third document).
  Array alone = u.array().clone(), pos(DType::i64, {B, T}), doc(DType::i64, {B, T});
  for (int64_t t = 0; t < T; ++t) {
    for (int64_t c = 0; c < C; ++c) {
      alone.set_f64(t * C + c, t < 7 ? u.array().get_f64((t + 5) * C + c) : 0.5);
    }
    pos.set_i64(t, t < 7 ? t : t - 7);
    doc.set_i64(t, t < 7 ? 0 : 1);
    pos.set_i64(T + t, l.positions.get_i64(T + t));
    doc.set_i64(T + t, 0);
  }
  const std::vector<float> solo = f(p, Tensor(alone), Tensor(pos), Tensor(doc)).to_f32();
  for (int64_t t = 0; t < 7; ++t) {
    for (int64_t c = 0; c < C; ++c) {
      EXPECT_NEAR(solo[t * C + c], base[(t + 5) * C + c], 1e-5) << "t " << t;
    }
  }
}

// Gradients of sum(y * w) through the chunked algorithm agree with central differences and
// with the sequential recurrence's gradients, for every parameter and the input.
TEST(Mamba, GradientsMatchFiniteDifferencesAndTheRecurrence) {
  const Layout l = packed();
  NamedTensors p = random_params(small(5), 5);
  p["u"] = random_input(6);
  const Tensor w = random_input(7);
  auto program = [&](bool sequential) {
    return compile(sequential ? "mamba_seq_vg" : "mamba_vg",
                   [sequential](const NamedTensors& q, const Tensor& weight, const Tensor& pos,
                                const Tensor& doc) {
                     auto fn = [&](const NamedTensors& r) {
                       NamedTensors params = r;
                       const Tensor u = params.at("u");
                       Tensor y =
                           sequential
                               ? nn::mamba_mixer_sequential(small(5), params, "mamba", u, pos, doc)
                               : nn::mamba_mixer(small(5), params, "mamba", u, pos, doc);
                       return sum(y * weight);
                     };
                     return value_and_grad(fn)(q);
                   });
  };
  auto chunked = program(false);
  auto [loss, grads] = chunked(p, w, Tensor(l.positions), Tensor(l.doc_ids));
  auto [loss_seq, grads_seq] = program(true)(p, w, Tensor(l.positions), Tensor(l.doc_ids));
  EXPECT_NEAR(loss.item(), loss_seq.item(), 1e-4 * std::abs(loss_seq.item()) + 1e-5);
  std::vector<std::string> names;
  for (const auto& [name, g] : grads) {
    names.push_back(name);
    const std::vector<float> a = g.to_f32(), b = grads_seq.at(name).to_f32();
    double scale = 0;
    for (float v : b) scale = std::max(scale, static_cast<double>(std::abs(v)));
    EXPECT_LT(worst_difference(a, b), 1e-4 * scale + 1e-6) << name;
  }
  testing_support::expect_gradients_match_fd(
      p, grads, names,
      [&](const NamedTensors& q) {
        return chunked(q, w, Tensor(l.positions), Tensor(l.doc_ids)).first.item();
      },
      3e-3, 3e-2);
}

// Strong decays (dt near 5, A up to 4: a log-decay of -20 per position) over 64 positions in
// chunks of 16 stay finite and equal the recurrence: the masked entries never reach exp as an
// infinity.
TEST(Mamba, ExtremeDecaysStayFiniteAndExact) {
  constexpr int64_t L = 64;
  Array pos(DType::i64, {B, L}), doc(DType::i64, {B, L});
  for (int64_t i = 0; i < B * L; ++i) {
    pos.set_i64(i, i % L % 20);  // documents of 20 positions
    doc.set_i64(i, i % L / 20);
  }
  NamedTensors p = random_params(small(16), 8, 6.0);
  Tensor u = random_input(9, L);
  const std::vector<float> want =
      mixer_program(small(16), true)(p, u, Tensor(pos), Tensor(doc)).to_f32();
  const std::vector<float> got =
      mixer_program(small(16), false)(p, u, Tensor(pos), Tensor(doc)).to_f32();
  for (size_t i = 0; i < got.size(); ++i) ASSERT_TRUE(std::isfinite(got[i])) << i;
  double scale = 0;
  for (float v : want) scale = std::max(scale, static_cast<double>(std::abs(v)));
  EXPECT_LT(worst_difference(got, want), 2e-5 * scale);
  // The gradient too: a masked decay that reached exp as an infinity would give NaN here.
  auto grads =
      compile("mamba_extreme_vg",
              [](const NamedTensors& q, const Tensor& x, const Tensor& ps, const Tensor& ds) {
                return value_and_grad([&](const NamedTensors& r) {
                  return sum(nn::mamba_mixer(small(16), r, "mamba", x, ps, ds));
                })(q);
              })(p, u, Tensor(pos), Tensor(doc))
          .second;
  for (const auto& [name, g] : grads) {
    for (float v : g.to_f32()) ASSERT_TRUE(std::isfinite(v)) << name;
  }
}

// Any document layout runs one program; the CPU backend's program equals the interpreter's.
TEST(Mamba, OneProgramForAnyLayoutAndTheCpuEqualsTheReference) {
  NamedTensors p = random_params(small(4), 10);
  Tensor u = random_input(11);
  auto f = mixer_program(small(4), false);
  Layout one_doc;  // one document per row
  for (int64_t i = 0; i < B * T; ++i) {
    one_doc.positions.set_i64(i, i % T);
    one_doc.doc_ids.set_i64(i, 0);
  }
  const Layout l = packed();
  std::set<std::vector<float>> outputs;
  for (const Layout* layout : {&l, static_cast<const Layout*>(&one_doc)}) {
    outputs.insert(f(p, u, Tensor(layout->positions), Tensor(layout->doc_ids)).to_f32());
  }
  EXPECT_EQ(outputs.size(), 2u);
  EXPECT_EQ(f.stats().traces, 1);
  testing_support::TempDir dir("mamba_cpu");
  CompileOptions on_cpu;
  on_cpu.jit = testing_support::cpu_jit(dir);
  const std::vector<float> cpu =
      mixer_program(small(4), false, on_cpu)(p, u, Tensor(l.positions), Tensor(l.doc_ids)).to_f32();
  const std::vector<float> ref = f(p, u, Tensor(l.positions), Tensor(l.doc_ids)).to_f32();
  EXPECT_LT(worst_difference(cpu, ref), 1e-4);
}

nn::GptConfig mamba_model() {
  nn::GptConfig c = nn::GptConfig::from_json(
      R"({"name": "code-s", "layers": 4, "width": 16, "heads": 2, "kv_heads": 1,
          "mlp_hidden": 24, "seq": 8, "batch": 2, "mamba_layers": [1, 3],
          "mamba": {"state": 4, "head_dim": 8, "expand": 2, "conv": 3, "chunk": 4}})",
      "m.json");
  return c;
}

// In a model: Mamba-2 layers replace attention (no attention weights), their decays start as
// Mamba-2 draws them, the JSON round-trips, and a scanned stack of [dense, Mamba + dense] pairs
// equals the unrolled one, loss and gradients, on packed rows.
TEST(Mamba, LayersOfAModelInitializeAndScanLikeTheUnrolledStack) {
  const nn::GptConfig c = mamba_model();
  EXPECT_EQ(nn::GptConfig::from_json(c.to_json(), "again").to_json(), c.to_json());
  std::set<std::string> names;
  for (const auto& [name, shape] : nn::gpt_param_shapes(c)) names.insert(name);
  EXPECT_TRUE(names.count("h.1.mamba.in_proj.weight"));
  EXPECT_FALSE(names.count("h.1.attn.c_attn.weight"));
  EXPECT_TRUE(names.count("h.2.attn.c_attn.weight"));
  EXPECT_EQ(nn::layer_kinds(c, 0, 4), "dsds");
  NamedTensors p = train::make_gpt_init(c)(Scalar(4.0));
  for (float a : p.at("h.1.mamba.A_log").to_f32()) {
    EXPECT_GE(a, 0.0f);
    EXPECT_LE(a, std::log(16.0f));
  }
  for (float b : p.at("h.3.mamba.dt_bias").to_f32()) {
    const float dt = std::log1p(std::exp(b));
    EXPECT_GE(dt, 0.99e-3f);
    EXPECT_LE(dt, 0.101f);
  }
  for (float d : p.at("h.1.mamba.D").to_f32()) EXPECT_EQ(d, 1.0f);
  nn::GptConfig scanned = c;
  scanned.layout.scanned = true;
  EXPECT_EQ(nn::layer_plan(scanned, 0, 4).why,
            "scan: layers 0..3 as 2 iterations of one 2-layer body [dense, Mamba + dense]");
  testing_support::expect_scanned_equals_unrolled(c, p, 1e-4);
}

TEST(Mamba, ConfigRefusesBadFieldsByName) {
  auto refused = [](nn::MambaConfig m, int64_t width) {
    try {
      m.validate("m.json", width);
    } catch (const InputError& e) {
      return std::string(e.what());
    }
    return std::string("accepted");
  };
  EXPECT_EQ(refused(small(4), 8), "accepted");
  nn::MambaConfig m = small(4);
  m.head_dim = 5;
  EXPECT_EQ(refused(m, 8),
            "[nn] m.json: field 'mamba': 'head_dim' 5 must divide the inner channels (expand 2 x "
            "width 8 = 16)");
  m = small(0);
  EXPECT_EQ(refused(m, 8), "[nn] m.json: field 'mamba': 'chunk' must be >= 1, got 0");
  m = small(4);
  m.conv = 0;
  EXPECT_EQ(refused(m, 8), "[nn] m.json: field 'mamba': 'conv' must be in 1..16, got 0");
  auto refused_json = [](const std::string& json) {
    try {
      nn::GptConfig::from_json(json, "m.json");
    } catch (const InputError& e) {
      return std::string(e.what());
    }
    return std::string("accepted");
  };
  EXPECT_EQ(refused_json(R"({"mamba_layers": [1], "mamba": {"width": 3}})"),
            "[nn] m.json: field 'mamba': unknown field 'width'; fields: state, head_dim, expand, "
            "conv, chunk");
  EXPECT_EQ(refused_json(R"({"mamba_layers": [1, 1]})"),
            "[nn] m.json: mamba_layers must be ascending layer indices in 0..5, got 1 at 1");
  EXPECT_EQ(refused_json(R"({"mamba_layers": [0], "mamba": {"expand": 17}})"),
            "[nn] m.json: field 'mamba': 'expand' must be in 1..16, got 17");
  EXPECT_EQ(refused_json(R"({"mamba_layers": [0], "mamba": {"chunk": 1000000000}})"),
            "[nn] m.json: fields 'batch' (8) x Mamba's heads (24) x 'mamba.chunk' (1000000000) x "
            "'mamba.chunk' (1000000000): Mamba's decays within a chunk would hold more than 2^60 "
            "elements (bytes must fit int64); use smaller values");
  // Under tensor parallelism the heads rule splits the mixer by its heads and state columns
  // (tensor_parallel_test), with every layer Mamba-2's too; a size dividing neither is refused.
  nn::GptConfig split = mamba_model();
  split.kv_heads = 2;
  split.model_parallel = 2;
  EXPECT_EQ(testing_support::validate_refusal(split), "accepted");
  split.mamba_layer_ids = {0, 1, 2, 3};
  EXPECT_EQ(testing_support::validate_refusal(split), "accepted");
  split.mamba.state = 3;
  EXPECT_EQ(testing_support::validate_refusal(split),
            "[nn] m.json: h.0.mamba.in_proj.weight: dimension heads (4 Mamba-2 heads, state 3) "
            "does not split over 2 processes of mesh axis 'model'; give 'model' a size that "
            "divides both, or split the MLPs alone (sharding.rules = [\"mlp=model\"])");
  split.split_heads = false;
  EXPECT_EQ(testing_support::validate_refusal(split), "accepted");
  EXPECT_EQ(refused_json(R"({"mamba_layers": [0], "mamba": {"head_dim": 5}})"),
            "[nn] m.json: field 'mamba': 'head_dim' 5 must divide the inner channels (expand 2 x "
            "width 384 = 768)");
}

}  // namespace
}  // namespace keel
