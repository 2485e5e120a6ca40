// `keel explain RUN_DIR`: per function, the programs a run needed and why (diag/explain_run.h),
// then how its training state lies over the processes (explain_state.h).
#include <fmt/format.h>

#include <memory>

#include "diag/explain_run.h"
#include "tools/keel/commands.h"
#include "tools/keel/explain_state.h"
#include "tools/keel/launch.h"

namespace keel::cli {

void add_explain(CLI::App& app) {
  auto dir = std::make_shared<std::string>();
  CLI::App* cmd = app.add_subcommand(
      "explain",
      "Summarise RUN_DIR/compiles.jsonl: programs, compiles and loads per function, and why "
      "each program was needed; then each tensor of the training state: its shape, how it is "
      "split over the processes, its bytes on each");
  cmd->add_option("RUN_DIR", *dir, "a run directory holding compiles.jsonl")->required();
  on_run(cmd, [dir] {
    fmt::print("{}", diag::format_run_summary(diag::summarize_run_dir(*dir)));
    const std::string state = describe_state(*dir);
    if (!state.empty()) fmt::print("\n{}", state);
  });
}

}  // namespace keel::cli
