// The n-gram memory block (nn/engram.h): its rows against a host re-implementation of the hash,
// its output against a host computation, documents that never see each other, finite-difference
// gradients, the table's gradient as a scatter-add, AdamW on rows no token touched, one program
// for any content, and the block in a model (config, scanned layers).
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
#include "nn/engram.h"
#include "nn/gpt.h"
#include "nn/layer_stack.h"
#include "optim/adamw.h"
#include "scan_equality.h"
#include "trace/compile.h"
#include "train/gpt_step.h"

namespace keel {
namespace {

constexpr int64_t B = 2, T = 12, C = 8, V = 256;

nn::EngramConfig small() {
  nn::EngramConfig e;
  e.orders = {2, 3};
  e.heads = 2;
  e.rows = 13;
  e.dim = 4;
  return e;
}

NamedTensors random_params(const nn::EngramConfig& e, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 0.5f);
  NamedTensors p;
  for (const auto& [name, shape] : nn::engram_param_shapes(e, "engram", C)) {
    std::vector<float> v(static_cast<size_t>(numel(shape)));
    for (float& x : v)
      x = name.find("ln_") != std::string::npos ? 1.0f + 0.1f * normal(rng) : normal(rng);
    p[name] = Tensor(Array::from_f32(shape, v));
  }
  return p;
}

Tensor random_stream(uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> v(B * T * C);
  for (float& x : v) x = normal(rng);
  return Tensor(Array::from_f32({B, T, C}, v));
}

// Row 0 packs a document of 5 tokens and one of 7; row 1 starts 3 tokens into a document.
struct Batch {
  Array tokens{DType::i64, {B, T}}, positions{DType::i64, {B, T}};
};

Batch packed_batch(uint32_t seed) {
  std::mt19937 rng(seed);
  Batch b;
  for (int64_t t = 0; t < T; ++t) {
    b.tokens.set_i64(t, static_cast<int64_t>(rng() % V));
    b.tokens.set_i64(T + t, static_cast<int64_t>(rng() % V));
    b.positions.set_i64(t, t < 5 ? t : t - 5);
    b.positions.set_i64(T + t, t + 3);
  }
  return b;
}

auto rows_program(const nn::EngramConfig& e) {
  return compile("engram_rows", [e](const Tensor& tokens, const Tensor& positions) {
    return nn::engram_rows(e, V, tokens, positions);
  });
}

auto block_program(const nn::EngramConfig& e) {
  return compile("engram", [e](const NamedTensors& p, const Tensor& x, const Tensor& tokens,
                               const Tensor& positions) {
    return nn::engram(e, p, "engram", x, nn::engram_rows(e, V, tokens, positions));
  });
}

// rows [B, T, G] against the host hash of each position's last n tokens, a place before its
// document (or the row) standing as `vocab`; table g's rows in [g * rows, (g + 1) * rows).
// Returns the distinct rows.
std::set<int64_t> expect_host_hash(const nn::EngramConfig& e, int64_t vocab, const Batch& b,
                                   const Array& rows) {
  const int64_t G = e.tables();
  EXPECT_EQ(rows.shape(), (Shape{B, T, G}));
  std::set<int64_t> distinct;
  for (int64_t r = 0; r < B; ++r) {
    for (int64_t t = 0; t < T; ++t) {
      for (int64_t g = 0; g < G; ++g) {
        const int64_t n = e.orders[static_cast<size_t>(g / e.heads)];
        std::vector<int64_t> last;
        for (int64_t j = n - 1; j >= 0; --j) {
          const bool inside = t - j >= 0 && b.positions.get_i64(r * T + t) >= j;
          last.push_back(inside ? b.tokens.get_i64(r * T + t - j) : vocab);
        }
        const int64_t got = rows.get_i64((r * T + t) * G + g);
        EXPECT_EQ(got, nn::engram_row(e, vocab, g, last))
            << "row " << r << " t " << t << " g " << g;
        EXPECT_GE(got, g * e.rows);
        EXPECT_LT(got, (g + 1) * e.rows);
        distinct.insert(got);
      }
    }
  }
  return distinct;
}

// Each position's rows are the host hash, and the hash spreads.
TEST(Engram, RowsAreTheHostHashAndStayInsideTheirDocument) {
  const nn::EngramConfig e = small();
  const Batch b = packed_batch(1);
  const Array rows = rows_program(e)(Tensor(b.tokens), Tensor(b.positions)).array();
  EXPECT_GT(expect_host_hash(e, V, b, rows).size(), static_cast<size_t>(e.tables() * 6));
}

// The CPU backend's integer arithmetic (its i64 division) gives the host hash too, at the
// largest vocabulary the config takes, where Horner's products come closest to 2^62.
TEST(Engram, RowsOnTheCpuBackendAreTheHostHashAtTheLargestVocab) {
  const nn::EngramConfig e = small();
  constexpr int64_t vocab = (int64_t{1} << 31) - 2;
  Batch b = packed_batch(12);
  std::mt19937_64 rng(13);
  for (int64_t i = 0; i < B * T; ++i) b.tokens.set_i64(i, static_cast<int64_t>(rng() % vocab));
  testing_support::TempDir dir("engram_cpu");
  CompileOptions on_cpu;
  on_cpu.jit = testing_support::cpu_jit(dir);
  auto f = compile(
      "engram_rows_cpu",
      [e](const Tensor& tokens, const Tensor& positions) {
        return nn::engram_rows(e, vocab, tokens, positions);
      },
      on_cpu);
  expect_host_hash(e, vocab, b, f(Tensor(b.tokens), Tensor(b.positions)).array());
}

float rms_normed(std::vector<float>& v, const std::vector<float>& w) {
  double ms = 0;
  for (float x : v) ms += static_cast<double>(x) * x;
  const float scale =
      1.0f / std::sqrt(static_cast<float>(ms / static_cast<double>(v.size())) + 1e-6f);
  for (size_t i = 0; i < v.size(); ++i) v[i] *= scale * w[i];
  return scale;
}

// The block against the same formula on the host: rows joined, gated by sigmoid(rmsnorm(x) .
// rmsnorm(e Wk) / sqrt(C)), times e Wv, added to x.
TEST(Engram, OutputIsTheGatedReadAddedToTheStream) {
  const nn::EngramConfig e = small();
  const Batch b = packed_batch(2);
  NamedTensors p = random_params(e, 3);
  Tensor x = random_stream(4);
  std::vector<float> got =
      block_program(e)(p, x, Tensor(b.tokens), Tensor(b.positions)).array().to_f32();
  Array rows = rows_program(e)(Tensor(b.tokens), Tensor(b.positions)).array();
  std::vector<float> table = p.at("engram.table").array().to_f32();
  std::vector<float> wk = p.at("engram.key.weight").array().to_f32();
  std::vector<float> wv = p.at("engram.value.weight").array().to_f32();
  std::vector<float> lq = p.at("engram.ln_q.weight").array().to_f32();
  std::vector<float> lk = p.at("engram.ln_k.weight").array().to_f32();
  std::vector<float> xs = x.array().to_f32();
  const int64_t G = e.tables(), E = G * e.dim;
  for (int64_t n = 0; n < B * T; ++n) {
    std::vector<float> read(static_cast<size_t>(E));
    for (int64_t g = 0; g < G; ++g) {
      const int64_t row = rows.get_i64(n * G + g);
      for (int64_t d = 0; d < e.dim; ++d) read[g * e.dim + d] = table[row * e.dim + d];
    }
    std::vector<float> key(C, 0.0f), value(C, 0.0f),
        query(xs.begin() + n * C, xs.begin() + (n + 1) * C);
    for (int64_t i = 0; i < E; ++i) {
      for (int64_t c = 0; c < C; ++c) {
        key[c] += read[i] * wk[i * C + c];
        value[c] += read[i] * wv[i * C + c];
      }
    }
    rms_normed(key, lk);
    rms_normed(query, lq);
    float dot = 0;
    for (int64_t c = 0; c < C; ++c) dot += query[c] * key[c];
    const float gate = 1.0f / (1.0f + std::exp(-dot / std::sqrt(static_cast<float>(C))));
    for (int64_t c = 0; c < C; ++c) {
      EXPECT_NEAR(got[n * C + c], xs[n * C + c] + gate * value[c], 1e-4) << n << " " << c;
    }
  }
}

// Another document's tokens change nothing of this one's output (bit for bit); a token changes
// the output at its own place and the next orders.back() - 1 places only.
TEST(Engram, ADocumentNeverReadsAnotherAndATokenReachesOnlyItsNGrams) {
  const nn::EngramConfig e = small();
  NamedTensors p = random_params(e, 5);
  Tensor x = random_stream(6);
  auto f = block_program(e);
  const Batch b = packed_batch(7);
  std::vector<float> base = f(p, x, Tensor(b.tokens), Tensor(b.positions)).array().to_f32();
  Batch other{b.tokens.clone(), b.positions.clone()};  // Array copies share their buffer
  for (int64_t t = 0; t < 5; ++t) other.tokens.set_i64(t, (b.tokens.get_i64(t) + 17) % V);
  std::vector<float> changed =
      f(p, x, Tensor(other.tokens), Tensor(other.positions)).array().to_f32();
  for (int64_t t = 5; t < T; ++t) {  // the second document
    for (int64_t c = 0; c < C; ++c) {
      EXPECT_EQ(changed[t * C + c], base[t * C + c]) << "second document, t " << t;
    }
  }
  Batch one{b.tokens.clone(), b.positions.clone()};
  const int64_t at = 7;  // inside the second document
  one.tokens.set_i64(at, (b.tokens.get_i64(at) + 1) % V);
  std::vector<float> moved = f(p, x, Tensor(one.tokens), Tensor(one.positions)).array().to_f32();
  for (int64_t t = 0; t < T; ++t) {
    bool differs = false;
    for (int64_t c = 0; c < C; ++c) differs |= moved[t * C + c] != base[t * C + c];
    EXPECT_EQ(differs, t >= at && t < at + e.orders.back()) << "t " << t;
  }
  // The other row of the batch is untouched by both edits.
  for (int64_t i = T * C; i < 2 * T * C; ++i) EXPECT_EQ(moved[i], base[i]);
}

// sum(y * y) / 20 of the block's output and its gradient, the stream x among the parameters.
auto value_and_grad_program(const nn::EngramConfig& e) {
  return compile("engram_vg", [e](const NamedTensors& q, const Tensor& x, const Tensor& tok,
                                  const Tensor& pos) {
    auto fn = [&](const NamedTensors& r) {
      Tensor y = nn::engram(e, r, "engram", r.at("x"), nn::engram_rows(e, V, tok, pos));
      return sum(y * y) * 0.05;
    };
    NamedTensors with_x = q;
    with_x["x"] = x;
    return value_and_grad(fn)(with_x);
  });
}

// Gradients of every parameter and of the stream agree with central differences; the table's
// gradient is the scatter-add of the rows read: exactly zero on rows no position read.
TEST(Engram, GradientsMatchFiniteDifferencesAndTheTableGetsAScatterAdd) {
  const nn::EngramConfig e = small();
  const Batch b = packed_batch(8);
  NamedTensors p = random_params(e, 9);
  Tensor x = random_stream(10);
  Tensor tok(b.tokens), pos(b.positions);
  auto f = value_and_grad_program(e);
  NamedTensors with_x = p;
  with_x["x"] = x;
  auto [loss, grads] = f(p, x, tok, pos);
  auto loss_of = [&](const NamedTensors& q) {
    NamedTensors without = q;
    Tensor xq = without.at("x");
    without.erase("x");
    return f(without, xq, tok, pos).first.item();
  };
  testing_support::expect_gradients_match_fd(
      with_x, grads,
      {"engram.key.weight", "engram.value.weight", "engram.ln_q.weight", "engram.ln_k.weight", "x"},
      loss_of, 2e-3, 2e-2);
  // The table: entries of rows read (central differences), and zero on the others.
  Array rows = rows_program(e)(tok, pos).array();
  std::set<int64_t> read;
  for (int64_t i = 0; i < rows.numel(); ++i) read.insert(rows.get_i64(i));
  Array table = p.at("engram.table").array(), grad = grads.at("engram.table").array();
  int64_t checked = 0;
  for (int64_t row = 0; row < table.shape()[0]; ++row) {
    for (int64_t d = 0; d < e.dim; ++d) {
      const int64_t i = row * e.dim + d;
      if (!read.count(row)) {
        ASSERT_EQ(grad.get_f64(i), 0.0) << "row " << row << " was not read";
        continue;
      }
      if (checked++ % 7 != 0) continue;  // a sample of the rows read
      auto at = [&](double delta) {
        Array a = table.clone();
        a.set_f64(i, a.get_f64(i) + delta);
        NamedTensors q = with_x;
        q["engram.table"] = Tensor(a);
        return loss_of(q);
      };
      const double fd = (at(1e-2) - at(-1e-2)) / 2e-2;
      EXPECT_NEAR(grad.get_f64(i), fd, 2e-3 + 2e-2 * std::abs(fd)) << "row " << row;
    }
  }
  EXPECT_GT(checked, 20);
}

// Tokens and documents of any content run one program.
TEST(Engram, AnyTokensAndDocumentsRunOneProgram) {
  const nn::EngramConfig e = small();
  NamedTensors p = random_params(e, 11);
  auto f = block_program(e);
  std::set<std::vector<float>> outputs;
  for (uint32_t s = 0; s < 4; ++s) {
    Batch b = packed_batch(20 + s);
    if (s % 2 == 1) {  // one document per row
      for (int64_t i = 0; i < B * T; ++i) b.positions.set_i64(i, i % T);
    }
    outputs.insert(f(p, random_stream(s), Tensor(b.tokens), Tensor(b.positions)).array().to_f32());
  }
  EXPECT_EQ(outputs.size(), 4u);
  EXPECT_EQ(f.stats().traces, 1);
}

// AdamW with a dense gradient, as PyTorch's AdamW: a row no token has touched yet (m = v = 0)
// does not move and is not decayed (the tables are embeddings); a row touched once goes on
// moving on its momentum in later steps that do not touch it.
TEST(Engram, AdamWLeavesUntouchedRowsAndMovesTouchedOnesOnTheirMomentum) {
  EXPECT_FALSE(optim::default_decays("h.1.engram.table", Shape{26, 4}));
  EXPECT_FALSE(optim::default_decays("scan.1.0.engram.table", Shape{2, 26, 4}));
  EXPECT_TRUE(optim::default_decays("h.1.engram.key.weight", Shape{16, 8}));
  using P = NamedTensors;
  auto update = compile("adamw", [](const P& p, const P& g, const P& m, const P& v,
                                    const std::vector<Scalar>& s) {
    optim::AdamWResult r = optim::adamw_update(p, g, m, v, {s[0], s[1], s[2], s[3], s[4], s[5]});
    return std::make_tuple(r.params, r.m, r.v);
  });
  const std::string name = "h.0.engram.table";
  std::vector<float> init = {0.5f, -0.25f, 1.0f, 2.0f, -3.0f, 0.75f};  // 3 rows of 2
  P p{{name, Tensor(Array::from_f32({3, 2}, init))}};
  P m{{name, Tensor(Array::from_f32({3, 2}, std::vector<float>(6, 0.0f)))}};
  P v = m;
  auto scalars = [](double step) {
    return std::vector<Scalar>{Scalar(1e-2), Scalar(0.9), Scalar(0.95),
                               Scalar(1e-8), Scalar(0.1), Scalar(step)};
  };
  // Step 1 reads row 1 only; step 2 reads nothing.
  const std::vector<float> row_1 = {0, 0, 0.5f, -1.0f, 0, 0};
  P g1{{name, Tensor(Array::from_f32({3, 2}, row_1))}};
  P g2{{name, Tensor(Array::from_f32({3, 2}, std::vector<float>(6, 0.0f)))}};
  auto [p1, m1, v1] = update(p, g1, m, v, scalars(1));
  auto [p2, m2, v2] = update(p1, g2, m1, v1, scalars(2));
  std::vector<float> after1 = p1.at(name).array().to_f32(), after2 = p2.at(name).array().to_f32();
  for (int64_t i : {0, 1, 4, 5}) {  // rows 0 and 2: never touched, bit for bit as they were
    EXPECT_EQ(after1[i], init[i]) << i;
    EXPECT_EQ(after2[i], init[i]) << i;
  }
  for (int64_t i : {2, 3}) {  // row 1: moved by step 1, and again by step 2 on its momentum
    EXPECT_NE(after1[i], init[i]) << i;
    EXPECT_NE(after2[i], after1[i]) << i;
    EXPECT_EQ(after2[i] - after1[i] > 0, after1[i] - init[i] > 0) << i;  // the same way
  }
}

nn::GptConfig engram_model(int64_t layers, std::vector<int64_t> engram_layers) {
  nn::GptConfig c = nn::gpt_preset("code-s");
  c.name = "code-s";
  c.layers = layers;
  c.width = 16;
  c.heads = 2;
  c.kv_heads = 1;
  c.mlp_hidden = 24;
  c.seq = 8;
  c.batch = 2;
  c.engram_layer_ids = std::move(engram_layers);
  c.engram = small();
  return c;
}

// The config: JSON round trip, the parameters of the layers listed only, and one line naming the
// field for each bad value.
TEST(Engram, ConfigListsItsLayersAndRefusesBadFieldsByName) {
  nn::GptConfig c = nn::GptConfig::from_json(
      R"({"name": "code-s", "layers": 3, "engram_layers": [1],
          "engram": {"orders": [2, 3, 4], "heads": 3, "rows": 101, "dim": 8}})",
      "m.json");
  EXPECT_EQ(c.engram_layer_ids, (std::vector<int64_t>{1}));
  EXPECT_EQ(c.engram.tables(), 9);
  EXPECT_EQ(nn::GptConfig::from_json(c.to_json(), "again").to_json(), c.to_json());
  std::set<std::string> tables;
  for (const auto& [name, shape] : nn::gpt_param_shapes(c)) {
    if (name.ends_with("engram.table")) {
      tables.insert(name);
      EXPECT_EQ(shape, (Shape{9 * 101, 8}));
    }
  }
  EXPECT_EQ(tables, (std::set<std::string>{"h.1.engram.table"}));
  // A config without the fields keeps the JSON it always had.
  EXPECT_EQ(nn::gpt_preset("code-s").to_json().find("engram"), std::string::npos);
  auto refused = [](const std::string& json) { return testing_support::config_refusal(json); };
  EXPECT_EQ(refused(R"({"layers": 2, "engram_layers": [2]})"),
            "[nn] m.json: engram_layers must be ascending layer indices in 0..1, got 2 at 0");
  EXPECT_EQ(refused(R"({"engram_layers": [1], "engram": {"orders": [3, 2]}})"),
            "[nn] m.json: field 'engram': 'orders' must be ascending, each in 2..4, got 2 at 1");
  EXPECT_EQ(refused(R"({"engram_layers": [1], "engram": {"orders": [2, 5]}})"),
            "[nn] m.json: field 'engram': 'orders' must be ascending, each in 2..4, got 5 at 1");
  EXPECT_EQ(refused(R"({"engram_layers": [1], "engram": {"heads": 17}})"),
            "[nn] m.json: field 'engram': 'heads' must be >= 1 with orders x heads <= 32 "
            "tables, got 2 x 17");
  EXPECT_EQ(refused(R"({"engram_layers": [1], "engram": {"rows": 0}})"),
            "[nn] m.json: field 'engram': 'rows' must be in 1..2147483647, got 0");
  EXPECT_EQ(refused(R"({"engram_layers": [1], "engram": {"dim": 0}})"),
            "[nn] m.json: field 'engram': 'dim' must be >= 1, got 0");
  EXPECT_EQ(refused(R"({"engram": {"size": 3}})"),
            "[nn] m.json: field 'engram': unknown field 'size'; fields: orders, heads, rows, dim");
  EXPECT_EQ(refused(R"({"vocab": 2147483647, "engram_layers": [1]})"),
            "[nn] m.json: field 'vocab' must be below 2^31 - 1 with engram_layers, got "
            "2147483647");
  EXPECT_EQ(refused(R"({"engram_layers": 1})"),
            "[nn] m.json: field 'engram_layers' must be a list of layer indices, ascending");
  // Under tensor parallelism the memory is whole on every process (tensor_parallel_test).
  nn::GptConfig split = engram_model(2, {1});
  split.kv_heads = 2;
  split.model_parallel = 2;
  EXPECT_EQ(testing_support::validate_refusal(split), "accepted");
}

// In a model: a scanned stack of [dense, n-gram memory + dense] pairs equals the unrolled one,
// loss and gradients, and the plan says what it scanned.
TEST(Engram, ScannedLayersWithMemoryEqualUnrolled) {
  nn::GptConfig c = engram_model(4, {1, 3});
  EXPECT_EQ(nn::layer_kinds(c, 0, 4), "dDdD");
  nn::GptConfig scanned = c;
  scanned.layout.scanned = true;
  EXPECT_EQ(nn::layer_plan(scanned, 0, 4).why,
            "scan: layers 0..3 as 2 iterations of one 2-layer body [dense, n-gram memory + dense]");
  NamedTensors p = train::make_gpt_init(c)(Scalar(3.0));
  NamedTensors g1 = testing_support::expect_scanned_equals_unrolled(c, p, 1e-4);
  std::vector<float> table_grad = g1.at("h.1.engram.table").array().to_f32();
  EXPECT_TRUE(std::any_of(table_grad.begin(), table_grad.end(), [](float v) { return v != 0; }));
}

}  // namespace
}  // namespace keel
