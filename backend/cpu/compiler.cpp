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

}  // namespace

ProcessResult run_process(const std::vector<std::string>& argv, double timeout_s) {
  try {
    return files::run_process(argv, timeout_s);
  } catch (const Error& e) {
    throw Error(
        fmt::format("[backend.cpu] {}; set the compiler in the launch policy "
                    "(cpu.compiler) to an installed C++ compiler",
                    e.what()));
  }
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
  if (r.interrupted) {
    throw Stopped(
        fmt::format("[backend.cpu] '{} --version' was stopped by a stop request", compiler));
  }
  if (r.timed_out) {
    throw Error(fmt::format(
        "[backend.cpu] '{} --version' did not finish within {} s (cpu.compile_timeout_s); "
        "killed it; check that cpu.compiler names a working C++ compiler",
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
  if (r.interrupted) {
    throw BuildStopped(
        fmt::format("[backend.cpu] compiling '{}' was stopped by a stop request (a signal); "
                    "killed the compiler and its process group",
                    graph_name));
  }
  if (r.timed_out) {
    throw Error(fmt::format(
        "[backend.cpu] the compiler did not finish '{}' within {} s (cpu.compile_timeout_s); "
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
