// The system compiler's include directories: where libstdc++'s headers are, the default
// corpus on a machine that can build keel.
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <filesystem>

#include "data/corpus.h"
#include "files/process.h"
#include "ir/error.h"

namespace keel::data {
namespace {

namespace fs = std::filesystem;

std::string trim(std::string s) {
  size_t b = s.find_first_not_of(" \t\r\n");
  size_t e = s.find_last_not_of(" \t\r\n");
  return b == std::string::npos ? std::string() : s.substr(b, e - b + 1);
}

// A path with a "c++/<version>" component, like /usr/include/c++/12.
bool has_cxx_version(const fs::path& dir) {
  bool after_cxx = false;
  for (const auto& part : dir) {
    std::string s = part.string();
    if (after_cxx && !s.empty() && s[0] >= '0' && s[0] <= '9') return true;
    after_cxx = s == "c++";
  }
  return false;
}

}  // namespace

std::vector<std::string> system_include_dirs(const std::string& compiler, double timeout_s) {
  const std::vector<std::string> argv = {compiler, "-E", "-x", "c++", "-", "-v"};
  files::ProcessResult r;
  try {
    r = files::run_process(argv, timeout_s);
  } catch (const Error& e) {
    throw Error(fmt::format(
        "[data] cannot run {} to list its include directories ({}); install g++ or pass --data",
        compiler, e.what()));
  }
  if (r.interrupted) {
    throw Stopped(
        fmt::format("[data] '{}' was stopped by a stop request", files::command_text(argv)));
  }
  if (r.timed_out) {
    throw Error(fmt::format(
        "[data] '{}' did not finish within {} s; killed it; check the compiler, or pass --data",
        files::command_text(argv), timeout_s));
  }
  const std::string& output = r.output;
  std::vector<std::string> dirs;
  bool inside = false;
  std::string last;  // the last line of output, for the message when nothing is listed
  size_t start = 0;
  while (start < output.size()) {
    size_t end = output.find('\n', start);
    if (end == std::string::npos) end = output.size();
    std::string line = output.substr(start, end - start);
    start = end + 1;
    if (!trim(line).empty()) last = trim(line);
    if (line.starts_with("#include <...> search starts here:")) {
      inside = true;
    } else if (line.starts_with("End of search list.")) {
      inside = false;
    } else if (inside) {
      std::string dir = trim(line);
      if (dir.ends_with(" (framework directory)")) dir.resize(dir.size() - 22);
      std::error_code ec;
      fs::path canonical = fs::weakly_canonical(dir, ec);
      dirs.push_back(ec ? dir : canonical.string());
    }
  }
  if (dirs.empty()) {
    const int code = r.exit_code;
    std::string why = fmt::format("exit status {}: {}", code, last.empty() ? "no output" : last);
    throw Error(fmt::format("[data] {} {} ({}); install g++ or pass --data", compiler,
                            code == 0 ? "listed no system include directories"
                                      : "could not list its include directories",
                            why));
  }
  return dirs;
}

std::string libstdcxx_dir(const std::string& compiler) {
  std::vector<std::string> dirs = system_include_dirs(compiler);
  for (const std::string& dir : dirs) {
    std::error_code ec;
    if (has_cxx_version(dir) && fs::is_regular_file(fs::path(dir) / "vector", ec)) return dir;
  }
  throw InputError(fmt::format(
      "[data] no libstdc++ headers found in {}'s include directories ({}); install g++ or pass "
      "--data",
      compiler, fmt::join(dirs, ", ")));
}

std::string default_corpus_dir() {
  return libstdcxx_dir("c++");
}

}  // namespace keel::data
