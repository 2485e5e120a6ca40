// keel bundle and keel features: the compatibility bundle of this launch, and which optional
// features it has.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <memory>
#include <nlohmann/json.hpp>

#include "ir/text.h"
#include "ir/utf8_escape.h"
#include "policy/features.h"
#include "runtime/backends.h"
#include "runtime/runtime.h"
#include "tools/keel/commands.h"
#include "tools/keel/launch.h"

namespace keel::cli {

void add_bundle(CLI::App& app) {
  auto json = std::make_shared<bool>(false);
  CLI::App* cmd = app.add_subcommand(
      "bundle",
      "Print the compatibility bundle (keel revision, compiler, codegen flags, CPU ISA, BLAS, "
      "OpenMP, OS) whose hash is part of every cache key");
  cmd->add_flag("--json", *json, "one JSON object of the fields, plus \"hash\"");
  on_run(cmd, [json] {
    policy::Bundle b = launch_bundle(resolve_launch_policy());
    if (*json) {
      nlohmann::ordered_json j = nlohmann::ordered_json::parse(b.to_json());
      j["hash"] = b.hash();
      j["backends"] = registered_backend_names();
      fmt::print("{}\n", j.dump(2));
      return;
    }
    for (const auto& [k, v] : b.fields) fmt::print("{:<18} {}\n", k, v);
    fmt::print("{:<18} {}\n", "hash", b.hash());
    // Not part of the hash: which backends this build could run on, the launch's marked.
    fmt::print("{:<18} {} (launch.backend = {})\n", "backends",
               fmt::join(registered_backend_names(), ", "),
               resolve_launch_policy().string("launch.backend"));
  });
}

void add_features(CLI::App& app) {
  auto json = std::make_shared<bool>(false);
  CLI::App* cmd = app.add_subcommand(
      "features", "List optional features: available or not, why, and the fallback");
  cmd->add_flag("--json", *json, "one JSON array of {name, available, why, fallback}");
  on_run(cmd, [json] {
    const policy::LaunchPolicy launch = resolve_launch_policy();
    std::vector<policy::Feature> table = backend_features(launch);
    for (policy::Feature& f : feature_table(launch_bundle(launch))) {
      table.push_back(std::move(f));
    }
    if (*json) {
      nlohmann::ordered_json j = nlohmann::ordered_json::array();
      for (const auto& f : table) {
        j.push_back({{"name", f.name},
                     {"available", f.available},
                     {"why", bytes_to_utf8(f.why)},
                     {"fallback", f.fallback}});
      }
      fmt::print("{}\n", j.dump(2));
      return;
    }
    for (const auto& f : table) {
      fmt::print("{:<12} {:<11} {}\n", f.name, f.available ? "available" : "unavailable",
                 printable_text(f.why));
      if (!f.available) fmt::print("{:<24} fallback: {}\n", "", f.fallback);
    }
    fmt::print(
        "request with features.request; unavailable ones warn or fail per "
        "features.on_unavailable\n");
  });
}

}  // namespace keel::cli
