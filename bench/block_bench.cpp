// make bench: issue 51's blocks alone, forward + backward (the gradient of sum(block(x) * w)
// with respect to x and every parameter), each against the naive graph it replaces, at code-s's
// width (256) and 2048 tokens per step. The n-gram memory: its read as a gather (a scatter-add
// backward) against one-hot rows times each table. Mamba-2: the chunked algorithm against the
// recurrence one position at a time. Sparse attention (4 heads of 64 over 2 kv heads): the fused
// op over the indexer's keys against the dense masked graph of the same keys. Each form runs in
// its own process, so its peak RSS is its own. Usage: block_bench --help
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "autodiff/value_and_grad.h"
#include "backend/host_memory.h"
#include "bench/child_process.h"
#include "bench/command_line.h"
#include "nn/engram.h"
#include "nn/layers.h"
#include "nn/mamba.h"
#include "nn/sparse_attention.h"
#include "policy/resolve.h"
#include "runtime/runtime.h"
#include "trace/compile.h"

namespace {

using Clock = std::chrono::steady_clock;
using namespace keel;

constexpr int64_t kWidth = 256, kTokens = 2048, kVocab = 256, kHeads = 4, kKvHeads = 2,
                  kHeadDim = 64;

Tensor randn(Shape s, uint32_t seed, double scale = 1.0) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, static_cast<float>(scale));
  std::vector<float> v(static_cast<size_t>(numel(s)));
  for (float& x : v) x = d(rng);
  return Tensor(Array::from_f32(std::move(s), v));
}

// The naive read: for each table, one-hot rows [B, T, rows] times the table's rows.
Tensor one_hot_read(const nn::EngramConfig& c, const NamedTensors& p, const Tensor& rows) {
  const Shape& s = rows.shape();
  const Tensor& table = p.at("engram.table");
  std::vector<Tensor> parts;
  for (int64_t g = 0; g < c.tables(); ++g) {
    Tensor local = reshape(slice(rows, {0, 0, g}, {s[0], s[1], g + 1}), {s[0], s[1]}) -
                   full({}, static_cast<double>(g * c.rows), DType::i64);
    Tensor own = slice(table, {g * c.rows, 0}, {(g + 1) * c.rows, c.dim});
    parts.push_back(matmul(one_hot(local, c.rows), own));
  }
  return concat(parts, 2);
}

// allowed [B, 1, T, T]: key s is among query t's listed keys (a scatter of their counts, so
// nothing larger than T x T is built).
Tensor listed_mask(const Tensor& keys) {
  const Shape& s = keys.shape();  // [B, T, S]
  const int64_t B = s[0], T = s[1];
  const Tensor listed = ge(keys, full({}, 0.0, DType::i64));
  const Tensor at =
      reshape(iota({B * T}, 0), {B, T, 1}) * T + select(listed, keys, full({}, 0.0, DType::i64));
  const Tensor counts = scatter_add(full({B * T * T}, 0.0), reshape(at, {numel(s)}),
                                    reshape(cast(listed, DType::f32), {numel(s)}));
  return reshape(gt(counts, full({}, 0.0)), {B, 1, T, T});
}

// Sparse attention over the indexer's keys: the fused op, or the dense masked graph.
Tensor sparse_form(const std::string& form, const nn::SparseAttentionConfig& c,
                   const NamedTensors& r, const Tensor& pos) {
  const Tensor keys = stop_gradient(
      nn::sparse_keys(c, nn::indexer_scores(c, r, "indexer", stop_gradient(r.at("x"))), pos));
  const double scale = 1.0 / std::sqrt(static_cast<double>(kHeadDim));
  if (form == "sparse_fused") return sparse_attention(r.at("q"), r.at("k"), r.at("v"), keys, scale);
  auto bhtd = [](const Tensor& x) { return transpose(x, {0, 2, 1, 3}); };
  return bhtd(
      nn::attention_unfused(bhtd(r.at("q")), bhtd(r.at("k")), bhtd(r.at("v")), listed_mask(keys)));
}

