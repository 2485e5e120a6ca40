#pragma once
// Subcommands of the keel CLI; each registers its options and the function that runs it.
#include <CLI/CLI.hpp>

namespace keel::cli {

// Exit codes: 0 ok, 1 the job failed, 2 bad input (arguments or files).
void add_demo(CLI::App& app);
void add_ir(CLI::App& app);
void add_cache(CLI::App& app);    // keel cache ls | stats | verify | prune | explain
void add_explain(CLI::App& app);  // keel explain RUN_DIR

}  // namespace keel::cli
