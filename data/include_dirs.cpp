// The system compiler's include directories: where libstdc++'s headers are, the default
// corpus on a machine that can build keel.
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <filesystem>

#include "data/corpus.h"
#include "ir/error.h"

namespace keel::data {
namespace {

namespace fs = std::filesystem;

// Single-quoted for sh, so a path with spaces or quotes is one word.
std::string shell_quote(const std::string& s) {
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

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

std::vector<std::string> system_include_dirs(const std::string& compiler) {
  std::string command = shell_quote(compiler) + " -E -x c++ - -v < /dev/null 2>&1";
  FILE* pipe = popen(command.c_str(), "r");
  if (!pipe) throw Error(fmt::format("[data] cannot run {}: popen failed", compiler));
  std::string output;
  std::array<char, 4096> buffer;
  for (size_t n; (n = fread(buffer.data(), 1, buffer.size(), pipe)) > 0;)
    output.append(buffer.data(), n);
  int status = pclose(pipe);

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
    int code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    std::string why = fmt::format("exit status {}: {}", code, last.empty() ? "no output" : last);
    throw Error(code == 0 ? fmt::format("[data] {} listed no system include directories ({})",
                                        compiler, why)
                          : fmt::format("[data] cannot run {} to list its include directories ({})",
                                        compiler, why));
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

}  // namespace keel::data