NamedTensors block_params(const std::vector<std::pair<std::string, Shape>>& shapes) {
  NamedTensors p;
  uint32_t seed = 1;
  for (const auto& [name, shape] : shapes) {
    const bool norm = name.find("ln_") != std::string::npos || name.ends_with(".D");
    p[name] = norm ? Tensor(Array::from_f32(shape, std::vector<float>(numel(shape), 1.0f)))
                   : randn(shape, seed++, 0.02);
  }
  return p;
}

// One form in this process, rows of `seq` tokens: prints "ms <median> peak <bytes>".
int child(const std::string& form, int reps, int64_t seq) {
  policy::PolicySources sources;
  const std::string dir = (std::filesystem::temp_directory_path() / "keel-block-bench").string();
  sources.sets = {"compile_cache.dir=" + dir, "shape_guard.mode=off"};
  Runtime runtime(policy::resolve_policy(sources));
  const int64_t batch = std::max<int64_t>(1, kTokens / seq);
  const nn::EngramConfig engram;     // the defaults: orders 2 and 3, 4 heads, 4093 rows of 32
  const nn::MambaConfig mamba;       // the defaults: state 64, heads of 32, expand 2, chunks of 32
  nn::SparseAttentionConfig sparse;  // the defaults (64 keys, a window of 16) within the row
  sparse.keys = std::min(sparse.keys, seq);
  sparse.window = std::min(sparse.window, seq);
  const bool is_engram = form.starts_with("engram"), is_sparse = form.starts_with("sparse");
  NamedTensors p = is_engram ? block_params(nn::engram_param_shapes(engram, "engram", kWidth))
                   : is_sparse
                       ? block_params(nn::sparse_indexer_param_shapes(sparse, "indexer", kWidth))
                       : block_params(nn::mamba_param_shapes(mamba, "mamba", kWidth));
  std::mt19937 rng(7);
  Array tokens(DType::i64, {batch, seq}), positions(DType::i64, {batch, seq});
  for (int64_t i = 0; i < tokens.numel(); ++i) {
    tokens.set_i64(i, static_cast<int64_t>(rng() % kVocab));
    positions.set_i64(i, i % seq);
  }
  p["x"] = randn({batch, seq, kWidth}, 90);
  Tensor w = randn({batch, seq, kWidth}, 91);
  if (is_sparse) {
    p["q"] = randn({batch, seq, kHeads, kHeadDim}, 92);
    p["k"] = randn({batch, seq, kKvHeads, kHeadDim}, 93);
    p["v"] = randn({batch, seq, kKvHeads, kHeadDim}, 94);
    w = randn({batch, seq, kHeads, kHeadDim}, 95);
  }
  auto f =
      compile(form, [form, engram, mamba, sparse](const NamedTensors& params, const Tensor& weight,
                                                  const Tensor& tok, const Tensor& pos) {
        auto fn = [&](const NamedTensors& r) {
          Tensor y;
          if (form == "engram_gather" || form == "engram_one_hot") {
            Tensor rows = nn::engram_rows(engram, kVocab, tok, pos);
            Tensor e = form == "engram_gather" ? nn::engram_read(engram, r, "engram", rows)
                                               : one_hot_read(engram, r, rows);
            y = nn::engram_mix(r, "engram", r.at("x"), e);
          } else if (form.starts_with("sparse")) {
            y = sparse_form(form, sparse, r, pos);
          } else if (form == "mamba_chunked") {
            y = nn::mamba_mixer(mamba, r, "mamba", r.at("x"), pos, Tensor());
          } else {
            y = nn::mamba_mixer_sequential(mamba, r, "mamba", r.at("x"), pos, Tensor());
          }
          return sum(y * weight);
        };
        return value_and_grad(fn)(params);
      });
  std::vector<double> times;
  for (int r = 0; r <= reps; ++r) {
    auto a = Clock::now();
    auto [loss, grads] = f(p, w, Tensor(tokens), Tensor(positions));
    (void)grads.at("x").to_f32();  // wait for the values
    if (r > 0) times.push_back(std::chrono::duration<double>(Clock::now() - a).count());
  }
  std::printf("ms %.3f peak %lld\n", 1000 * bench::median(times),
              static_cast<long long>(backend::host_memory_stats().peak_bytes_in_use));
  return 0;
}

