#pragma once
// Running a helper process from a test: its exit status and everything it printed.
#include <sys/wait.h>

#include <cstdio>
#include <string>

namespace keel::testing_support {

struct CommandResult {
  int exit_code = -1;
  std::string output;
};

// Runs `command` through the shell; add " 2>&1" to capture stderr too.
inline CommandResult run_command(const std::string& command) {
  CommandResult r;
  FILE* p = popen(command.c_str(), "r");
  if (!p) return r;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) r.output.append(buf, n);
  int status = pclose(p);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return r;
}

}  // namespace keel::testing_support
