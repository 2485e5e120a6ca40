#pragma once
// Subcommands of the keel CLI; each registers its options and the function that runs it.
#include <CLI/CLI.hpp>

namespace keel::cli {

// Exit codes: 0 ok, 1 the job failed, 2 bad input (arguments or files).
void add_demo(CLI::App& app);
void add_ir(CLI::App& app);

}  // namespace keel::cli
