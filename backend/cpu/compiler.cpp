// Running the compiler: posix_spawnp with stdout and stderr on one pipe, read to the end before
// waiting, so a chatty compiler cannot block on a full pipe.
#include "backend/cpu/compiler.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>

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

ProcessResult run_process(const std::vector<std::string>& argv) {
  if (argv.empty()) throw Error("[backend.cpu] run_process needs a program to run");
  Pipe pipe;
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_adddup2(&actions, pipe.write_end(), 1);
  posix_spawn_file_actions_adddup2(&actions, pipe.write_end(), 2);
  std::vector<char*> args;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  pid_t pid = -1;
  const int rc = ::posix_spawnp(&pid, args[0], &actions, nullptr, args.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  if (rc != 0) {
    throw Error(
        fmt::format("[backend.cpu] cannot start '{}': {}; set the compiler in the launch "
                    "policy (CompileOptions::compiler) to an installed C++ compiler",
                    argv[0], std::strerror(rc)));
  }
  pipe.close_write();
  ProcessResult result;
  char buf[4096];
  for (;;) {
    const ssize_t n = ::read(pipe.read_end(), buf, sizeof buf);
    if (n > 0) {
      result.output.append(buf, static_cast<size_t>(n));
    } else if (n == 0 || errno != EINTR) {
      break;
    }
  }
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0) {
    if (errno != EINTR) {
      throw Error(
          fmt::format("[backend.cpu] waiting for '{}' failed: {}", argv[0], std::strerror(errno)));
    }
  }
  result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return result;
}

const std::vector<std::string>& required_flags() {
  static const std::vector<std::string> flags = {"-std=c++17", "-fPIC", "-ffp-contract=off",
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
  try {
    r = run_process(command(source, output));
  } catch (const Error& e) {
    throw Error(
        fmt::format("{} (compiling '{}'; source kept at {})", e.what(), graph_name, source));
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
