// The MoE layer against a host re-implementation of the same routing (top-k, choice-major
// capacity, dropped choices), one program for any batch content, and finite-difference
// gradients.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <random>
#include <set>

#include "autodiff/value_and_grad.h"
#include "cpu_jit.h"
#include "grad_check.h"
#include "nn/moe.h"
#include "trace/compile.h"

namespace keel {
namespace {

class MoeTest : public ::testing::Test {
 protected:
};

constexpr int64_t B = 2, T = 5, C = 6, F = 4;

NamedTensors random_params(const nn::MoeConfig& c, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 0.5f);
  NamedTensors p;
  for (const auto& [name, shape] : nn::moe_param_shapes(c, "moe", C, F)) {
    std::vector<float> v(static_cast<size_t>(numel(shape)));
    for (float& x : v) x = normal(rng);
    p[name] = Tensor(Array::from_f32(shape, v));
  }
  return p;
}

Tensor random_input(uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> v(B * T * C);
  for (float& x : v) x = normal(rng);
  return Tensor(Array::from_f32({B, T, C}, v));
}

struct HostMoe {
  std::vector<float> y;
  std::vector<float> load;
  float dropped = 0;
};

float silu(float g) {
  return g / (1.0f + std::exp(-g));
}

// out[C] += SwiGLU expert (w1 [C, 2F] at w1, w2 [F, C] at w2) of x[C], times `scale`.
void host_expert(const float* x, const float* w1, const float* w2, float scale, float* out) {
  std::vector<float> a(F);
  for (int64_t f = 0; f < F; ++f) {
    float g = 0, u = 0;
    for (int64_t c = 0; c < C; ++c) {
      g += x[c] * w1[c * 2 * F + f];
      u += x[c] * w1[c * 2 * F + F + f];
    }
    a[f] = silu(g) * u;
  }
  for (int64_t c = 0; c < C; ++c) {
    float s = 0;
    for (int64_t f = 0; f < F; ++f) s += a[f] * w2[f * C + c];
    out[c] += scale * s;
  }
}

HostMoe host_moe(const nn::MoeConfig& cfg, const NamedTensors& p, const Tensor& x_in) {
  const int64_t N = B * T, E = cfg.experts, K = cfg.top_k, cap = nn::moe_capacity(cfg, N);
  std::vector<float> x = x_in.array().to_f32(), wr = p.at("moe.router.weight").array().to_f32();
  std::vector<float> w1 = p.at("moe.experts.c_fc.weight").array().to_f32();
  std::vector<float> w2 = p.at("moe.experts.c_proj.weight").array().to_f32();
  HostMoe h;
  h.y.assign(static_cast<size_t>(N * C), 0.0f);
  h.load.assign(static_cast<size_t>(E), 0.0f);
  std::vector<std::vector<int64_t>> choice(N);
  std::vector<std::vector<float>> gate(N);
  for (int64_t n = 0; n < N; ++n) {
    std::vector<float> logit(E), prob(E);
    for (int64_t e = 0; e < E; ++e) {
      for (int64_t c = 0; c < C; ++c) logit[e] += x[n * C + c] * wr[c * E + e];
    }
    const float top = *std::max_element(logit.begin(), logit.end());
    float z = 0;
    for (int64_t e = 0; e < E; ++e) z += prob[e] = std::exp(logit[e] - top);
    for (float& q : prob) q /= z;
    std::vector<int64_t> order(E);
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(),
                     [&](int64_t a, int64_t b) { return prob[a] > prob[b]; });
    float kept = 0;
    for (int64_t k = 0; k < K; ++k) kept += prob[order[k]];
    for (int64_t k = 0; k < K; ++k) {
      choice[n].push_back(order[k]);
      gate[n].push_back(prob[order[k]] / kept);
    }
  }
  std::vector<int64_t> used(E, 0);
  for (int64_t k = 0; k < K; ++k) {  // choice-major: all first choices, then all second
    for (int64_t n = 0; n < N; ++n) {
      const int64_t e = choice[n][k];
      h.load[e] += 1;
      if (used[e]++ >= cap) {
        h.dropped += 1;
        continue;
      }
      host_expert(&x[n * C], &w1[e * C * 2 * F], &w2[e * F * C], gate[n][k], &h.y[n * C]);
    }
  }
  if (cfg.shared_expert) {
    std::vector<float> s1 = p.at("moe.shared.c_fc.weight").array().to_f32();
    std::vector<float> s2 = p.at("moe.shared.c_proj.weight").array().to_f32();
    for (int64_t n = 0; n < N; ++n) host_expert(&x[n * C], s1.data(), s2.data(), 1.0f, &h.y[n * C]);
  }
  return h;
}

