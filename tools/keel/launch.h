#pragma once
// What every subcommand shares: the launch options (--profile, --set, --cache-dir) resolved into
// the launch policy, and --print-config.
#include <CLI/CLI.hpp>
#include <functional>
#include <string>
#include <vector>

#include "policy/launch_policy.h"

namespace keel::cli {

// Registers --profile, --set and --cache-dir on the top-level app (usable after a subcommand).
void add_launch_options(CLI::App& app);
// Defaults < profile (+ extends) < KEEL_<GROUP>_<KEY> < --cache-dir < --set; keel::InputError on
// anything bad.
policy::LaunchPolicy resolve_launch_policy();

// Adds --print-config to `cmd`; its callback prints the effective settings (this command's
// options and the launch policy with origins) and exits when it is given, else runs `fn`.
// `policy` gives the launch policy the command runs with when that is not the resolved one.
void on_run(CLI::App* cmd, std::function<void()> fn,
            std::function<policy::LaunchPolicy()> policy = resolve_launch_policy);

// Remembers the command line (main calls it first), so a message can tell an option given
// there from one its environment variable set.
void remember_arguments(int argc, char** argv);
// `name` ("--warmup"), or "--warmup (set by KEEL_TRAIN_WARMUP)" when the command line did
// not give it and `variable` is set: the message then names what the user has to change.
std::string option_text(const std::string& name, const std::string& variable);

// A command that ended as asked but not as a success (a run stopped by SIGTERM exits 143) sets
// its exit code here: the launch is not torn down as for a failure.
void set_clean_exit_code(int code);
int clean_exit_code();

}  // namespace keel::cli
