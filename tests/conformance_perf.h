#pragma once
// The conformance suite's performance mode (conformance_test --perf): every op's conformance
// program compiled and timed on every registered backend, the reference interpreter the baseline.

namespace keel::cpu_test {

// Parses the mode's options (--perf among them), prints one line per op, returns the exit code:
// 2 and one "[conformance] ..." line for bad options, 1 with the backend's line when it fails.
int run_conformance_perf(int argc, char** argv);

}  // namespace keel::cpu_test
