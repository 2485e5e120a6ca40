// make bench: ms per training step of gpt2-s and gpt2-m (forward, backward, clipping, AdamW:
// the whole one-program step) with f32 and with bf16 matmuls (cpu.matmul_precision),
// tokens/s, model GFLOP/s and its share of the oneDNN matmul throughput on that model's GEMM mix
// in the same precision, measured in the same run (targets: 85% f32, 80% bf16); gpt2-m's peak RSS
// with the step's state donated (written in place) against fresh buffers, each in its own process;
// and the AdamW update alone on gpt2-m's 85M parameters, donated against fresh buffers. Each
// step is also timed against eager PyTorch (bench/torch_gpt_eager.py: the same model and batch,
// op by op, on as many threads, with OpenBLAS on the core keel chose) when Debian's
// python3-torch is installed. Usage: step_bench --help
#include <fmt/format.h>
#include <omp.h>
#include <algorithm>
#include <optional>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <sstream>
#include <string>
#include <vector>

#include "backend/cpu/blas.h"
#include "backend/cpu/host_block_cache.h"
#include "backend/host_memory.h"
#include "bench/child_process.h"
#include "bench/command_line.h"
#include "bench/gemm_shapes.h"
#include "bench/stream_triad.h"
#include "bench/synthetic_batch.h"
#include "optim/adamw.h"
#include "policy/features.h"
#include "policy/resolve.h"
#include "runtime/backends.h"
#include "runtime/runtime.h"
#include "train/step_runner.h"