auto moe_program(const nn::MoeConfig& c, CompileOptions options = {}) {
  return compile(
      "moe",
      [c](const NamedTensors& p, const Tensor& x) {
        nn::MoeOutput o = nn::moe_ffn(c, p, "moe", x);
        return std::tuple<Tensor, Tensor, Tensor, Tensor>{o.y, o.aux_loss, o.load, o.dropped};
      },
      std::move(options));
}

TEST_F(MoeTest, CapacityComesFromConfigAndTokenCount) {
  nn::MoeConfig c;
  c.experts = 4;
  c.top_k = 2;
  c.capacity_factor = 1.25;
  EXPECT_EQ(nn::moe_capacity(c, 10), 7);  // ceil(1.25 * 10 * 2 / 4)
  c.capacity_factor = 0.01;
  EXPECT_EQ(nn::moe_capacity(c, 10), 1);
  c.capacity_factor = 100;
  EXPECT_EQ(nn::moe_capacity(c, 10), 10);
  c.top_k = 5;
  EXPECT_THROW(c.validate("cfg"), InputError);
}

// Tight capacity, so some choices are dropped: outputs and counters match the host routing.
TEST_F(MoeTest, MatchesHostRoutingWithDrops) {
  for (bool shared : {true, false}) {
    nn::MoeConfig c;
    c.experts = 4;
    c.top_k = 2;
    c.capacity_factor = 0.6;  // 3 slots per expert for 20 choices: drops are certain
    c.hidden = F;
    c.shared_expert = shared;
    NamedTensors p = random_params(c, 7);
    Tensor x = random_input(11);
    auto f = moe_program(c);
    auto [y, aux, load, dropped] = f(p, x);
    HostMoe h = host_moe(c, p, x);
    EXPECT_GT(h.dropped, 0.0f);
    EXPECT_EQ(dropped.item(), h.dropped);
    std::vector<float> got_load = load.array().to_f32();
    for (size_t e = 0; e < h.load.size(); ++e) EXPECT_EQ(got_load[e], h.load[e]) << e;
    std::vector<float> got = y.array().to_f32();
    ASSERT_EQ(got.size(), h.y.size());
    for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], h.y[i], 1e-4) << i;
    EXPECT_GT(aux.item(), 0.0);
  }
}

// Experts given per source ([processes of 'data', held, ...]) on one process run the
// expert-parallel path: the same routing and outputs as the host's; a leading dimension that is
// not the data axis's size, or experts that are not this process's share, is one error naming
// the layer and the shapes.
TEST_F(MoeTest, ExpertsGivenPerSourceRouteAsTheHostAndAreChecked) {
  nn::MoeConfig c;
  c.experts = 4;
  c.top_k = 2;
  c.capacity_factor = 0.6;
  c.hidden = F;
  NamedTensors p = random_params(c, 7);
  Tensor x = random_input(11);
  NamedTensors per_source = p;
  for (const char* name : {"moe.experts.c_fc.weight", "moe.experts.c_proj.weight"}) {
    Shape s = p.at(name).shape();
    s.insert(s.begin(), 1);
    Array a(DType::f32, s);
    std::memcpy(a.data(), p.at(name).array().data(), a.nbytes());
    per_source[name] = Tensor(a);
  }
  auto [y, aux, load, dropped] = moe_program(c)(per_source, x);
  HostMoe h = host_moe(c, p, x);
  EXPECT_EQ(dropped.item(), h.dropped);
  std::vector<float> got = y.array().to_f32();
  ASSERT_EQ(got.size(), h.y.size());
  for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], h.y[i], 1e-4) << i;
  auto run = [&](const NamedTensors& q, int64_t model) {
    return [q, x, c, model] {
      compile("moe_checked", [c, model](const NamedTensors& p, const Tensor& x) {
        return nn::moe_ffn(c, p, "moe", x, model).y;
      })(q, x);
    };
  };
  NamedTensors two = per_source;
  Shape s = two.at("moe.experts.c_fc.weight").shape();
  s[0] = 2;
  two["moe.experts.c_fc.weight"] = Tensor(Array(DType::f32, s));
  EXPECT_THAT(run(two, 1), ::testing::ThrowsMessage<InputError>(::testing::HasSubstr(
                               "moe: experts given per source must be [1, held, ...] for the 1 "
                               "processes of mesh axis 'data'")));
  EXPECT_THAT(run(p, 3), ::testing::ThrowsMessage<InputError>(::testing::HasSubstr(
                             "moe: this process holds 4 of 4 experts, which is not its share "
                             "over 3 processes of mesh axis 'model'")));
}

