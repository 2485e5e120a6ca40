#pragma once
// Child processes (the C++ compiler, its probes): started with posix_spawn (no shell), stdout
// and stderr captured on one pipe, under a deadline, with bounded output.
#include <optional>
#include <string>
#include <vector>

namespace keel::files {

struct ProcessResult {
  int exit_code = 0;              // 128 + signal when the child was killed
  std::string output;             // stdout and stderr, interleaved as written; the first 16 MiB
  bool output_truncated = false;  // it printed more than that (drained, not kept)
  bool timed_out = false;         // killed, with its process group, at the deadline
  bool interrupted = false;       // killed, with its process group, by interrupt_children()
};

// Ends the children run_process waits for, now and from then on (killed with their process
// groups, or never started; the result says interrupted): a stop signal's handler calls it, as
// a compiler's group does not get the terminal's Ctrl-C. Async-signal-safe.
void interrupt_children();
// Children run to their end again (a later run in the same process, tests).
void allow_children();

// The executable `name` refers to: itself when it contains '/', else the first match on PATH;
// nullopt when there is none (or it is not executable).
std::optional<std::string> find_program(const std::string& name);

// Runs argv[0] (searched on PATH) with stdin /dev/null, in a process group of its own. When
// `timeout_s` > 0 and it passes before the child exits and closes its output, the whole group
// (a compiler driver and the cc1plus it started) is killed and the result says timed_out.
// Throws keel::Error when the child cannot be started.
ProcessResult run_process(const std::vector<std::string>& argv, double timeout_s = 0);

// argv as one line, for messages.
std::string command_text(const std::vector<std::string>& argv);

}  // namespace keel::files
