// Cold versus warm time-to-first-step for a GPT-sized training step (gpt2-s: forward, backward,
// AdamW), each in a fresh process, measured in one run and printed as a ratio.
// Usage: ttfs_bench [--preset NAME] [--trials N]
#include <fmt/format.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <string>
#include <vector>

#include "bench/synthetic_batch.h"
#include "ir/error.h"
#include "policy/resolve.h"
#include "runtime/runtime.h"
#include "train/gpt_step.h"
#include "train/step.h"

extern char** environ;

namespace {

int64_t monotonic_ns() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return int64_t{ts.tv_sec} * 1000000000 + ts.tv_nsec;
}

// The measured process: everything up to the moment the first step starts executing.
int child(const std::string& preset, const std::string& cache_dir) {
  using namespace keel;
  policy::PolicySources sources;
  sources.sets = {"compile_cache.dir=" + cache_dir, "shape_guard.mode=off"};
  Runtime runtime(policy::resolve_policy(sources));
  runtime::Jit* jit = &runtime.jit();
  nn::GptConfig c = nn::gpt_preset(preset);
  train::Params params = train::make_gpt_init(c)(Scalar(1.0));
  train::Params m = train::zeros_like_params(c), v = train::zeros_like_params(c);
  std::vector<Tensor> batch = bench::synthetic_batch(c);
  auto step = train::make_train_step(c);
  train::Hyper h;
  step.prepare(params, m, v, train::zero_counters(c), batch, train::step_scalars(h, 1));
  std::printf("first_step_ns %lld\n", static_cast<long long>(monotonic_ns()));
  auto [loss, norm, lr, p1, m1, v1, metrics] =
      step(params, m, v, train::zero_counters(c), batch, train::step_scalars(h, 1));
  diag::Counters n = jit->log().counters();
  std::printf("loss %.4f compiles %lld disk_hits %lld\n", loss.item(),
              static_cast<long long>(n.compiles), static_cast<long long>(n.disk_hits));
  return 0;
}

struct Trial {
  double seconds = 0;
  std::string output;
};

Trial run_child(const char* self, const std::string& preset, const std::string& dir) {
  int fds[2];
  if (pipe(fds) != 0) throw keel::Error("[bench] pipe failed");
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, fds[1], 1);
  posix_spawn_file_actions_addclose(&fa, fds[0]);
  std::vector<std::string> args = {self, "--child", preset, dir};
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  pid_t pid;
  int64_t start = monotonic_ns();
  if (posix_spawn(&pid, self, &fa, nullptr, argv.data(), environ) != 0) {
    throw keel::Error("[bench] cannot start the child process");
  }
  close(fds[1]);
  Trial t;
  char buf[4096];
  ssize_t n;
  while ((n = read(fds[0], buf, sizeof buf)) > 0) t.output.append(buf, static_cast<size_t>(n));
  close(fds[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  posix_spawn_file_actions_destroy(&fa);
  auto at = t.output.find("first_step_ns ");
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0 || at == std::string::npos) {
    throw keel::Error("[bench] child failed:\n" + t.output);
  }
  t.seconds = (std::stoll(t.output.substr(at + 14)) - start) / 1e9;
  return t;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  try {
    if (argc == 4 && std::strcmp(argv[1], "--child") == 0) return child(argv[2], argv[3]);
    std::string preset = "gpt2-s";
    int trials = 3;
    for (int i = 1; i + 1 < argc; i += 2) {
      if (std::strcmp(argv[i], "--preset") == 0) preset = argv[i + 1];
      if (std::strcmp(argv[i], "--trials") == 0) trials = std::max(1, std::atoi(argv[i + 1]));
    }
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
    double mc = median(cold), mw = median(warm);
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