// The compiled CPU program routes exactly as the host does too.
TEST_F(MoeTest, CpuBackendMatchesHostRouting) {
  testing_support::TempDir dir("moe_test");
  auto jit = testing_support::cpu_jit(dir);
  nn::MoeConfig c;
  c.capacity_factor = 0.6;
  c.hidden = F;
  NamedTensors p = random_params(c, 21);
  Tensor x = random_input(22);
  auto f = moe_program(c, {jit});
  auto [y, aux, load, dropped] = f(p, x);
  HostMoe h = host_moe(c, p, x);
  EXPECT_EQ(dropped.item(), h.dropped);
  std::vector<float> got = y.array().to_f32();
  for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], h.y[i], 1e-4) << i;
}

// Batches whose tokens route differently (other loads, other drop counts) reuse one program.
TEST_F(MoeTest, DifferentContentReusesOneProgram) {
  nn::MoeConfig c;
  c.capacity_factor = 0.75;
  c.hidden = F;
  NamedTensors p = random_params(c, 3);
  auto f = moe_program(c);
  std::set<std::vector<float>> loads;
  std::set<double> drops;
  for (uint32_t s = 0; s < 6; ++s) {
    auto [y, aux, load, dropped] = f(p, random_input(100 + s));
    loads.insert(load.array().to_f32());
    drops.insert(dropped.item());
  }
  EXPECT_GT(loads.size(), 1u);
  EXPECT_GT(drops.size(), 1u);
  EXPECT_EQ(f.stats().traces, 1);
  EXPECT_EQ(f.stats().calls, 6);
}

// Gradients of a loss through routing, experts, gates and the auxiliary losses agree with
// finite differences (capacity ample, so no choice sits at the drop boundary).
TEST_F(MoeTest, GradientMatchesFiniteDifference) {
  nn::MoeConfig c;
  c.experts = 3;
  c.top_k = 2;
  c.capacity_factor = 4;
  c.hidden = F;
  c.router_z_weight = 0.1;
  c.balance_weight = 0.1;
  NamedTensors p = random_params(c, 5);
  Tensor x = random_input(9);
  auto f = compile("moe_vg", [c](const NamedTensors& q, const Tensor& xs) {
    auto fn = [&c](const NamedTensors& r, const Tensor& a) {
      nn::MoeOutput o = nn::moe_ffn(c, r, "moe", a);
      return sum(o.y * o.y) * 0.1 + o.aux_loss;
    };
    return value_and_grad(fn)(q, xs);
  });
  auto [loss, grads] = f(p, x);
  std::vector<std::string> names;
  for (const auto& [name, shape] : nn::moe_param_shapes(c, "moe", C, F)) names.push_back(name);
  testing_support::expect_gradients_match_fd(
      p, grads, names, [&](const NamedTensors& q) { return f(q, x).first.item(); }, 3e-3, 3e-2);
}

}  // namespace
}  // namespace keel
