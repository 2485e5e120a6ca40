// keel probe: is the backend alive, not merely installed. Exit 0 only when no check of the
// launch's backend or of the launch as a whole fails; other registered backends are reported.
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
      "Check every registered backend is alive (its libraries and compiler, a compiled program "
      "against the reference, its warm reload), then OpenMP threads and the cache directory; "
      "exit 1 when a check of launch.backend or of the launch fails");
  cmd->add_flag("--json", *json,
                "one JSON object: {ok, launch_backend, backends: [{name, summary}], checks: "
                "[{name, status, backend, detail, next}]}");
  on_run(cmd, [json] {
    runtime::ProbeReport r = runtime::run_probe(resolve_launch_policy());
    fmt::print("{}", *json ? r.json() + "\n" : r.text());
    if (!r.ok()) throw CLI::RuntimeError("", 1);
  });
}

}  // namespace keel::cli
