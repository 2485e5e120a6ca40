#pragma once
// The one small class that runs the system C++ compiler: a child process started with
// posix_spawn (no shell), its stdout and stderr captured so a failure shows the compiler's own
// message.
#include <optional>
#include <string>
#include <vector>

#include "files/process.h"
#include "ir/error.h"

namespace keel::cpu {

using files::command_text;
using files::find_program;
using files::ProcessResult;

// files::run_process, with the launch policy's fix in the message when it cannot start.
ProcessResult run_process(const std::vector<std::string>& argv, double timeout_s = 0);

// The first line `compiler --version` prints (no shell), "" when it cannot be started or
// fails; remembered per compiler. keel::Error naming the command and the deadline when it does
// not finish within timeout_s (0: no deadline).
std::string compiler_version(const std::string& compiler, double timeout_s);

// A build that files::interrupt_children() stopped: nothing went wrong, so nothing is kept.
class BuildStopped : public Stopped {
 public:
  using Stopped::Stopped;
};

class Compiler {
 public:
  // timeout_s: the deadline of each build (0: none).
  Compiler(std::string compiler, std::vector<std::string> flags, double timeout_s = 0)
      : compiler_(std::move(compiler)), flags_(std::move(flags)), timeout_s_(timeout_s) {}

  // The full command line that builds `source` into the shared object `output`.
  std::vector<std::string> command(const std::string& source, const std::string& output) const;
  // Builds the shared object; on failure throws "[backend.cpu] <compiler> failed for
  // '<graph>' (exit N); source kept at <source>:\n<the compiler's message, trimmed>", past
  // the deadline "[backend.cpu] the compiler did not finish '<graph>' within T s ...", and
  // BuildStopped when interrupted.
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