namespace {

using Clock = std::chrono::steady_clock;
using namespace keel;

std::string cache_dir() {
  return (std::filesystem::temp_directory_path() / "keel-step-bench").string();
}

Runtime start_runtime(const std::string& precision = "f32") {
  policy::PolicySources sources;
  sources.sets = {"compile_cache.dir=" + cache_dir(), "shape_guard.mode=off",
                  "cpu.matmul_precision=" + precision};
  return Runtime(policy::resolve_policy(sources));
}

// Eager PyTorch's median ms/step for the same preset and precision, or a reason it has none.
std::string torch_eager(const std::string& preset, int64_t batch, int steps,
                        const std::string& precision, double keel_ms) {
  const std::string python = "/usr/bin/python3";  // Debian's, where python3-torch installs
  if (!std::filesystem::exists(python)) return "not measured: no /usr/bin/python3";
  std::vector<std::string> args = {KEEL_SOURCE_DIR "/bench/torch_gpt_eager.py",
                                   "--preset",
                                   preset,
                                   "--batch",
                                   std::to_string(batch),
                                   "--steps",
                                   std::to_string(steps),
                                   "--threads",
                                   std::to_string(omp_get_max_threads())};
  if (precision == "bf16") args.push_back("--bf16");
  std::string out;
  try {
    out = bench::run_self(python.c_str(), args).output;
  } catch (const std::exception& e) {
    const std::string why = e.what();
    return "not measured: the PyTorch script failed (" + why.substr(0, why.find('\n')) +
           "); is python3-torch installed? scripts/install-deps --bench installs it";
  }
  const size_t at = out.find("torch_eager_ms ");
  if (at == std::string::npos) return "not measured: the script printed no time";
  std::istringstream line(out.substr(at));
  std::string tag, torch_tag, version, threads_tag;
  double ms = 0;
  int threads = 0;
  line >> tag >> ms >> torch_tag >> version >> threads_tag >> threads;
  const char* core = std::getenv("OPENBLAS_CORETYPE");
  return fmt::format(
      "{:.0f} ms/step (torch {}, {} threads, OPENBLAS_CORETYPE={}); keel/eager {:.2f}x", ms,
      version, threads, core ? core : "unset", keel_ms / ms);
}

// The preset's model, with `batch` rows per step when it is not 0.
nn::GptConfig bench_config(const std::string& preset, int64_t batch) {
  nn::GptConfig c = nn::gpt_preset(preset);
  if (batch > 0) c.batch = batch;
  return c;
}

void bench_step(const std::string& preset, int64_t rows, int steps, const std::string& precision) {
  const nn::GptConfig c = bench_config(preset, rows);
  const double target = precision == "bf16" ? 80 : 85;
  bench::GemmMix mix(bench::gpt_gemm_shapes(c), precision == "bf16");
  train::TrainState state = train::initial_state(c, false, train::make_gpt_init(c), 1);
  std::vector<Tensor> batch = bench::synthetic_batch(c);
  const train::StepRunner step(c);
  train::Hyper h;
  auto t0 = Clock::now();
  step.prepare(state, batch, train::step_scalars(h, 1));
  const double prepare_s = std::chrono::duration<double>(Clock::now() - t0).count();
  const double tokens = double(c.batch * c.seq);
  const double n = double(nn::gpt_param_count(c, /*with_positions=*/false));
  const double flops = 6 * n * tokens + 12.0 * c.layers * c.seq * c.seq * c.width * c.batch;
  std::vector<double> times, passes, ratios;
  for (int s = 1; s <= steps + 2; ++s) {
    auto a = Clock::now();
    step.run(state, batch, train::step_scalars(h, s));
    Runtime::current().after_dispatched().wait();  // its programs may run after the call returns
    const double dt = std::chrono::duration<double>(Clock::now() - a).count();
    if (s <= 2) continue;  // two warm-up steps
    times.push_back(dt);
    passes.push_back(mix.pass_seconds());
    ratios.push_back((flops / dt) / (mix.flops() / passes.back()));
  }
  const double t = bench::median(times);
  const double gflops = flops / t / 1e9, baseline = mix.flops() / bench::median(passes) / 1e9;
  std::printf(
      "%s %s step of %lld x %lld tokens: %.0f ms/step (median of %d after 2 warm-up), %.0f "
      "tokens/s, %.1f GFLOP/s = "
      "%.0f%% of oneDNN %s matmul on its GEMM mix (%.1f GFLOP/s; the median of the %d ratios "
      "of a step to the pass of the mix timed after it; target %.0f%%); "
      "%.1fM parameters; trace+compile/load %.1f s; state copies %lld\n",
      preset.c_str(), precision.c_str(), static_cast<long long>(c.batch),
      static_cast<long long>(c.seq), 1000 * t, steps, tokens / t, gflops,
      100 * bench::median(ratios), precision.c_str(), baseline, steps, target, n / 1e6, prepare_s,
      static_cast<long long>(state.params.copies() + state.m.copies()));
  std::printf("%s %s eager PyTorch, same model and batch: %s\n", preset.c_str(), precision.c_str(),
              torch_eager(preset, c.batch, steps, precision, 1000 * t).c_str());
  std::fflush(stdout);
}

// The child of the peak-RSS comparison: three steps, then the process's peak resident set.
int rss_child(const std::string& preset, int64_t rows, bool donate) {
  Runtime runtime = start_runtime();
  const nn::GptConfig c = bench_config(preset, rows);
  train::TrainState state = train::initial_state(c, false, train::make_gpt_init(c), 1);
  std::vector<Tensor> batch = bench::synthetic_batch(c);
  train::StepOptions options;
  options.donate = donate;
  const train::StepRunner step(c, options);
  for (int s = 1; s <= 3; ++s) step.run(state, batch, train::step_scalars(train::Hyper{}, s));
  runtime.after_dispatched().wait();  // the third step's programs may still be running
  std::printf("peak_rss_bytes %lld\n",
              static_cast<long long>(backend::host_memory_stats().peak_bytes_in_use));
  return 0;
}

void bench_peak_rss(const char* self, const std::string& preset, int64_t batch) {
  auto peak = [&](const char* mode) {
    const std::string out =
        bench::run_self(self, {"--rss", preset, mode, std::to_string(batch)}).output;
    const size_t at = out.find("peak_rss_bytes ");
    if (at == std::string::npos) throw Error("[bench] the RSS child printed no peak:\n" + out);
    return std::stod(out.substr(at + 15)) / 1048576.0;
  };
  const double fresh = peak("fresh"), donated = peak("donate");
  std::printf(
      "%s peak RSS over 3 steps (each in its own process): fresh buffers for the new state "
      "%.0f MB, donated (in place) %.0f MB (%.2fx)\n",
      preset.c_str(), fresh, donated, donated / fresh);
}

// The update of `preset`'s parameters (make bench: gpt2-m, the last of the default presets).
void bench_adamw(const std::string& preset, int steps) {
  nn::GptConfig c = nn::gpt_preset(preset);
  using Fn = CompiledFn<std::tuple<NamedTensors, NamedTensors, NamedTensors>(
      NamedTensors, NamedTensors, NamedTensors, NamedTensors, std::vector<Scalar>)>;
  auto make = [](bool donate) {
    return Fn(
        donate ? "adamw_donated" : "adamw_fresh",
        [](const NamedTensors& q, const NamedTensors& gr, const NamedTensors& mm,
           const NamedTensors& vv, const std::vector<Scalar>& s) {
          optim::AdamWResult r =
              optim::adamw_update(q, gr, mm, vv, {s[0], s[1], s[2], s[3], s[4], s[5]});
          return std::tuple<NamedTensors, NamedTensors, NamedTensors>{r.params, r.m, r.v};
        },
        CompileOptions(nullptr, donate ? std::vector<Donation>{{0, 0}, {2, 1}, {3, 2}}
                                       : std::vector<Donation>{}),
        SourceLoc::current());
  };
  auto median_update = [&](const Fn& update) {
    NamedTensors p = train::zeros_like_params(c), g = train::zeros_like_params(c);
    NamedTensors m = train::zeros_like_params(c), v = train::zeros_like_params(c);
    auto scalars = train::adamw_scalars(1e-3, 1);
    update.prepare(p, g, m, v, scalars);
    std::vector<double> times;
    for (int s = 0; s < steps + 2; ++s) {
      auto a = Clock::now();
      auto [p1, m1, v1] = update(p, g, m, v, scalars);
      Runtime::current().after_dispatched().wait();
      const double dt = std::chrono::duration<double>(Clock::now() - a).count();
      p = std::move(p1);
      m = std::move(m1);
      v = std::move(v1);
      if (s >= 2) times.push_back(dt);
    }
    return bench::median(times);
  };
  const Fn donated = make(true), fresh = make(false);
  const double t = median_update(donated), t_fresh = median_update(fresh);
  // Fresh buffers with the CPU backend's host block cache off: every output lands on new pages.
  const int64_t limit = cpu::host_cache_limit();
  cpu::set_host_cache_limit(0);
  const double t_paged = median_update(fresh);
  cpu::set_host_cache_limit(limit);
  const double n = double(nn::gpt_param_count(c));
  const double bytes = n * 4 * 7;  // reads p, g, m, v; writes p, m, v (f32 each)
  const double triad = bench::triad_gb_per_s(static_cast<int64_t>(n), steps);
  std::printf(
      "adamw %s: %.1f ms per update of %.1fM parameters, in place (median of %d), %.0f MB "
      "moved, %.1f GB/s = %.0f%% of a STREAM triad over as many floats (%.1f GB/s, this run; "
      "target 85%%); into fresh buffers %.1f ms (%.2fx), and with the host-memory cache off "
      "%.1f ms (%.2fx)\n",
      preset.c_str(), 1000 * t, n / 1e6, steps, bytes / 1e6, bytes / t / 1e9,
      100 * bytes / t / 1e9 / triad, triad, 1000 * t_fresh, t_fresh / t, 1000 * t_paged,
      t_paged / t);
}

}  // namespace

