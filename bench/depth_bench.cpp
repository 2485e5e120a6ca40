// make bench: how compile time and step time follow depth and accumulation. The code-s train
// step (forward, backward, AdamW) at 6 and 24 layers (--depths), layers unrolled and scanned
// (GptConfig::layout), and with K = 1 and 16 micro-batches, each compiled cold (no cache)
// in this process; ratios against the shallow unrolled compile measured in the same run. Then
// ms/step at the shallow depth, scanned against unrolled, and with the step split at every layer
// (launch.layer_layout = split:1) against the one program.
// Usage: depth_bench --help
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "bench/command_line.h"
#include "bench/synthetic_batch.h"
#include "nn/layer_stack.h"
#include "policy/resolve.h"
#include "runtime/runtime.h"
#include "train/gpt_step.h"
#include "train/step_runner.h"

namespace {

using Clock = std::chrono::steady_clock;
using namespace keel;

double since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

nn::GptConfig model(int64_t layers, bool scan) {
  nn::GptConfig c = nn::gpt_preset("code-s");
  c.layers = layers;
  c.layout.scanned = scan;
  return c;
}

// Seconds to trace, lower and compile the train step of K micro-batches (the cache is off).
double compile_seconds(const nn::GptConfig& c, int64_t K = 1) {
  const train::StepRunner runner(c);
  const train::TrainState state = train::allocated_state(c, c.layout.scanned);
  auto t0 = Clock::now();
  runner.prepare(state, bench::synthetic_batch(c, K), train::step_scalars(train::Hyper{}, 1));
  return since(t0);
}

// Median seconds per step over `steps` steps after one warm-up step, on the state as the trainer
// keeps it (a scanned stack's layers stored stacked).
double step_seconds(const nn::GptConfig& c, int steps) {
  const train::StepRunner runner(c);
  train::TrainState state = train::initial_state(c, c.layout.scanned && c.layout.split_every == 0,
                                                 train::make_gpt_init(c), 1);
  std::vector<Tensor> batch = bench::synthetic_batch(c);
  std::vector<double> times;
  for (int s = 1; s <= steps + 1; ++s) {
    auto t0 = Clock::now();
    runner.run(state, batch, train::step_scalars(train::Hyper{}, s));
    Runtime::current().after_dispatched().wait();  // its programs may run after the call returns
    if (s > 1) times.push_back(since(t0));
  }
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  try {
    int steps = 8;
    std::vector<int64_t> depths = {6, 24};
    bench::CommandLine options{"Compile time against depth and accumulation, unrolled and scanned"};
    options.in_range("--steps", steps, 3, 100000, "timed steps per form (median), at least 3");
    options.list_in_range("--depths", depths, 1, 256,
                          "the shallow and the deep layer count (make test: 2 3)", 2);
    if (std::optional<int> status = options.parse(argc, argv)) return *status;
    const int64_t shallow = depths[0], deep = depths[1];
    policy::PolicySources sources;
    sources.sets = {"compile_cache.mode=off", "shape_guard.mode=off"};
    Runtime runtime(policy::resolve_policy(sources));
    const double base = compile_seconds(model(shallow, false));
    std::printf(
        "baseline: code-s train step, %lld layers unrolled, compiles in %.2f s (this run)\n",
        static_cast<long long>(shallow), base);
    const double unrolled_deep = compile_seconds(model(deep, false));
    const double scan_shallow = compile_seconds(model(shallow, true));
    const double scan_deep = compile_seconds(model(deep, true));
    const auto s = static_cast<long long>(shallow), d = static_cast<long long>(deep);
    std::printf("compile, unrolled: %lld layers %.2f s, %lld layers %.2f s (%lld/%lld = %.2fx)\n",
                s, base, d, unrolled_deep, d, s, unrolled_deep / base);
    std::printf(
        "compile, scanned:  %lld layers %.2f s, %lld layers %.2f s (%lld/%lld = %.2fx; target: "
        "about the same); scanned %lld / unrolled %lld = %.2fx\n",
        s, scan_shallow, d, scan_deep, d, s, scan_deep / scan_shallow, d, d,
        scan_deep / unrolled_deep);

    // Accumulation: K > 1 micro-batches loop inside the program (K = 1 needs no loop), so K
    // does not change its size.
    const double k1 = base;  // the baseline is this very program (and now in the memory tier)
    const double k2 = compile_seconds(model(shallow, false), 2);
    const double k16 = compile_seconds(model(shallow, false), 16);
    std::printf(
        "compile, accumulation (%lld layers unrolled): K=1 %.2f s (no loop), K=2 %.2f s, "
        "K=16 %.2f s (16/2 = %.2fx, 16/1 = %.2fx; target: about the same)\n",
        s, k1, k2, k16, k16 / k2, k16 / k1);

    const nn::GptConfig unrolled = model(shallow, false), scanned = model(shallow, true);
    const double t_unrolled = step_seconds(unrolled, steps);
    const double t_scanned = step_seconds(scanned, steps);
    nn::GptConfig split = unrolled;
    split.layout.split_every = 1;
    const double t_split = step_seconds(split, steps);
    std::printf(
        "step, %lld layers (median of %d): unrolled %.0f ms, scanned %.0f ms (%.2fx), split at "
        "every layer %.0f ms (%.2fx)\n",
        s, steps, 1000 * t_unrolled, 1000 * t_scanned, t_scanned / t_unrolled, 1000 * t_split,
        t_split / t_unrolled);
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  }
}
