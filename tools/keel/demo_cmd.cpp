#include <fmt/format.h>

#include <cmath>
#include <cstdlib>
#include <memory>

#include "files/publish.h"
#include "ir/error.h"
#include "ir/text.h"
#include "runtime/runtime.h"
#include "tools/keel/commands.h"
#include "tools/keel/launch.h"
#include "train/tiny_lm.h"

namespace keel::cli {
namespace {

struct DemoOptions {
  TinyLmConfig model;
  std::string run_dir;
  std::string dump;
};

void run_demo(DemoOptions o) {
  Runtime runtime(resolve_launch_policy(), {o.run_dir, nullptr});
  runtime::CachedJit* jit = &runtime.jit();
  TinyLmConfig& c = o.model;
  c.seed = static_cast<uint64_t>(runtime.policy().integer("launch.seed"));
  if (!o.run_dir.empty()) files::publish_file(o.run_dir + "/record.json", runtime.record_json());
  fmt::print(
      "keel demo: byte-level MLP LM, context {}, batch {}, lr {}, {} steps on the {} "
      "backend (profile {}, cache {})\n",
      c.context, c.batch, c.lr, c.steps, runtime.policy().string("launch.backend"),
      runtime.policy().string("launch.profile"), jit->cache().dir());
  TinyLmRun run = run_tiny_lm(c, tiny_lm_default_text(), [&](int64_t s, double loss) {
    fmt::print("step {:>4}/{}  loss {:.4f}\n", s + 1, c.steps, loss);
    std::fflush(stdout);
  });
  for (const diag::CompileEvent& e : jit->log().events()) {
    fmt::print("program {} {}: {} in {:.2f} s ({})\n", e.function, e.key.substr(0, 12),
               e.tier == "compiled" ? "compiled" : "loaded from disk", e.seconds, e.reason);
  }
  diag::CompileTotals n = jit->log().totals();
  fmt::print(
      "loss {:.4f} -> {:.4f} over {} steps; train_step traced {} time(s), {} nodes, "
      "graph hash {}; compiles {}, disk loads {}, memory hits {}\n",
      run.losses.front(), run.losses.back(), run.losses.size(), run.traces, run.step_graph.size(),
      run.step_graph_hash.hex(), n.compiles, n.disk_hits, n.memory_hits);
  if (!o.dump.empty()) {
    files::publish_file(o.dump, print_graph(run.step_graph));
    fmt::print("wrote {}\n", o.dump);
  }
  // One step has no later loss to compare; every longer run must show the fall.
  if (run.losses.size() < 2) {
    fmt::print("one step: no later loss to compare; run --steps 2 or more to see it fall\n");
  } else if (!(run.losses.back() < run.losses.front())) {
    throw CLI::RuntimeError("loss did not fall", 1);
  }
}

}  // namespace

void add_demo(CLI::App& app) {
  auto o = std::make_shared<DemoOptions>();
  CLI::App* cmd = app.add_subcommand(
      "demo",
      "Train a tiny byte-level model whose whole step is one traced program, compiled "
      "once (or loaded from the cache), and print the falling loss. Backend, seed and cache "
      "come from the launch policy (--profile, --set launch.backend=ref, --cache-dir)");
  TinyLmConfig& m = o->model;
  cmd->add_option("--steps", m.steps, "training steps")
      ->capture_default_str()
      ->envname("KEEL_DEMO_STEPS")
      ->check(CLI::Range(1, 100000));
  cmd->add_option("--lr", m.lr, "SGD learning rate (a device scalar)")
      ->capture_default_str()
      ->envname("KEEL_DEMO_LR")
      ->check(CLI::Validator(
          [](std::string& text) {
            const double lr = std::strtod(text.c_str(), nullptr);
            return lr > 0 && std::isfinite(lr) ? std::string()
                                               : text +
                                                     " is not a learning rate; give a finite "
                                                     "number > 0";
          },
          "X > 0"));
  cmd->add_option("--batch-size", m.batch, "windows per step")
      ->capture_default_str()
      ->envname("KEEL_DEMO_BATCH_SIZE")
      ->check(CLI::Range(1, 4096));
  cmd->add_option("--run-dir", o->run_dir, "write record.json and compiles.jsonl here")
      ->capture_default_str()
      ->envname("KEEL_DEMO_RUN_DIR");
  cmd->add_option("--dump-ir", o->dump, "write the train step's program (canonical text) here")
      ->capture_default_str()
      ->envname("KEEL_DEMO_DUMP_IR");
  on_run(cmd, [o] { run_demo(*o); });
}

}  // namespace keel::cli
