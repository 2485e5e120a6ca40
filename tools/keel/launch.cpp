#include "tools/keel/launch.h"

#include <fmt/format.h>

#include <cstdlib>
#include <memory>

#include "policy/resolve.h"

namespace keel::cli {
namespace {

struct LaunchOptions {
  std::string profile;
  std::vector<std::string> sets;
  std::string cache_dir;
};

LaunchOptions& options() {
  static LaunchOptions o;
  return o;
}

}  // namespace

void add_launch_options(CLI::App& app) {
  LaunchOptions& o = options();
  app.fallthrough();
  app.add_option("--profile", o.profile,
                 "launch profile: a name under profiles/ or a .toml path (env "
                 "KEEL_LAUNCH_PROFILE) [default: none]");
  app.add_option("--set", o.sets,
                 "override one policy key, group.key=value; repeatable; beats the profile and "
                 "KEEL_<GROUP>_<KEY> (see 'keel policy keys')")
      ->allow_extra_args(false);
  app.add_option("--cache-dir", o.cache_dir,
                 "executable cache directory, same as --set compile_cache.dir=DIR (env "
                 "KEEL_COMPILE_CACHE_DIR) [default: $XDG_CACHE_HOME/keel or ~/.cache/keel]")
      // An empty shell variable must not mean the default cache (prune would empty that).
      ->check(CLI::Validator(
          [](std::string& dir) {
            return dir.empty() ? std::string(
                                     "an empty path; give a directory, or leave "
                                     "--cache-dir out for the default cache")
                               : std::string();
          },
          "DIR"));
}

policy::LaunchPolicy resolve_launch_policy() {
  const LaunchOptions& o = options();
  policy::PolicySources s;
  s.profile = o.profile;
  s.environment = policy::keel_environment();
  if (!o.cache_dir.empty()) s.sets.push_back("compile_cache.dir=" + o.cache_dir);
  for (const std::string& set : o.sets) s.sets.push_back(set);
  return policy::resolve_policy(s);
}

namespace {
int clean_exit = 0;
std::vector<std::string> arguments;
}  // namespace

void remember_arguments(int argc, char** argv) {
  arguments.assign(argv + 1, argv + argc);
}

std::string option_text(const std::string& name, const std::string& variable) {
  for (const std::string& arg : arguments) {
    if (arg == name || arg.starts_with(name + "=")) return name;
  }
  const char* value = variable.empty() ? nullptr : std::getenv(variable.c_str());
  return value ? fmt::format("{} (set by {})", name, variable) : name;
}

void set_clean_exit_code(int code) {
  clean_exit = code;
}
int clean_exit_code() {
  return clean_exit;
}

void on_run(CLI::App* cmd, std::function<void()> fn, std::function<policy::LaunchPolicy()> policy) {
  auto print = std::make_shared<bool>(false);
  cmd->add_flag("--print-config", *print,
                "print this command's effective settings (options and launch policy, with "
                "where each came from) and exit");
  cmd->callback([cmd, print, fn, policy] {
    if (!*print) {
      fn();
      return;
    }
    std::string path;
    for (const CLI::App* a = cmd; a && a->get_parent(); a = a->get_parent()) {
      path = a->get_name() + (path.empty() ? "" : " " + path);
    }
    std::string opts = cmd->config_to_str(/*default_also=*/true, /*write_description=*/false);
    fmt::print("# keel {}: options\n{}\n# launch policy (value  # origin)\n{}", path,
               opts.empty() ? "# (none)\n" : opts, policy().to_text());
  });
}

}  // namespace keel::cli
