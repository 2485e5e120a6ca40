// keel probe: is the backend alive, not merely installed. Exit 0 only when no check fails.
#include <fmt/format.h>

#include <memory>

#include "runtime/probe.h"
#include "tools/keel/commands.h"
#include "tools/keel/launch.h"

namespace keel::cli {

void add_probe(CLI::App& app) {
  auto json = std::make_shared<bool>(false);
  CLI::App* cmd = app.add_subcommand(
      "probe",
      "Check the backend is alive: compiler, a compiled program against the reference, its "
      "warm reload, BLAS speed, OpenMP threads, cache directory; exit 1 on any FAIL");
  cmd->add_flag("--json", *json, "one JSON object: {ok, checks: [{name, status, detail, next}]}");
  on_run(cmd, [json] {
    runtime::ProbeReport r = runtime::run_probe(resolve_launch_policy());
    fmt::print("{}", *json ? r.json() + "\n" : r.text());
    if (!r.ok()) throw CLI::RuntimeError("", 1);
  });
}

}  // namespace keel::cli
