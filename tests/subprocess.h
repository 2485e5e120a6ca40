#pragma once
// Running a helper process from a test: its exit status and everything it printed.
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

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

// Where LLVM's OpenMP runtime (the clang-built sanitizer tree's) registers process `pid`.
inline std::string omp_registration_name(pid_t pid) {
  return "/__KMP_REGISTERED_LIB_" + std::to_string(pid) + "_" + std::to_string(::getuid());
}

// Waits for child `pid` and returns its waitpid status, -1 if it is not a child. A dead
// process's OpenMP registration is left behind when it was killed (and by the cache worker even
// when not), torn if killed while writing it: the next process given that pid then aborts
// ("OMP: Error #15"). It is removed while the child is a zombie, so the pid is not yet reused
// (libomp falls back to a file in /tmp where it has no /dev/shm).
inline int reap_child(pid_t pid) {
  siginfo_t info{};
  if (::waitid(P_PID, static_cast<id_t>(pid), &info, WEXITED | WNOWAIT) != 0) return -1;
  ::shm_unlink(omp_registration_name(pid).c_str());
  ::unlink(("/tmp" + omp_registration_name(pid)).c_str());
  int status = 0;
  return ::waitpid(pid, &status, 0) == pid ? status : -1;
}

}  // namespace keel::testing_support
