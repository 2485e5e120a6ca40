#pragma once
// Benches that measure a whole process (time to first step, peak RSS) run themselves again as a
// child with other arguments and read what it prints.
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <ctime>
#include <string>
#include <vector>

#include "ir/error.h"

extern char** environ;

namespace keel::bench {

inline int64_t monotonic_ns() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return int64_t{ts.tv_sec} * 1000000000 + ts.tv_nsec;
}

inline double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

struct ChildRun {
  int64_t start_ns = 0;  // monotonic_ns() just before the child started
  std::string output;    // its stdout
};

// Runs `self` with `args`, capturing stdout; keel::Error with the output when it fails.
inline ChildRun run_self(const char* self, const std::vector<std::string>& args) {
  int fds[2];
  if (pipe(fds) != 0) throw Error("[bench] pipe failed");
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, fds[1], 1);
  posix_spawn_file_actions_addclose(&fa, fds[0]);
  std::vector<std::string> all = {self};
  all.insert(all.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (auto& a : all) argv.push_back(a.data());
  argv.push_back(nullptr);
  pid_t pid;
  ChildRun run;
  run.start_ns = monotonic_ns();
  if (posix_spawn(&pid, self, &fa, nullptr, argv.data(), environ) != 0) {
    throw Error("[bench] cannot start the child process");
  }
  close(fds[1]);
  char buf[4096];
  ssize_t n;
  while ((n = read(fds[0], buf, sizeof buf)) > 0) run.output.append(buf, static_cast<size_t>(n));
  close(fds[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  posix_spawn_file_actions_destroy(&fa);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    throw Error("[bench] child failed:\n" + run.output);
  }
  return run;
}

}  // namespace keel::bench
