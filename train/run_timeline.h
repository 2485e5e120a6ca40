#pragma once
// RUN_DIR/trace.json: the run's timeline for Perfetto or chrome://tracing, one track group per
// rank and one track per thread (init, data, trace, compile, load, each step, eval, checkpoints).
#include <string>

#include "runtime/runtime.h"

namespace keel::train {

// Turns this process's recorder on and names its tracks after the rank and host; the time from
// the process's start to now (runtime start-up, argument parsing) becomes the "init" span.
void start_run_timeline(const Runtime& rt);

// Every process calls it together when `gather`: the leader writes every rank's events into
// RUN_DIR/trace.json, atomically. Without `gather` (after a failure, when peers may be gone)
// the leader writes its own. Returns the path.
std::string write_run_timeline(const std::string& run_dir, bool leader, bool gather);

}  // namespace keel::train
