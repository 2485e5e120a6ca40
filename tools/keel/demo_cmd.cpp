#include <fmt/format.h>

#include <memory>

#include "backend/cpu/client.h"
#include "backend/ref/client.h"
#include "ir/error.h"
#include "ir/text.h"
#include "runtime/jit.h"
#include "tools/keel/commands.h"
#include "tools/keel/files.h"
#include "train/tiny_lm.h"

namespace keel::cli {
namespace {

struct DemoOptions {
  TinyLmConfig model;
  std::string backend = "cpu";
  std::string cache_dir;
  std::string run_dir;
  std::string dump;
};

void run_demo(const DemoOptions& o) {
  runtime::JitConfig jc;
  jc.client = o.backend == "cpu" ? cpu::make_cpu_client() : ref::make_ref_client();
  jc.cache.dir = o.cache_dir;
  jc.run_dir = o.run_dir;
  auto jit = std::make_shared<runtime::JitExecutor>(jc);
  set_default_executor(jit);
  const TinyLmConfig& c = o.model;
  fmt::print(
      "keel demo: byte-level MLP LM, context {}, batch {}, lr {}, {} steps on the {} "
      "backend (cache {})\n",
      c.context, c.batch, c.lr, c.steps, o.backend, jit->cache().dir());
  TinyLmRun run = run_tiny_lm(c, tiny_lm_default_text(), [&](int64_t s, double loss) {
    fmt::print("step {:>4}/{}  loss {:.4f}\n", s + 1, c.steps, loss);
    std::fflush(stdout);
  });
  for (const diag::CompileEvent& e : jit->log().events()) {
    fmt::print("program {} {}: {} in {:.2f} s ({})\n", e.function, e.key.substr(0, 12),
               e.tier == "compiled" ? "compiled" : "loaded from disk", e.seconds, e.reason);
  }
  diag::Counters n = jit->log().counters();
  fmt::print(
      "loss {:.4f} -> {:.4f} over {} steps; train_step traced {} time(s), {} nodes, "
      "key {}; compiles {}, disk loads {}, memory hits {}\n",
      run.losses.front(), run.losses.back(), run.losses.size(), run.traces, run.step_graph.size(),
      run.step_key.hex(), n.compiles, n.disk_hits, n.memory_hits);
  if (!o.dump.empty()) {
    write_file_atomically(o.dump, print_graph(run.step_graph));
    fmt::print("wrote {}\n", o.dump);
  }
  if (!(run.losses.back() < run.losses.front())) throw CLI::RuntimeError("loss did not fall", 1);
}

}  // namespace

void add_demo(CLI::App& app) {
  auto o = std::make_shared<DemoOptions>();
  CLI::App* cmd = app.add_subcommand(
      "demo",
      "Train a tiny byte-level model whose whole step is one traced program, compiled "
      "once (or loaded from the cache), and print the falling loss");
  TinyLmConfig& m = o->model;
  cmd->add_option("--steps", m.steps, "training steps")
      ->capture_default_str()
      ->check(CLI::Range(1, 100000));
  cmd->add_option("--lr", m.lr, "SGD learning rate (a device scalar)")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  cmd->add_option("--batch-size", m.batch, "windows per step")
      ->capture_default_str()
      ->check(CLI::Range(1, 4096));
  cmd->add_option("--seed", m.seed, "parameter initialisation seed")->capture_default_str();
  cmd->add_option("--backend", o->backend, "cpu (compiled) or ref (reference interpreter)")
      ->capture_default_str()
      ->check(CLI::IsMember({"cpu", "ref"}));
  cmd->add_option(
      "--cache-dir", o->cache_dir,
      "executable cache (default: $KEEL_CACHE_DIR, $XDG_CACHE_HOME/keel, ~/.cache/keel)");
  cmd->add_option("--run-dir", o->run_dir, "write compiles.jsonl here");
  cmd->add_option("--dump-ir", o->dump, "write the train step's program (canonical text) here");
  cmd->callback([o] { run_demo(*o); });
}

}  // namespace keel::cli
