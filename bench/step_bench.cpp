// make bench: ms per training step of gpt2-s and gpt2-m (forward, backward, clipping, AdamW:
// the whole one-program step), tokens/s, model GFLOP/s and its share of an OpenBLAS SGEMM
// measured in the same run; and the AdamW update alone on gpt2-m's 85M parameters, with the
// bytes it must move. Usage: step_bench [--steps N] [--presets a,b]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "backend/cpu/blas.h"
#include "bench/synthetic_batch.h"
#include "ir/host_memory.h"
#include "optim/adamw.h"
#include "policy/resolve.h"
#include "runtime/runtime.h"
#include "train/gpt_step.h"
#include "train/step.h"

namespace {

using Clock = std::chrono::steady_clock;
using namespace keel;

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

void bench_step(const std::string& preset, int steps, double sgemm_gflops) {
  nn::GptConfig c = nn::gpt_preset(preset);
  train::Params p = train::make_gpt_init(c)(Scalar(1.0));
  train::Params m = train::zeros_like_params(c), v = train::zeros_like_params(c);
  std::vector<Tensor> batch = bench::synthetic_batch(c);
  auto step = train::make_train_step(c);
  train::Hyper h;
  auto t0 = Clock::now();
  step.prepare(p, m, v, train::zero_counters(c), batch, train::step_scalars(h, 1));
  const double prepare_s = std::chrono::duration<double>(Clock::now() - t0).count();
  std::vector<double> times;
  for (int s = 1; s <= steps + 2; ++s) {
    auto a = Clock::now();
    auto [loss, norm, lr, p1, m1, v1, metrics] =
        step(p, m, v, train::zero_counters(c), batch, train::step_scalars(h, s));
    const double dt = std::chrono::duration<double>(Clock::now() - a).count();
    p = std::move(p1);
    m = std::move(m1);
    v = std::move(v1);
    if (s > 2) times.push_back(dt);  // two warm-up steps
  }
  const double t = median(times);
  const double tokens = double(c.batch * c.seq);
  const double n = double(nn::gpt_param_count(c, /*with_positions=*/false));
  const double flops = 6 * n * tokens + 12.0 * c.layers * c.seq * c.seq * c.width * c.batch;
  const double gflops = flops / t / 1e9;
  std::printf(
      "%s step: %.0f ms/step (median of %d after 2 warm-up), %.0f tokens/s, %.1f GFLOP/s = "
      "%.0f%% of SGEMM; %.1fM parameters; trace+compile/load %.1f s\n",
      preset.c_str(), 1000 * t, steps, tokens / t, gflops, 100 * gflops / sgemm_gflops, n / 1e6,
      prepare_s);
}

void bench_adamw(int steps) {
  nn::GptConfig c = nn::gpt_preset("gpt2-m");
  train::Params p = train::zeros_like_params(c), g = train::zeros_like_params(c);
  train::Params m = train::zeros_like_params(c), v = train::zeros_like_params(c);
  using Fn = CompiledFn<std::tuple<train::Params, train::Params, train::Params>(
      train::Params, train::Params, train::Params, train::Params, std::vector<Scalar>)>;
  Fn update(
      "adamw_update",
      [](const train::Params& q, const train::Params& gr, const train::Params& mm,
         const train::Params& vv, const std::vector<Scalar>& s) {
        optim::AdamWResult r =
            optim::adamw_update(q, gr, mm, vv, {s[0], s[1], s[2], s[3], s[4], s[5]});
        return std::tuple<train::Params, train::Params, train::Params>{r.params, r.m, r.v};
      },
      {}, SourceLoc::current());
  auto scalars = train::adamw_scalars(1e-3, 1);
  update.prepare(p, g, m, v, scalars);
  auto median_update = [&] {
    std::vector<double> times;
    for (int s = 0; s < steps + 2; ++s) {
      auto a = Clock::now();
      auto [p1, m1, v1] = update(p, g, m, v, scalars);
      const double dt = std::chrono::duration<double>(Clock::now() - a).count();
      p = std::move(p1);
      m = std::move(m1);
      v = std::move(v1);
      if (s >= 2) times.push_back(dt);
    }
    return median(times);
  };
  const double t = median_update();
  // The same update with the host-memory cache off: every output lands on fresh pages.
  const int64_t limit = host_cache_limit();
  set_host_cache_limit(0);
  const double t_fresh = median_update();
  set_host_cache_limit(limit);
  const double n = double(nn::gpt_param_count(c));
  const double bytes = n * 4 * 7;  // reads p, g, m, v; writes p, m, v (f32 each)
  std::printf(
      "adamw gpt2-m: %.1f ms per update of %.1fM parameters (median of %d), %.0f MB moved, "
      "%.1f GB/s (target <= 80 ms); with the host-memory cache off %.1f ms (%.2fx)\n",
      1000 * t, n / 1e6, steps, bytes / 1e6, bytes / t / 1e9, 1000 * t_fresh, t_fresh / t);
}

}  // namespace

int main(int argc, char** argv) {
  try {
    int steps = 10;
    std::vector<std::string> presets = {"gpt2-s", "gpt2-m"};
    for (int i = 1; i + 1 < argc; i += 2) {
      if (std::strcmp(argv[i], "--steps") == 0) steps = std::max(3, std::atoi(argv[i + 1]));
      if (std::strcmp(argv[i], "--presets") == 0) {
        presets.clear();
        std::string list = argv[i + 1];
        for (size_t at = 0; at <= list.size();) {
          size_t comma = list.find(',', at);
          presets.push_back(list.substr(at, comma == std::string::npos ? comma : comma - at));
          if (comma == std::string::npos) break;
          at = comma + 1;
        }
      }
    }
    policy::PolicySources sources;
    const std::string cache = (std::filesystem::temp_directory_path() / "keel-step-bench").string();
    sources.sets = {"compile_cache.dir=" + cache, "shape_guard.mode=off"};
    Runtime runtime(policy::resolve_policy(sources));
    const double sgemm = cpu::measure_sgemm_gflops(1024, 5);
    std::printf("baseline: OpenBLAS SGEMM 1024^3 %.1f GFLOP/s (median of 5, this run)\n", sgemm);
    for (const std::string& p : presets) bench_step(p, steps, sgemm);
    bench_adamw(steps);
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  }
}
