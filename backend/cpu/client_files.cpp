// Work directories and file I/O for compiles. Errors name the path and what to change.
#include "backend/cpu/client_files.h"

#include <fmt/format.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <vector>

#include "ir/error.h"

namespace keel::cpu {

namespace fs = std::filesystem;

WorkDir::WorkDir(const std::string& requested) {
  if (!requested.empty()) {
    std::error_code ec;
    fs::create_directories(requested, ec);
    if (ec || !fs::is_directory(requested)) {
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

void write_file_atomic(const std::string& path, std::string_view bytes) {
  static std::atomic<uint64_t> counter{0};
  const fs::path p(path);
  const fs::path tmp =
      p.parent_path() / fmt::format(".{}.{}.{}.tmp", p.filename().string(), ::getpid(), counter++);
  {
    std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
    f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    f.close();
    if (!f) {
      std::error_code ec;
      fs::remove(tmp, ec);
      throw Error(
          fmt::format("[backend.cpu] cannot write {}; check that its directory is "
                      "writable and the disk is not full",
                      tmp.string()));
    }
  }
  std::error_code ec;
  fs::rename(tmp, p, ec);
  if (ec) {
    fs::remove(tmp, ec);
    throw Error(fmt::format("[backend.cpu] cannot rename {} onto {}: {}", tmp.string(), path,
                            ec.message()));
  }
}

std::string read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::ostringstream ss;
  ss << f.rdbuf();
  if (!f) throw Error(fmt::format("[backend.cpu] cannot read {}", path));
  return ss.str();
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
