// keel policy show | check | keys: the launch policy, where each value came from, and the rules.
#include <fmt/format.h>

#include <memory>

#include "policy/resolve.h"
#include "tools/keel/commands.h"
#include "tools/keel/launch.h"

namespace keel::cli {
namespace {

void show(bool json) {
  policy::LaunchPolicy p = resolve_launch_policy();
  if (json) {
    fmt::print("{}\n", p.to_json(true));
    return;
  }
  fmt::print(
      "# effective launch policy (precedence: default < profile < KEEL_<GROUP>_<KEY> < "
      "--cache-dir < --set)\n{}",
      p.to_text());
}

void keys() {
  std::string group;
  for (const policy::KeySpec& k : policy::policy_schema()) {
    if (k.group != group) {
      fmt::print("{}[{}]\n", group.empty() ? "" : "\n", k.group);
      group = k.group;
    }
    fmt::print("  {:<28} {}\n  {:<28} {}; default {}; env {}{}\n", k.key, k.doc, "",
               k.allowed_text(), policy::value_text(k.fallback), k.env_name(),
               k.codegen ? "; part of the cache key" : "");
  }
  fmt::print("\nprofiles: {}\n",
             fmt::join(policy::list_profiles(policy::default_profile_dirs()), ", "));
}

// Required signatures with no key trusted stop every command at start, unless a key comes from
// KEEL_COMPILE_CACHE_* or --set at launch: legal in a profile, so a note and not an error.
void note_untrusted_signatures(const policy::LaunchPolicy& p) {
  const std::string& mode = p.string("compile_cache.signatures");
  if (mode == "off" || !p.strings("compile_cache.trusted_keys").empty() ||
      !p.string("compile_cache.signing_key").empty()) {
    return;
  }
  fmt::print(stderr,
             "[policy] {}: note: compile_cache.signatures = \"{}\" but no key is trusted; "
             "every command will refuse to start unless compile_cache.trusted_keys or "
             "compile_cache.signing_key comes from the environment or --set\n",
             p.setting("compile_cache.signatures").origin.text(), mode);
}

}  // namespace

void add_policy(CLI::App& app) {
  CLI::App* cmd = app.add_subcommand("policy", "Show, check and list the launch policy");
  cmd->require_subcommand(1);
  auto json = std::make_shared<bool>(false);
  CLI::App* s = cmd->add_subcommand(
      "show", "Print the effective policy and where each value came from (--profile, --set)");
  s->add_flag("--json", *json, "one JSON object: {group: {key: {value, origin}}}");
  on_run(s, [json] { show(*json); });

  auto file = std::make_shared<std::string>();
  CLI::App* c = cmd->add_subcommand("check", "Validate a profile file (and what it extends)");
  c->add_option("FILE", *file, "a profile .toml")->required();
  on_run(c, [file] {
    const policy::LaunchPolicy p =
        policy::check_profile_file(*file, policy::default_profile_dirs());
    fmt::print("{}: ok\n", *file);
    note_untrusted_signatures(p);
  });

  CLI::App* k = cmd->add_subcommand("keys",
                                    "Every policy key: meaning, allowed values, default, "
                                    "environment variable");
  on_run(k, keys);
}

}  // namespace keel::cli
