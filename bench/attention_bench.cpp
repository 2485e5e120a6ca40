// make bench: attention alone, forward + backward (the gradient of sum(attention(q, k, v) · w)
// with respect to q, k and v), fused op against the unfused graph it replaced (scores
// [B, H, T, T], mask, softmax, k and v repeated per group), at gpt2-s's heads (6 x 64) and its
// 2048 tokens per step (B = 2048 / T). Each form runs in its own process, so its peak RSS is its
// own; a program whose predicted peak does not fit in 80% of MemAvailable is refused by the
// runtime before it runs, and the bench says so. Usage: attention_bench --help
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "autodiff/value_and_grad.h"
#include "backend/host_memory.h"
#include "bench/child_process.h"
#include "bench/command_line.h"
#include "nn/layers.h"
#include "policy/resolve.h"
#include "runtime/runtime.h"
#include "trace/compile.h"

namespace {

using Clock = std::chrono::steady_clock;
using namespace keel;

constexpr int64_t kHeads = 6, kDim = 64, kTokens = 2048;

int64_t mem_available_bytes() {
  std::ifstream f("/proc/meminfo");
  std::string key;
  int64_t kb = 0;
  while (f >> key >> kb) {
    if (key == "MemAvailable:") return kb * 1024;
    f.ignore(256, '\n');
  }
  return 0;
}

Tensor randn(Shape s, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, 1.0f);
  std::vector<float> v(static_cast<size_t>(numel(s)));
  for (float& x : v) x = d(rng);
  return Tensor(Array::from_f32(std::move(s), v));
}

// One form at one length, in this process: prints "ms <median> peak <bytes>" or "refused <why>".
int child(int64_t T, bool fused, int reps, const std::string& precision) {
  policy::PolicySources sources;
  const std::string dir = (std::filesystem::temp_directory_path() / "keel-attn-bench").string();
  sources.sets = {"compile_cache.dir=" + dir, "shape_guard.mode=off",
                  "launch.memory_budget_bytes=" + std::to_string(mem_available_bytes() / 10 * 8),
                  "cpu.matmul_precision=" + precision};
  std::optional<Runtime> runtime;
  try {  // bf16 where the host has no bf16 products: the runtime refuses it at init
    runtime.emplace(policy::resolve_policy(sources));
  } catch (const Error& e) {
    std::printf("refused %s\n", e.what());
    return 0;
  }
  const int64_t B = std::max<int64_t>(1, kTokens / T);
  std::map<std::string, Tensor> p = {{"q", randn({B, kHeads, T, kDim}, 1)},
                                     {"k", randn({B, kHeads, T, kDim}, 2)},
                                     {"v", randn({B, kHeads, T, kDim}, 3)}};
  const Tensor w = randn({B, kHeads, T, kDim}, 4);
  auto f = compile(fused ? "fused" : "unfused",
                   [fused, T](const std::map<std::string, Tensor>& params, const Tensor& weight) {
                     auto fn = [&](const std::map<std::string, Tensor>& r, const Tensor& x) {
                       Tensor y = fused ? nn::attention(r.at("q"), r.at("k"), r.at("v"))
                                        : nn::attention_unfused(r.at("q"), r.at("k"), r.at("v"),
                                                                nn::causal_mask(T));
                       return sum(y * x);
                     };
                     return value_and_grad(fn)(params, weight);
                   });
  std::vector<double> times;
  try {  // a form whose predicted peak does not fit is refused before it runs
    for (int r = 0; r <= reps; ++r) {
      auto a = Clock::now();
      auto [loss, grads] = f(p, w);
      (void)grads.at("q").to_f32();  // wait for the values
      if (r > 0) times.push_back(std::chrono::duration<double>(Clock::now() - a).count());
    }
  } catch (const Error& e) {
    std::printf("refused %s\n", e.what());
    return 0;
  }
  std::printf("ms %.3f peak %lld\n", 1000 * bench::median(times),
              static_cast<long long>(backend::host_memory_stats().peak_bytes_in_use));
  return 0;
}

struct Result {
  bool ran = false;
  double ms = 0, mb = 0;
  std::string why;
};

Result measure(const char* self, int64_t T, bool fused, int reps, const std::string& precision) {
  const std::string out =
      bench::run_self(self, {"--child", std::to_string(T), fused ? "fused" : "unfused",
                             std::to_string(reps), precision})
          .output;
  Result r;
  if (out.rfind("refused ", 0) == 0) {
    r.why = out.substr(8, out.find('\n') - 8);
    return r;
  }
  double peak = 0;
  if (std::sscanf(out.c_str(), "ms %lf peak %lf", &r.ms, &peak) != 2) {
    throw Error("[bench] the attention child printed no figures:\n" + out);
  }
  r.ran = true;
  r.mb = peak / 1048576.0;
  return r;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    if (argc == 6 && std::strcmp(argv[1], "--child") == 0) {
      return child(std::atoll(argv[2]), std::strcmp(argv[3], "fused") == 0, std::atoi(argv[4]),
                   argv[5]);
    }
    int reps = 5;
    std::string precision = "f32";
    std::vector<int64_t> seqs = {256, 1024, 4096};
    bench::CommandLine options{
        "Fused attention forward+backward against the unfused graph: time, peak RSS"};
    options.positive("--reps", reps, "timed calls per form (median)");
    options.list_in_range("--seqs", seqs, 1, 65536, "sequence lengths, comma-separated");
    options.one_of("--precision", precision, {"f32", "bf16"}, "cpu.matmul_precision of both forms");
    if (std::optional<int> status = options.parse(argc, argv)) return *status;
    std::printf(
        "attention forward+backward alone, %lld heads x %lld, %lld tokens (B = %lld / T), %s "
        "products; median of %d after one warm-up; peak RSS of each form in its own process\n",
        static_cast<long long>(kHeads), static_cast<long long>(kDim),
        static_cast<long long>(kTokens), static_cast<long long>(kTokens), precision.c_str(), reps);
    for (int64_t T : seqs) {
      const Result f = measure(argv[0], T, true, reps, precision);
      const Result u = measure(argv[0], T, false, reps, precision);
      const long long B = std::max<int64_t>(1, kTokens / T);
      if (!f.ran) {
        std::printf("T=%lld B=%lld: fused refused: %s\n", static_cast<long long>(T), B,
                    f.why.c_str());
        continue;
      }
      if (!u.ran) {
        std::printf(
            "T=%lld B=%lld: fused %.1f ms, %.0f MB; unfused not run, its program does not fit: "
            "%s\n",
            static_cast<long long>(T), B, f.ms, f.mb, u.why.c_str());
        continue;
      }
      std::printf(
          "T=%lld B=%lld: fused %.1f ms, %.0f MB; unfused %.1f ms, %.0f MB; fused/unfused time "
          "%.2fx, peak RSS %.2fx\n",
          static_cast<long long>(T), B, f.ms, f.mb, u.ms, u.mb, f.ms / u.ms, f.mb / u.mb);
    }
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  }
}
