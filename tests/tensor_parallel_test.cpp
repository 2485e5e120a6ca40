// Tensor parallelism over the mesh axis "model" (issue 50, nn/tensor_parallel.h), run under
// mpirun: the mesh is model=N over N processes (tp_train_test.sh runs data x model). Each process
// computes the loss and gradients of the whole model on its own, then of its shards of the
// blocks split over "model", and compares: a row-parallel product splits its sum, so they agree
// to rounding, not bit for bit.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>

#include "autodiff/value_and_grad.h"
#include "backend/collectives.h"
#include "dist/communicator.h"
#include "nn/tensor_parallel.h"
#include "policy/resolve.h"
#include "runtime/runtime.h"
#include "tests/cpu_jit.h"
#include "trace/collectives.h"
#include "trace/compile.h"
#include "train/gpt_step.h"

namespace keel {
namespace {

using Params = std::map<std::string, Tensor>;

nn::GptConfig tiny(bool code) {
  nn::GptConfig c;
  c.vocab = 64;
  c.layers = 2;
  c.width = 32;
  c.heads = 4;
  c.seq = 16;
  c.batch = 2;
  if (code) {  // code-s's flavour: grouped-query attention, SwiGLU, RMSNorm, rotary, no biases
    c.width = 64;
    c.heads = 8;  // 2 query heads a kv head, whether each of 4 processes holds 1 kv head or 2
    c.kv_heads = 4;
    c.mlp_hidden = 48;
    c.norm = "rmsnorm";
    c.positions = "rotary";
    c.mlp = "swiglu";
    c.bias = false;
    c.mtp_weights = {0.5};
  }
  return c;
}

// Block `index` of `processes` of each part of `whole` along s.dim, joined: the shard process
// `index` holds (nn::ModelSplit).
Array host_shard(const Array& whole, const nn::ModelSplit& s, int64_t index, int64_t processes) {
  const Shape& in = whole.shape();
  const auto d = static_cast<size_t>(s.dim);
  Shape out_shape = in;
  out_shape[d] /= processes;
  Array out(whole.dtype(), out_shape);
  int64_t inner = 1;
  for (size_t i = d + 1; i < in.size(); ++i) inner *= in[i];
  std::vector<int64_t> from;  // the source index along d of each index of the shard
  int64_t start = 0;
  for (int64_t part : s.parts) {
    for (int64_t j = 0; j < part / processes; ++j)
      from.push_back(start + index * part / processes + j);
    start += part;
  }
  for (int64_t o = 0; o < out.numel(); ++o) {
    const int64_t outer = o / (inner * out_shape[d]), at = o / inner % out_shape[d];
    const int64_t rest = o % inner;
    out.set_f64(o, whole.get_f64((outer * in[d] + from[size_t(at)]) * inner + rest));
  }
  return out;
}

// A batch the same on every process: tokens, targets, mask, positions, doc_ids.
std::vector<Tensor> batch(const nn::GptConfig& c) {
  const int64_t B = c.batch, T = c.seq;
  Array tokens(DType::i64, {B, T}), targets(DType::i64, {B, T}), positions(DType::i64, {B, T});
  Array docs(DType::i64, {B, T});
  for (int64_t i = 0; i < B * T; ++i) {
    tokens.set_f64(i, double((i * 7 + 3) % c.vocab));
    targets.set_f64(i, double((i * 7 + 10) % c.vocab));
    positions.set_f64(i, double(i % T < 9 ? i % T : i % T - 9));  // two documents a row
    docs.set_f64(i, double(i % T < 9 ? 0 : 1));
  }
  return {Tensor(tokens), Tensor(targets), Tensor(Array::full({B, T}, 1.0)), Tensor(positions),
          Tensor(docs)};
}

Tensor objective(const nn::GptConfig& c, const Params& p, const std::vector<Tensor>& b) {
  nn::GptLosses l = nn::gpt_losses(c, p, b[0], b[1], b[2], b[3], b[4]);
  Tensor total = l.nll;
  for (size_t d = 0; d < l.mtp_nll.size(); ++d) total = total + c.mtp_weights[d] * l.mtp_nll[d];
  return total;
}

double max_abs(const Array& a) {
  double m = 0;
  for (int64_t i = 0; i < a.numel(); ++i) m = std::max(m, std::abs(a.get_f64(i)));
  return m;
}

// Every element of `got` within `rel` of the largest of `want`.
void expect_near(const Array& got, const Array& want, double rel, const std::string& what) {
  ASSERT_EQ(got.shape(), want.shape()) << what;
  const double tol = rel * std::max(max_abs(want), 1e-6);
  double worst = 0;
  for (int64_t i = 0; i < got.numel(); ++i) {
    worst = std::max(worst, std::abs(got.get_f64(i) - want.get_f64(i)));
  }
  EXPECT_LE(worst, tol) << what << ": off by " << worst << " (largest " << max_abs(want) << ")";
}

// Which dimensions split (sharding.rules), whether every second layer is MoE, whether the
// four layers are issue 51's hybrid: sparse attention, an n-gram memory, Mamba-2, attention,
// whether the memory rule splits the n-gram memory's table by rows, whether the experts rule
// splits the MoE layers' experts, whether the vocab rule splits the tied embedding's rows, and
// whether the experts' capacity is scarce (a fifth of the default: most choices dropped).
struct Variant {
  bool heads = true, mlp = true, moe = false, hybrid = false, memory = false, experts = false,
       vocab = false, scarce = false;
};

void check_split_equals_whole(bool code, Variant v = {}) {
  const int64_t M = backend::collectives().axis_size(nn::kModelAxis);
  const int64_t me = backend::collectives().axis_index(nn::kModelAxis);
  nn::GptConfig whole_config = tiny(code);
  if (v.moe) {  // experts whole on every process unless the experts rule splits them
    whole_config.moe_every = 2;
    whole_config.moe.experts = 4;
    whole_config.moe.top_k = 2;
    whole_config.moe.hidden = 16;
    if (v.scarce) whole_config.moe.capacity_factor = 0.25;
  }
  if (v.hybrid) {  // whole on every process: the indexer and the memory; Mamba-2 by its heads
    whole_config.layers = 4;
    whole_config.sparse_attention_layer_ids = {0};
    whole_config.sparse_attention = {.keys = 4, .window = 2, .indexer_heads = 2, .indexer_dim = 8};
    whole_config.engram_layer_ids = {1};
    whole_config.engram = {.orders = {2, 3}, .heads = 2, .rows = 31, .dim = 8};
    whole_config.mamba_layer_ids = {2};
    whole_config.mamba = {.state = 8, .head_dim = 16, .expand = 2, .conv = 4, .chunk = 8};
  }
  nn::GptConfig split_config = whole_config;
  split_config.model_parallel = M;
  split_config.split_heads = v.heads;
  split_config.split_mlp = v.mlp;
  split_config.split_memory = v.memory;
  split_config.split_experts = v.experts;
  split_config.split_vocab = v.vocab;
  split_config.validate("tensor_parallel_test");
  const std::vector<Tensor> b = batch(whole_config);

  const Params whole = train::make_gpt_init(whole_config)(Scalar(5.0));
  auto whole_step =
      compile("tp_whole", [whole_config](const Params& p, const std::vector<Tensor>& b) {
        auto [loss, grads] =
            value_and_grad([&](const Params& q) { return objective(whole_config, q, b); })(p);
        return std::tuple<Tensor, Params>{loss, grads};
      });
  const auto [want_loss, want_grads] = whole_step(whole, b);

  // This process's shards of the split parameters; the rest whole.
  const std::map<std::string, nn::ModelSplit> splits = nn::gpt_model_splits(split_config);
  ASSERT_EQ(splits.empty(), M == 1);
  Params shards, rest;
  for (const auto& [name, t] : whole) {
    auto s = splits.find(name);
    if (s == splits.end()) {
      rest[name] = t;
    } else {
      shards[name] = Tensor(host_shard(t.array(), s->second, me, M));
    }
  }
  CompileOptions o;
  o.varying_arguments[0] = {nn::kModelAxis};
  o.varying_results[1] = {nn::kModelAxis};  // the shards' gradients; the rest's are whole
  auto split_step = compile(
      "tp_split",
      [split_config](const Params& s, const Params& r, const std::vector<Tensor>& b) {
        using Both = std::pair<Params, Params>;
        auto [loss, grads] = value_and_grad([&](const Both& q) {
          Params p = q.first;
          p.insert(q.second.begin(), q.second.end());
          return objective(split_config, p, b);
        })(Both{s, r});
        return std::tuple<Tensor, Params, Params>{loss, grads.first, grads.second};
      },
      o);
  const auto [loss, shard_grads, rest_grads] = split_step(shards, rest, b);

  const std::string at = fmt::format(
      "{} heads {} mlp {} moe {} hybrid {} memory {} experts {} vocab {} model {} of {}",
      code ? "code" : "gpt2", v.heads, v.mlp, v.moe, v.hybrid, v.memory, v.experts, v.vocab, me, M);
  expect_near(loss.array(), want_loss.array(), 1e-6, at + " loss");
  for (const auto& [name, g] : shard_grads) {
    expect_near(g.array(), host_shard(want_grads.at(name).array(), splits.at(name), me, M), 2e-5,
                at + " gradient of the shard of " + name);
  }
  for (const auto& [name, g] : rest_grads) {
    expect_near(g.array(), want_grads.at(name).array(), 2e-5, at + " gradient of " + name);
  }
  EXPECT_EQ(shard_grads.size() + rest_grads.size(), whole.size());
  if (!v.vocab) return;
  // The whole logits (evaluation's and the sampler's) gather the processes' blocks in order.
  auto whole_logits = compile("tp_logits_whole", [whole_config](const Params& p, const Tensor& t) {
    return nn::gpt_logits(whole_config, p, t);
  });
  CompileOptions lo;
  lo.varying_arguments[0] = {nn::kModelAxis};
  auto split_logits = compile(
      "tp_logits_split",
      [split_config](const Params& s, const Params& r, const Tensor& t) {
        Params p = s;
        p.insert(r.begin(), r.end());
        return nn::gpt_logits(split_config, p, t);
      },
      lo);
  expect_near(split_logits(shards, rest, b[0]).array(), whole_logits(whole, b[0]).array(), 1e-5,
              at + " logits");
}

TEST(TensorParallel, SplitBlocksEqualTheWholeModelOnTheReference) {
  check_split_equals_whole(false);
  check_split_equals_whole(true);
}

// sharding.rules with one of the two dimensions: only its layers split; with MoE layers, their
// experts whole on every process and the attention (and the dense MLPs) split.
TEST(TensorParallel, EachRuleSplitsItsOwnLayersOnTheReference) {
  check_split_equals_whole(false, {.heads = true, .mlp = false});
  check_split_equals_whole(true, {.heads = false, .mlp = true});
  check_split_equals_whole(true, {.heads = true, .mlp = false, .moe = true});
  check_split_equals_whole(true, {.heads = true, .mlp = true, .moe = true});
}

// The experts rule: each process runs its block of every MoE layer's experts on the tokens
// routed to them, alone and beside the heads and mlp rules, and with most choices dropped for
// capacity.
TEST(TensorParallel, ExpertsSplitOverModelOnTheReference) {
  check_split_equals_whole(true, {.heads = false, .mlp = false, .moe = true, .experts = true});
  check_split_equals_whole(false, {.heads = true, .mlp = true, .moe = true, .experts = true});
  check_split_equals_whole(
      true, {.heads = false, .mlp = false, .moe = true, .experts = true, .scarce = true});
}

// The vocab rule: each process holds a block of the tied embedding's rows, reads the tokens'
// rows it holds, computes its block of the logits, and the loss (the MTP head's too) all-reduces
// the softmax's max, sum and target logit; the whole logits gather the blocks. Alone, and beside
// the other rules (in the hybrid test below with the memory rule).
TEST(TensorParallel, VocabularySplitsOverModelOnTheReference) {
  check_split_equals_whole(false, {.heads = false, .mlp = false, .vocab = true});
  check_split_equals_whole(
      true, {.heads = true, .mlp = true, .moe = true, .experts = true, .vocab = true});
}

// Issue 51's blocks under tensor parallelism: the sparse layer's heads split (its indexer whole,
// learning from the heads' mean weights all-reduced over "model"), the Mamba-2 mixer's heads
// and state columns split, the n-gram memory whole on every process, MoE experts whole beside;
// with the memory rule, the memory's table by rows (each process's reads all-reduced, the rows
// it does not hold given no gradient); and every rule at once.
TEST(TensorParallel, HybridBlocksSplitTheirHeadsOnTheReference) {
  check_split_equals_whole(true, {.heads = true, .mlp = true, .moe = false, .hybrid = true});
  check_split_equals_whole(true, {.heads = true, .mlp = true, .moe = true, .hybrid = true});
  check_split_equals_whole(
      true, {.heads = true, .mlp = true, .moe = false, .hybrid = true, .memory = true});
  check_split_equals_whole(
      true, {.heads = false, .mlp = false, .moe = false, .hybrid = true, .memory = true});
  check_split_equals_whole(true, {.heads = true,
                                  .mlp = true,
                                  .moe = true,
                                  .hybrid = true,
                                  .memory = true,
                                  .experts = true,
                                  .vocab = true});
}

TEST(TensorParallel, SplitNamesTheRuleOfEachTensor) {
  nn::GptConfig c = tiny(true);
  c.model_parallel = 2;
  c.moe_every = 2;
  c.moe.experts = 4;
  c.moe.top_k = 2;
  c.moe.hidden = 16;
  c.split_mlp = false;
  const auto heads_only = nn::gpt_model_splits(c);
  EXPECT_TRUE(heads_only.count("h.0.attn.c_attn.weight"));
  EXPECT_TRUE(heads_only.count("mtp.1.attn.c_proj.weight"));
  EXPECT_FALSE(heads_only.count("h.0.mlp.c_fc.weight"));
  c.split_mlp = true;
  c.split_heads = false;
  const auto mlp_only = nn::gpt_model_splits(c);
  EXPECT_TRUE(mlp_only.count("h.0.mlp.c_fc.weight"));      // layer 0 dense
  EXPECT_TRUE(mlp_only.count("mtp.1.mlp.c_proj.weight"));  // MTP blocks are dense
  EXPECT_FALSE(mlp_only.count("h.0.attn.c_attn.weight"));
  for (const auto& [name, s] : mlp_only) EXPECT_FALSE(name.starts_with("h.1.")) << name;  // MoE
  c.split_experts = true;  // the routed experts by their first dimension; the router whole
  const auto experts = nn::gpt_model_splits(c);
  EXPECT_EQ(experts.at("h.1.moe.experts.c_fc.weight").dim, 0);
  EXPECT_EQ(experts.at("h.1.moe.experts.c_proj.weight").parts, std::vector<int64_t>{4});
  EXPECT_FALSE(experts.count("h.1.moe.router.weight"));
}

// The heads rule splits Mamba-2's mixers by their heads and state columns: a model size that
// divides neither is refused naming the tensor.
TEST(TensorParallel, MambaHeadsAndStateMustDivide) {
  nn::GptConfig c = tiny(true);
  c.mamba_layer_ids = {1};
  c.mamba = {.state = 6, .head_dim = 16, .expand = 2, .conv = 4, .chunk = 8};
  c.model_parallel = 4;
  try {
    c.validate("m.json");
    FAIL() << "a state of 6 split over 4 processes was accepted";
  } catch (const InputError& e) {
    EXPECT_EQ(std::string(e.what()),
              "[nn] m.json: h.1.mamba.in_proj.weight: dimension heads (8 Mamba-2 heads, state 6) "
              "does not split over 4 processes of mesh axis 'model'; give 'model' a size that "
              "divides both, or split the MLPs alone (sharding.rules = [\"mlp=model\"])");
  }
  c.model_parallel = 2;
  c.validate("m.json");
  const auto splits = nn::gpt_model_splits(c);
  EXPECT_EQ(splits.at("h.1.mamba.in_proj.weight").parts,
            (std::vector<int64_t>{128, 128, 6, 6, 8}));  // z, x, B, C, dt
  EXPECT_EQ(splits.at("h.1.mamba.out_proj.weight").dim, 0);
  c.split_heads = false;  // mlp alone leaves the mixer whole
  for (const auto& [name, s] : nn::gpt_model_splits(c)) {
    EXPECT_EQ(name.find("mamba"), std::string::npos) << name;
  }
}

// A scanned stack's tensors split as their layers do, one dimension further in; unrolled layers
// and MTP blocks keep their names.
TEST(TensorParallel, StackedTensorsSplitAsTheirLayers) {
  nn::GptConfig c = tiny(true);
  c.layers = 4;
  c.model_parallel = 2;
  c.layout.scanned = true;
  const auto per_layer = nn::gpt_model_splits(c);
  const auto stored = nn::stored_model_splits(c);
  ASSERT_TRUE(stored.count("scan.0.0.attn.c_attn.weight"));
  EXPECT_EQ(stored.at("scan.0.0.attn.c_attn.weight").dim,
            per_layer.at("h.0.attn.c_attn.weight").dim + 1);
  EXPECT_EQ(stored.at("scan.0.0.attn.c_attn.weight").parts,
            per_layer.at("h.0.attn.c_attn.weight").parts);
  EXPECT_EQ(stored.at("scan.0.0.attn.c_proj.weight").dim, 1);  // [layers, rows, C]
  for (const auto& [name, s] : stored) EXPECT_FALSE(name.starts_with("h.")) << name;
  EXPECT_TRUE(stored.count("mtp.1.attn.c_attn.weight"));
  nn::GptConfig mamba = c;  // [dense, Mamba-2] twice: the mixers stack and split alike
  mamba.mamba_layer_ids = {1, 3};
  mamba.mamba = {.state = 8, .head_dim = 16, .expand = 2, .conv = 4, .chunk = 8};
  const auto mixers = nn::stored_model_splits(mamba);
  ASSERT_TRUE(mixers.count("scan.0.1.mamba.in_proj.weight"));
  EXPECT_EQ(mixers.at("scan.0.1.mamba.in_proj.weight").dim, 2);
  EXPECT_EQ(mixers.at("scan.0.1.mamba.out_proj.weight").dim, 1);
  EXPECT_FALSE(mixers.count("h.1.mamba.in_proj.weight"));
  c.layout.split_every = 2;  // a split step holds its layers per layer
  EXPECT_EQ(nn::stored_model_splits(c).size(), per_layer.size());
}

TEST(TensorParallel, SplitBlocksEqualTheWholeModelOnTheCpuBackend) {
  testing_support::TempDir dir("tp_" + std::to_string(dist::world().rank()));
  runtime::JitConfig jc;
  jc.client = cpu::make_cpu_client();
  jc.cache.dir = std::string(KEEL_BINARY_DIR) + "/tensor_parallel_cache";
  jc.run_dir = dir / "run";
  jc.guard.mode = runtime::GuardMode::off;  // two configs: each a new program by design
  JitScope scope(std::make_shared<runtime::CachedJit>(jc));
  check_split_equals_whole(false);
  check_split_equals_whole(true);
}

// Without the all-reduce of pvary's gradient, the whole parameters' gradients would be each
// process's share: tracing names the result that varies over "model".
TEST(TensorParallel, AColumnParallelInputWithoutPvaryIsRefusedAtTrace) {
  if (backend::collectives().axis_size(nn::kModelAxis) == 1) GTEST_SKIP() << "one model process";
  CompileOptions o;
  o.varying_arguments[0] = {nn::kModelAxis};
  o.varying_results[1] = {nn::kModelAxis};
  auto step = compile(
      "tp_no_pvary",
      [](const Tensor& w, const Tensor& x) {
        auto [loss, g] = value_and_grad([&](const std::pair<Tensor, Tensor>& q) {
          return sum(all_reduce(matmul_partial(tanh(matmul(q.second, q.first)),
                                               transpose(q.first, {1, 0}), nn::kModelAxis),
                                nn::kModelAxis));
        })(std::pair{w, x});
        return std::tuple<Tensor, Tensor, Tensor>{loss, g.first, g.second};
      },
      o);
  try {
    step(Tensor(Array::full({4, 3}, 0.5)), Tensor(Array::full({2, 4}, 1.0)));
    FAIL() << "a share of x's gradient was returned as the whole";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("'tp_no_pvary' result 2 leaf '.' varies over mesh axis "
                                         "'model' but is returned as the same on every process"),
              std::string::npos)
        << e.what();
  }
}

// pvary of a value that already varies over its axis: its gradient would add up the processes'
// different values' uses (pvary(pvary(x)) would count each M times).
TEST(TensorParallel, APvaryOfAValueThatAlreadyVariesIsRefusedAtTrace) {
  if (backend::collectives().axis_size(nn::kModelAxis) == 1) GTEST_SKIP() << "one model process";
  auto twice = compile("tp_pvary_twice", [](const Tensor& x) {
    return all_reduce(sum(pvary(pvary(x, nn::kModelAxis), nn::kModelAxis)), nn::kModelAxis);
  });
  try {
    twice(Tensor(Array::full({3}, 1.0)));
    FAIL() << "pvary of a varying value was traced";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("'tp_pvary_twice': pvary over mesh axis 'model' at "),
              std::string::npos)
        << e.what();
    EXPECT_NE(std::string(e.what()).find("of a value that already varies over it"),
              std::string::npos)
        << e.what();
  }
}