struct Result {
  double ms = 0, mb = 0;
};

Result measure(const char* self, const std::string& form, int reps, int64_t seq) {
  const std::string out =
      bench::run_self(self, {"--child", form, std::to_string(reps), std::to_string(seq)}).output;
  Result r;
  double peak = 0;
  if (std::sscanf(out.c_str(), "ms %lf peak %lf", &r.ms, &peak) != 2) {
    throw Error("[bench] the block child printed no figures:\n" + out);
  }
  r.mb = peak / 1048576.0;
  return r;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    if (argc == 5 && std::strcmp(argv[1], "--child") == 0) {
      return child(argv[2], std::atoi(argv[3]), std::atoll(argv[4]));
    }
    int reps = 5;
    int64_t seq = 128;
    bench::CommandLine options{
        "Issue 51's blocks forward+backward against their naive graphs: time, peak RSS"};
    options.positive("--reps", reps, "timed calls per form (median)");
    options.in_range("--seq", seq, 1, 2048, "tokens per row (rows: 2048 / seq)");
    if (std::optional<int> status = options.parse(argc, argv)) return *status;
    const nn::EngramConfig engram;
    const nn::MambaConfig mamba;
    std::printf(
        "blocks forward+backward alone, width %lld, %lld tokens in rows of %lld; median of %d "
        "after one warm-up; peak RSS of each form in its own process\n",
        static_cast<long long>(kWidth), static_cast<long long>(kTokens),
        static_cast<long long>(seq), reps);
    const Result g = measure(argv[0], "engram_gather", reps, seq);
    const Result o = measure(argv[0], "engram_one_hot", reps, seq);
    std::printf(
        "n-gram memory (%lld tables of %lld x %lld): gather %.1f ms, %.0f MB; one-hot %.1f ms, "
        "%.0f MB; gather/one-hot time %.3fx, peak RSS %.2fx\n",
        static_cast<long long>(engram.tables()), static_cast<long long>(engram.rows),
        static_cast<long long>(engram.dim), g.ms, g.mb, o.ms, o.mb, g.ms / o.ms, g.mb / o.mb);
    const Result c = measure(argv[0], "mamba_chunked", reps, seq);
    const Result q = measure(argv[0], "mamba_sequential", reps, seq);
    std::printf(
        "Mamba-2 (state %lld, heads of %lld, chunks of %lld): chunked %.1f ms, %.0f MB; "
        "sequential %.1f ms, %.0f MB; chunked/sequential time %.3fx, peak RSS %.2fx\n",
        static_cast<long long>(mamba.state), static_cast<long long>(mamba.head_dim),
        static_cast<long long>(mamba.chunk), c.ms, c.mb, q.ms, q.mb, c.ms / q.ms, c.mb / q.mb);
    nn::SparseAttentionConfig sparse;
    const Result s = measure(argv[0], "sparse_fused", reps, seq);
    const Result d = measure(argv[0], "sparse_dense_masked", reps, seq);
    std::printf(
        "sparse attention (%lld keys + a window of %lld): fused %.1f ms, %.0f MB; dense masked "
        "%.1f ms, %.0f MB; fused/dense time %.3fx, peak RSS %.2fx\n",
        static_cast<long long>(std::min(sparse.keys, seq)),
        static_cast<long long>(std::min(sparse.window, seq)), s.ms, s.mb, d.ms, d.mb,
        d.ms > 0 ? s.ms / d.ms : 0.0, d.mb > 0 ? s.mb / d.mb : 0.0);
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  }
}
