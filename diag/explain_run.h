#pragma once
// `keel explain RUN_DIR`: what a run compiled or loaded, per function, and why each program
// was needed — read back from RUN_DIR/compiles.jsonl.
#include <cstdint>
#include <string>
#include <vector>

#include "diag/compile_log.h"

namespace keel::diag {

struct FunctionRun {
  std::string function;
  int64_t programs = 0;                // distinct keys
  int64_t last_new_program_step = -1;  // step of the latest first-seen key
  CompileTotals totals;                // its lookups by tier
  std::vector<CompileEvent> events;    // its compiles and disk loads, in log order
};

struct RunSummary {
  std::string source;                  // the log it was read from
  std::vector<FunctionRun> functions;  // in order of first appearance
  int64_t programs = 0;
  CompileTotals totals;
};

RunSummary summarize_run(const std::vector<CompileEvent>& events, std::string source = "");
// Reads <run_dir>/compiles.jsonl; a missing directory or file, or a bad line, is an InputError.
RunSummary summarize_run_dir(const std::string& run_dir);
// One header line, then per function a line of totals and one line per compile or load:
// step, tier, seconds, key prefix, reason.
std::string format_run_summary(const RunSummary& summary);

}  // namespace keel::diag
