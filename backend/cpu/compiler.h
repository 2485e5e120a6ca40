#pragma once
// The one small class that runs the system C++ compiler: a child process started with
// posix_spawn (no shell), its stdout and stderr captured so a failure shows the compiler's own
// message.
#include <optional>
#include <string>
#include <vector>

namespace keel::cpu {

struct ProcessResult {
  int exit_code = 0;   // 128 + signal when the child was killed
  std::string output;  // stdout and stderr, interleaved as written
};

// The executable `name` refers to: itself when it contains '/', else the first match on PATH;
// nullopt when there is none (or it is not executable).
std::optional<std::string> find_program(const std::string& name);

// Runs argv[0] (searched on PATH) with argv. Throws keel::Error when it cannot be started.
ProcessResult run_process(const std::vector<std::string>& argv);

class Compiler {
 public:
  Compiler(std::string compiler, std::vector<std::string> flags)
      : compiler_(std::move(compiler)), flags_(std::move(flags)) {}

  // The full command line that builds `source` into the shared object `output`.
  std::vector<std::string> command(const std::string& source, const std::string& output) const;
  // Builds the shared object; on failure throws "[backend.cpu] <compiler> failed for
  // '<graph>' (exit N); source kept at <source>:\n<the compiler's message, trimmed>".
  void build(const std::string& source, const std::string& output,
             const std::string& graph_name) const;

 private:
  std::string compiler_;
  std::vector<std::string> flags_;
};

// Flags generated code relies on, placed before the user's flags (which may override them):
// C++17, position-independent code, no FMA contraction (each op rounds like the reference),
// and no errno from math functions (so sqrt and friends vectorise).
const std::vector<std::string>& required_flags();

}  // namespace keel::cpu