// A sum over "model" that meets this process's values with no pvary between: its cotangent
// arrives per process, so the other processes' uses would be missing from the gradient; the
// compile refuses it naming the all_reduce's line. With the pvary, the gradient is right.
TEST(TensorParallel, AnAllReducedSumMetWithoutPvaryIsRefusedAtCompile) {
  if (backend::collectives().axis_size(nn::kModelAxis) == 1) GTEST_SKIP() << "one model process";
  auto gradient = [](bool with_pvary) {
    return compile(with_pvary ? "tp_sum_pvary" : "tp_sum_bare", [with_pvary](const Tensor& x) {
      return value_and_grad([&](const Tensor& w) {
        const Tensor mine = pvary(w, nn::kModelAxis);
        Tensor total = all_reduce(sum(mine * mine), nn::kModelAxis);
        if (with_pvary) total = pvary(total, nn::kModelAxis);
        return all_reduce(sum(mine * total), nn::kModelAxis);
      })(x);
    });
  };
  try {
    gradient(false)(Tensor(Array::full({3}, 1.0)));
    FAIL() << "a gradient through a sum met without pvary was traced";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("'tp_sum_bare': the gradient of the all_reduce over "
                                         "mesh axis 'model' at "),
              std::string::npos)
        << e.what();
  }
  // The loss is M * sum(w) * T with T = M * sum(w^2): at w = 1 (3 elements) its gradient is
  // M^2 (sum(w^2) + 2 w sum(w)) = 9 M^2.
  const double M = static_cast<double>(backend::collectives().axis_size(nn::kModelAxis));
  const auto [loss, grad] = gradient(true)(Tensor(Array::full({3}, 1.0)));
  for (float g : grad.to_f32()) EXPECT_FLOAT_EQ(g, static_cast<float>(9 * M * M));
}

}  // namespace
}  // namespace keel

// The mesh: model over every one of mpirun's processes.
int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  const char* size = std::getenv("OMPI_COMM_WORLD_SIZE");
  const int64_t processes = size ? std::atoll(size) : 1;
  keel::policy::PolicySources sources;
  sources.sets = {"launch.backend=ref",        "compile_cache.mode=off",
                  "shape_guard.mode=off",      "spmd.enabled=true",
                  "spmd.mesh_axes=data,model", fmt::format("spmd.mesh_shape=1,{}", processes)};
  keel::Runtime runtime(keel::policy::resolve_policy(sources));
  return RUN_ALL_TESTS();
}
