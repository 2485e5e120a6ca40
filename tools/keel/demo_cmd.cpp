#include <fmt/format.h>

#include <memory>

#include "backend/ref/executor.h"
#include "ir/text.h"
#include "tools/keel/commands.h"
#include "tools/keel/files.h"
#include "train/tiny_lm.h"

namespace keel::cli {

void add_demo(CLI::App& app) {
  auto config = std::make_shared<TinyLmConfig>();
  auto dump = std::make_shared<std::string>();
  CLI::App* cmd = app.add_subcommand(
      "demo",
      "Train a tiny byte-level model whose whole step is one traced program, on the "
      "reference interpreter, and print the falling loss");
  cmd->add_option("--steps", config->steps, "training steps")
      ->capture_default_str()
      ->check(CLI::Range(1, 100000));
  cmd->add_option("--lr", config->lr, "SGD learning rate (a device scalar)")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  cmd->add_option("--batch-size", config->batch, "windows per step")
      ->capture_default_str()
      ->check(CLI::Range(1, 4096));
  cmd->add_option("--seed", config->seed, "parameter initialisation seed")->capture_default_str();
  cmd->add_option("--dump-ir", *dump, "write the train step's program (canonical text) here");
  cmd->callback([config, dump] {
    set_default_executor(ref::make_executor());
    fmt::print(
        "keel demo: byte-level MLP LM, context {}, batch {}, lr {}, {} steps on the "
        "reference interpreter\n",
        config->context, config->batch, config->lr, config->steps);
    TinyLmRun run = run_tiny_lm(*config, tiny_lm_default_text(), [&](int64_t s, double loss) {
      fmt::print("step {:>4}/{}  loss {:.4f}\n", s + 1, config->steps, loss);
      std::fflush(stdout);
    });
    fmt::print(
        "loss {:.4f} -> {:.4f} over {} steps; train_step traced {} time(s), {} nodes, "
        "key {}\n",
        run.losses.front(), run.losses.back(), run.losses.size(), run.traces, run.step_graph.size(),
        run.step_key.hex());
    if (!dump->empty()) {
      write_file_atomically(*dump, print_graph(run.step_graph));
      fmt::print("wrote {}\n", *dump);
    }
    if (!(run.losses.back() < run.losses.front())) throw CLI::RuntimeError("loss did not fall", 1);
  });
}

}  // namespace keel::cli
