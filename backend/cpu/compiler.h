#pragma once
// The one small class that runs the system C++ compiler: a child process started with
// posix_spawn (no shell), its stdout and stderr captured so a failure shows the compiler's own
// message.
#include <optional>
#include <string>
#include <vector>

namespace keel::cpu {

struct ProcessResult {
  int exit_code = 0;       // 128 + signal when the child was killed
  std::string output;      // stdout and stderr, interleaved as written
  bool timed_out = false;  // killed, with its process group, at the deadline
};

// The executable `name` refers to: itself when it contains '/', else the first match on PATH;
// nullopt when there is none (or it is not executable).
std::optional<std::string> find_program(const std::string& name);

// Runs argv[0] (searched on PATH) with argv in a process group of its own. When `timeout_s`
// > 0 and it passes before the child exits and closes its output, the whole group (a
// compiler driver and the cc1plus it started) is killed and the result says timed_out.
// Throws keel::Error when the child cannot be started.
ProcessResult run_process(const std::vector<std::string>& argv, double timeout_s = 0);

// argv as one line, for messages.
std::string command_text(const std::vector<std::string>& argv);

// The first line `compiler --version` prints (no shell), "" when it cannot be started or
// fails; remembered per compiler. keel::Error naming the command and the deadline when it does
// not finish within timeout_s (0: no deadline).
std::string compiler_version(const std::string& compiler, double timeout_s);

class Compiler {
 public:
  // timeout_s: the deadline of each build (0: none).
  Compiler(std::string compiler, std::vector<std::string> flags, double timeout_s = 0)
      : compiler_(std::move(compiler)), flags_(std::move(flags)), timeout_s_(timeout_s) {}

  // The full command line that builds `source` into the shared object `output`.
  std::vector<std::string> command(const std::string& source, const std::string& output) const;
  // Builds the shared object; on failure throws "[backend.cpu] <compiler> failed for
  // '<graph>' (exit N); source kept at <source>:\n<the compiler's message, trimmed>", past
  // the deadline "[backend.cpu] the compiler did not finish '<graph>' within T s ...".
  void build(const std::string& source, const std::string& output,
             const std::string& graph_name) const;

 private:
  std::string compiler_;
  std::vector<std::string> flags_;
  double timeout_s_;
};

// Flags generated code relies on, placed before the user's flags (which may override them):
// C++17, position-independent code, FMA contraction (a multiply-add rounds once: within the
// reference tolerances, 2.5% off a gpt2-s step), and no errno from math functions (so sqrt
// and friends vectorise).
const std::vector<std::string>& required_flags();

}  // namespace keel::cpu
