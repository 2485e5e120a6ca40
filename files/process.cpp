// Running a child process: posix_spawnp with stdout and stderr on one pipe, read to the end
// before waiting, so a chatty child cannot block on a full pipe; both under one deadline.
#include "files/process.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <thread>

#include "ir/error.h"

extern char** environ;

namespace keel::files {
namespace {

constexpr size_t kMaxOutputBytes = size_t{16} << 20;
// How often a wait looks at the interrupt: a stop is noticed within this.
constexpr int kInterruptPollMs = 50;
// How long a group ended early has to clean up after SIGTERM before SIGKILL.
constexpr int kTermGraceMs = 500;

std::atomic<bool> children_interrupted{false};
static_assert(std::atomic<bool>::is_always_lock_free,
              "a signal handler may only touch lock-free atomics");

class Pipe {
 public:
  Pipe() {
    if (::pipe2(fd_, O_CLOEXEC) != 0) {
      throw Error(fmt::format("[files] cannot create a pipe for a child process: {}",
                              std::strerror(errno)));
    }
  }
  ~Pipe() {
    close_read();
    close_write();
  }
  int read_end() const { return fd_[0]; }
  int write_end() const { return fd_[1]; }
  void close_read() { close_fd(fd_[0]); }
  void close_write() { close_fd(fd_[1]); }

 private:
  static void close_fd(int& fd) {
    if (fd >= 0) ::close(fd);
    fd = -1;
  }
  int fd_[2] = {-1, -1};
};

using Clock = std::chrono::steady_clock;

// A point in time, or none (timeout 0).
class Deadline {
 public:
  explicit Deadline(double timeout_s)
      : none_(timeout_s <= 0),
        at_(Clock::now() + std::chrono::duration_cast<Clock::duration>(
                               std::chrono::duration<double>(none_ ? 0.0 : timeout_s))) {}
  bool passed() const { return !none_ && Clock::now() >= at_; }
  // Milliseconds left for poll(): -1 when there is no deadline.
  int poll_ms() const {
    if (none_) return -1;
    const auto left = std::chrono::ceil<std::chrono::milliseconds>(at_ - Clock::now()).count();
    return static_cast<int>(std::clamp<int64_t>(left, 0, INT32_MAX));
  }

 private:
  bool none_;
  Clock::time_point at_;
};

enum class Waited { done, deadline, interrupted };

// Appends everything written to `fd` until every writer closed it, the deadline passed or the
// children were interrupted. A reader that drains the pipe: a chatty child never blocks on it.
Waited read_until_closed(int fd, const Deadline& deadline, std::string& out, bool& truncated) {
  char buf[4096];
  for (;;) {
    if (children_interrupted.load()) return Waited::interrupted;
    const int left = deadline.poll_ms();
    pollfd p{fd, POLLIN, 0};
    const int ready = ::poll(&p, 1, left < 0 ? kInterruptPollMs : std::min(left, kInterruptPollMs));
    if (ready < 0 && errno == EINTR) continue;
    if (ready == 0) {
      if (deadline.passed()) return Waited::deadline;
      continue;
    }
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n > 0) {
      // Drained past the cap but not kept: a child that never stops talking cannot exhaust memory.
      const size_t keep =
          std::min(static_cast<size_t>(n), kMaxOutputBytes - std::min(kMaxOutputBytes, out.size()));
      out.append(buf, keep);
      truncated = truncated || keep < static_cast<size_t>(n);
    } else if (n == 0 || errno != EINTR) {
      return Waited::done;
    }
  }
}

// Reaps `pid` into `status` unless the deadline passes or the children are interrupted first.
// The child has closed its output, so it is normally exiting already: short sleeps, up to 50 ms.
Waited wait_until(pid_t pid, const Deadline& deadline, int& status) {
  auto pause = std::chrono::microseconds(100);
  for (;;) {
    const pid_t done = ::waitpid(pid, &status, WNOHANG);
    if (done == pid) return Waited::done;
    if (done < 0 && errno != EINTR) {
      throw Error(fmt::format("[files] waiting for pid {} failed: {}", pid, std::strerror(errno)));
    }
    if (deadline.passed()) return Waited::deadline;
    if (children_interrupted.load()) return Waited::interrupted;
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, std::chrono::microseconds(50000));
  }
}

// Ends the process group `leader` leads: SIGTERM first, so a compiler driver removes its
// temporary files, then SIGKILL for what is left. The leader stays unreaped (a zombie) until
// after the SIGKILL, so its pid, the group's id, cannot be reused in between.
void end_group(pid_t leader) {
  ::kill(-leader, SIGTERM);
  for (int i = 0; i < kTermGraceMs / 10; ++i) {
    siginfo_t info{};
    if (::waitid(P_PID, static_cast<id_t>(leader), &info, WEXITED | WNOHANG | WNOWAIT) == 0 &&
        info.si_pid == leader) {
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ::kill(-leader, SIGKILL);
}

}  // namespace

void interrupt_children() {
  children_interrupted.store(true);
}

void allow_children() {
  children_interrupted.store(false);
}

std::optional<std::string> find_program(const std::string& name) {
  if (name.empty()) return std::nullopt;
  if (name.find('/') != std::string::npos) {
    if (::access(name.c_str(), X_OK) == 0) return name;
    return std::nullopt;
  }
  const char* path = std::getenv("PATH");
  std::string dirs = path ? path : "/usr/bin:/bin";
  size_t start = 0;
  while (start <= dirs.size()) {
    size_t colon = dirs.find(':', start);
    std::string dir = dirs.substr(start, colon == std::string::npos ? colon : colon - start);
    std::string candidate = (dir.empty() ? "." : dir) + "/" + name;
    if (::access(candidate.c_str(), X_OK) == 0) return candidate;
    if (colon == std::string::npos) break;
    start = colon + 1;
  }
  return std::nullopt;
}

std::string command_text(const std::vector<std::string>& argv) {
  std::string out;
  for (const std::string& a : argv) out += (out.empty() ? "" : " ") + a;
  return out;
}

ProcessResult run_process(const std::vector<std::string>& argv, double timeout_s) {
  if (argv.empty()) throw Error("[files] run_process needs a program to run");
  if (children_interrupted.load()) {
    ProcessResult never;
    never.interrupted = true;
    never.exit_code = 128 + SIGKILL;
    return never;
  }
  Pipe pipe;
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_adddup2(&actions, pipe.write_end(), 1);
  posix_spawn_file_actions_adddup2(&actions, pipe.write_end(), 2);
  // A group of its own, so a deadline kills what the driver started too (cc1plus, as, ld).
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETPGROUP);
  posix_spawnattr_setpgroup(&attr, 0);
  std::vector<char*> args;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  pid_t pid = -1;
  const int rc = ::posix_spawnp(&pid, args[0], &actions, &attr, args.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  posix_spawnattr_destroy(&attr);
  if (rc != 0) {
    throw Error(fmt::format("[files] cannot start '{}': {}; check that it is installed and on PATH",
                            argv[0], std::strerror(rc)));
  }
  pipe.close_write();
  Deadline deadline(timeout_s);
  ProcessResult result;
  Waited waited =
      read_until_closed(pipe.read_end(), deadline, result.output, result.output_truncated);
  int status = 0;
  if (waited == Waited::done) waited = wait_until(pid, deadline, status);
  result.timed_out = waited == Waited::deadline;
  result.interrupted = waited == Waited::interrupted;
  if (waited != Waited::done) {
    end_group(pid);
    while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
  }
  result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return result;
}

}  // namespace keel::files
