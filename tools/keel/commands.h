#pragma once
// Subcommands of the keel CLI; each registers its options and the function that runs it.
#include <CLI/CLI.hpp>

namespace keel::cli {

// Exit codes: 0 ok, 1 the job failed, 2 bad input (arguments, profiles, files).
void add_train(CLI::App& app);  // keel train, keel sample
// Gives SIGINT and SIGTERM back their default actions where keel train took them over (a
// failed launch then ends at once on mpirun's SIGTERM). Async-signal-safe.
void release_stop_signals();
void add_demo(CLI::App& app);
void add_ir(CLI::App& app);
void add_cache(CLI::App& app);     // keel cache ls | stats | verify | prune | explain
void add_explain(CLI::App& app);   // keel explain RUN_DIR
void add_report(CLI::App& app);    // keel report RUN_DIR
void add_policy(CLI::App& app);    // keel policy show | check | keys
void add_probe(CLI::App& app);     // keel probe
void add_bundle(CLI::App& app);    // keel bundle
void add_features(CLI::App& app);  // keel features

}  // namespace keel::cli
