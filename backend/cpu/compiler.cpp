// Running the compiler: posix_spawnp with stdout and stderr on one pipe, read to the end before
// waiting, so a chatty compiler cannot block on a full pipe; both under one deadline.
#include "backend/cpu/compiler.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <thread>

#include "ir/error.h"

extern char** environ;

namespace keel::cpu {
namespace {

constexpr size_t kMaxMessageLines = 40;

// The first lines of a long message, with a note saying how many were left out.
std::string trim_lines(const std::string& text) {
  std::string s = text;
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
  if (s.empty()) return "(the compiler printed nothing)";
  size_t end = 0, lines = 0;
  while (end != std::string::npos && lines < kMaxMessageLines) {
    end = s.find('\n', lines == 0 ? 0 : end + 1);
    ++lines;
  }
  if (end == std::string::npos) return s;
  const size_t rest = 1 + static_cast<size_t>(std::count(s.begin() + end + 1, s.end(), '\n'));
  return fmt::format("{}\n... ({} more lines)", s.substr(0, end), rest);
}

class Pipe {
 public:
  Pipe() {
    if (::pipe2(fd_, O_CLOEXEC) != 0) {
      throw Error(fmt::format("[backend.cpu] cannot create a pipe for the compiler: {}",
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

// Appends everything written to `fd` until every writer closed it; false when the deadline
// came first. A reader that drains the pipe means a chatty child never blocks on a full one.
bool read_until_closed(int fd, const Deadline& deadline, std::string& out) {
  char buf[4096];
  for (;;) {
    pollfd p{fd, POLLIN, 0};
    const int ready = ::poll(&p, 1, deadline.poll_ms());
    if (ready < 0 && errno == EINTR) continue;
    if (ready == 0) return false;
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n > 0) {
      out.append(buf, static_cast<size_t>(n));
    } else if (n == 0 || errno != EINTR) {
      return true;
    }
  }
}

// Reaps `pid` into `status`; false when the deadline came first. The child has closed its
// output, so it is normally exiting already: short sleeps, growing to 50 ms.
bool wait_until(pid_t pid, const Deadline& deadline, int& status) {
  auto pause = std::chrono::microseconds(100);
  for (;;) {
    const pid_t done = ::waitpid(pid, &status, WNOHANG);
    if (done == pid) return true;
    if (done < 0 && errno != EINTR) {
      throw Error(
          fmt::format("[backend.cpu] waiting for pid {} failed: {}", pid, std::strerror(errno)));
    }
    if (deadline.passed()) return false;
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, std::chrono::microseconds(50000));
  }
}

}  // namespace

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
  if (argv.empty()) throw Error("[backend.cpu] run_process needs a program to run");
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
    throw Error(
        fmt::format("[backend.cpu] cannot start '{}': {}; set the compiler in the launch "
                    "policy (CompileOptions::compiler) to an installed C++ compiler",
                    argv[0], std::strerror(rc)));
  }
  pipe.close_write();
  Deadline deadline(timeout_s);
  ProcessResult result;
  result.timed_out = !read_until_closed(pipe.read_end(), deadline, result.output);
  int status = 0;
  if (!result.timed_out) result.timed_out = !wait_until(pid, deadline, status);
  if (result.timed_out) {
    ::kill(-pid, SIGKILL);  // the whole group; the driver is its leader
    while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
  }
  result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return result;
}

std::string compiler_version(const std::string& compiler, double timeout_s) {
  static std::mutex mu;
  static std::map<std::string, std::string> known;
  std::lock_guard lock(mu);
  if (auto it = known.find(compiler); it != known.end()) return it->second;
  ProcessResult r;
  try {
    r = run_process({compiler, "--version"}, timeout_s);
  } catch (const Error&) {
    return known[compiler] = "";  // not installed: the bundle says so
  }
  if (r.timed_out) {
    throw Error(fmt::format(
        "[backend.cpu] '{} --version' did not finish within {} s (codegen.compile_timeout_s); "
        "killed it; check that codegen.compiler names a working C++ compiler",
        compiler, timeout_s));
  }
  std::string line = r.exit_code == 0 ? r.output.substr(0, r.output.find('\n')) : "";
  while (!line.empty() && line.back() == '\r') line.pop_back();
  return known[compiler] = line;
}

const std::vector<std::string>& required_flags() {
  static const std::vector<std::string> flags = {"-std=c++17", "-fPIC", "-ffp-contract=fast",
                                                 "-fno-math-errno"};
  return flags;
}

std::vector<std::string> Compiler::command(const std::string& source,
                                           const std::string& output) const {
  std::vector<std::string> argv = {compiler_};
  argv.insert(argv.end(), required_flags().begin(), required_flags().end());
  argv.insert(argv.end(), flags_.begin(), flags_.end());
  argv.insert(argv.end(), {"-shared", "-o", output, source});
  return argv;
}

void Compiler::build(const std::string& source, const std::string& output,
                     const std::string& graph_name) const {
  ProcessResult r;
  const std::vector<std::string> argv = command(source, output);
  try {
    r = run_process(argv, timeout_s_);
  } catch (const Error& e) {
    throw Error(
        fmt::format("{} (compiling '{}'; source kept at {})", e.what(), graph_name, source));
  }
  if (r.timed_out) {
    throw Error(fmt::format(
        "[backend.cpu] the compiler did not finish '{}' within {} s (codegen.compile_timeout_s); "
        "killed it and its process group; source kept at {}; command: {}",
        graph_name, timeout_s_, source, command_text(argv)));
  }
  if (r.exit_code != 0) {
    throw Error(fmt::format("[backend.cpu] {} failed for '{}' (exit {}); source kept at {}:\n{}",
                            compiler_, graph_name, r.exit_code, source, trim_lines(r.output)));
  }
  if (::access(output.c_str(), R_OK) != 0) {
    throw Error(
        fmt::format("[backend.cpu] {} exited 0 for '{}' but wrote no {}; source kept at "
                    "{}; check the compiler flags (-c or -E stop before linking)",
                    compiler_, graph_name, output, source));
  }
}

}  // namespace keel::cpu
