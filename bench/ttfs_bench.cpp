// Cold versus warm time-to-first-step for a GPT-sized training step (gpt2-s: forward, backward,
// AdamW), each in a fresh process, measured in one run and printed as a ratio.
// Usage: ttfs_bench --help
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "bench/child_process.h"
#include "bench/command_line.h"
#include "bench/synthetic_batch.h"
#include "ir/error.h"
#include "policy/resolve.h"
#include "runtime/runtime.h"
#include "train/gpt_step.h"
#include "train/step_runner.h"

namespace {

// The measured process: everything up to the moment the first step starts executing.
int child(const std::string& preset, const std::string& cache_dir) {
  using namespace keel;
  policy::PolicySources sources;
  sources.sets = {"compile_cache.dir=" + cache_dir, "shape_guard.mode=off"};
  Runtime runtime(policy::resolve_policy(sources));
  runtime::CachedJit* jit = &runtime.jit();
  nn::GptConfig c = nn::gpt_preset(preset);
  train::TrainState state = train::initial_state(c, false, train::make_gpt_init(c), 1);
  std::vector<Tensor> batch = bench::synthetic_batch(c);
  const train::StepRunner step(c);
  train::Hyper h;
  step.prepare(state, batch, train::step_scalars(h, 1));
  std::printf("first_step_ns %lld\n", static_cast<long long>(bench::monotonic_ns()));
  const Tensor loss = step.run(state, batch, train::step_scalars(h, 1)).loss;
  diag::CompileTotals n = jit->log().totals();
  std::printf("loss %.4f compiles %lld disk_hits %lld\n", loss.item(),
              static_cast<long long>(n.compiles), static_cast<long long>(n.disk_hits));
  return 0;
}

struct Trial {
  double seconds = 0;
  std::string output;
};

Trial run_child(const char* self, const std::string& preset, const std::string& dir) {
  keel::bench::ChildRun run = keel::bench::run_self(self, {"--child", preset, dir});
  auto at = run.output.find("first_step_ns ");
  if (at == std::string::npos)
    throw keel::Error("[bench] child printed no first step:\n" + run.output);
  return {(std::stoll(run.output.substr(at + 14)) - run.start_ns) / 1e9, run.output};
}

}  // namespace

int main(int argc, char** argv) {
  try {
    if (argc == 4 && std::strcmp(argv[1], "--child") == 0) return child(argv[2], argv[3]);
    std::string preset = "gpt2-s";
    int trials = 3;
    keel::bench::CommandLine options{
        "Time to the first step, on a cold and on a warm compile cache"};
    options.one_of("--preset", preset, keel::nn::gpt_preset_names(), "model preset");
    options.positive("--trials", trials, "cold/warm pairs (median)");
    if (std::optional<int> status = options.parse(argc, argv)) return *status;
    std::vector<double> cold, warm;
    std::string last_cold, last_warm;
    for (int t = 0; t < trials; ++t) {
      std::string dir = (std::filesystem::temp_directory_path() / "keel-bench-XXXXXX").string();
      if (!mkdtemp(dir.data())) throw keel::Error("[bench] mkdtemp failed");
      Trial c = run_child(argv[0], preset, dir + "/cache");
      Trial w = run_child(argv[0], preset, dir + "/cache");
      cold.push_back(c.seconds);
      warm.push_back(w.seconds);
      last_cold = c.output;
      last_warm = w.output;
      std::filesystem::remove_all(dir);
      std::printf("trial %d: cold %.3f s, warm %.3f s\n", t + 1, c.seconds, w.seconds);
    }
    double mc = keel::bench::median(cold), mw = keel::bench::median(warm);
    std::printf("cold run: %s", last_cold.substr(last_cold.find("loss")).c_str());
    std::printf("warm run: %s", last_warm.substr(last_warm.find("loss")).c_str());
    std::printf(
        "time_to_first_step %s: cold %.3f s, warm %.3f s (medians of %d); warm/cold = "
        "%.1f%% (target <= 5%%)\n",
        preset.c_str(), mc, mw, trials, 100.0 * mw / mc);
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  }
}