int main(int argc, char** argv) {
  try {
    if (argc == 5 && std::strcmp(argv[1], "--rss") == 0) {
      return rss_child(argv[2], std::atoll(argv[4]), std::strcmp(argv[3], "donate") == 0);
    }
    int steps = 10;
    int64_t batch = 0;
    bool bf16 = false;
    std::vector<std::string> presets = {"gpt2-s", "gpt2-m"};
    std::vector<std::string> precisions = {"f32", "bf16"};
    bench::CommandLine options{
        "Step time of GPT presets in f32 and bf16 against oneDNN's GEMM mix and eager "
        "PyTorch, AdamW against a STREAM triad, peak RSS with and without donation"};
    options.in_range("--steps", steps, 3, 100000, "timed steps per preset (median), at least 3");
    options.in_range("--batch-size", batch, 0, 4096,
                     "rows of 256 tokens per step; 0: the preset's");
    options.list_of("--presets", presets, {"gpt2-s", "gpt2-m"},
                    "gpt2-s and/or gpt2-m (the GEMM mix is theirs), comma-separated");
    options.list_of("--precisions", precisions, {"f32", "bf16"},
                    "f32 and/or bf16 matmul operands, comma-separated (make test: f32)");
    if (std::optional<int> status = options.parse(argc, argv)) return *status;
    const auto wanted = [&](const char* p) {
      return std::find(precisions.begin(), precisions.end(), p) != precisions.end();
    };
    {
      Runtime runtime = start_runtime();
      const double sgemm = cpu::measure_sgemm_gflops(1024, 5);
      std::printf("OpenBLAS SGEMM 1024^3 %.1f GFLOP/s (median of 5, this run)\n", sgemm);
      if (wanted("f32")) {
        for (const std::string& p : presets) bench_step(p, batch, steps, "f32");
      }
      bench_adamw(presets.back(), steps);
      bf16 = policy::find_feature(feature_table(runtime.bundle()), "bf16_matmul").available;
    }
    if (!wanted("bf16")) {
      std::printf("bf16 steps not asked for (--precisions)\n");
    } else if (bf16) {  // one runtime per process, each with its precision frozen
      Runtime runtime = start_runtime("bf16");
      for (const std::string& p : presets) bench_step(p, batch, steps, "bf16");
    } else {
      std::printf("bf16 steps skipped: bf16_matmul is unavailable here (keel features)\n");
    }
    bench_peak_rss(argv[0], presets.back(), batch);
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  }
}
