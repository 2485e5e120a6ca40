// Work directories and file names for compiles. Errors name the path and what to change.
#include "backend/cpu/client_files.h"

#include <fmt/format.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <vector>

#include "ir/error.h"

namespace keel::cpu {

namespace fs = std::filesystem;

WorkDir::WorkDir(const std::string& requested) {
  if (!requested.empty()) {
    std::error_code ec;
    fs::create_directories(requested, ec);
    if (ec || !fs::is_directory(requested, ec)) {
      throw Error(
          fmt::format("[backend.cpu] cannot use work_dir '{}': {}; set work_dir to a "
                      "writable directory or leave it empty for a temporary one",
                      requested, ec ? ec.message() : "not a directory"));
    }
    path_ = requested;
    return;
  }
  const char* tmp = std::getenv("TMPDIR");
  std::string pattern = fmt::format("{}/keel-cpu-XXXXXX", tmp && *tmp ? tmp : "/tmp");
  std::vector<char> buf(pattern.begin(), pattern.end());
  buf.push_back('\0');
  if (!::mkdtemp(buf.data())) {
    throw Error(
        fmt::format("[backend.cpu] cannot create a temporary work directory {}: {}; set "
                    "TMPDIR or CompileOptions::work_dir to a writable directory",
                    pattern, std::strerror(errno)));
  }
  path_ = buf.data();
  temporary_ = true;
}

WorkDir::~WorkDir() {
  if (temporary_ && !keep_) {
    std::error_code ec;
    fs::remove_all(path_, ec);  // best effort: a leftover temporary directory is harmless
  }
}

std::string file_stem(const std::string& name) {
  std::string s = name.empty() ? "graph" : name.substr(0, 100);
  for (char& c : s) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    c == '.' || c == '_' || c == '-';
    if (!ok) c = '_';
  }
  if (s[0] == '.') s[0] = '_';  // never a hidden file, never ".."
  return s;
}

}  // namespace keel::cpu
