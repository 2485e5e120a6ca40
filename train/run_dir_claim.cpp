#include "train/run_dir_claim.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <system_error>
#include <vector>

#include "files/host.h"
#include "ir/error.h"

namespace keel::train {
namespace fs = std::filesystem;
namespace {

// What keel train writes in a run directory; --overwrite removes these and nothing else.
bool is_run_file(const std::string& name) {
  static const char* const kNames[] = {
      "checkpoints", "tb",         "programs",    "metrics.jsonl",
      "record.json", "trace.json", "report.html", "compiles.jsonl"};
  for (const char* n : kNames) {
    if (name == n) return true;
  }
  return name.starts_with("compiles.rank") && name.ends_with(".jsonl");
}

// What of an earlier run the directory holds ("metrics.jsonl, checkpoints up to step-4"), or "".
std::string earlier_run(const fs::path& dir) {
  std::error_code ec;
  std::vector<std::string> found;
  if (fs::file_size(dir / "metrics.jsonl", ec) > 0 && !ec) found.push_back("metrics.jsonl");
  if (fs::exists(dir / "record.json", ec)) found.push_back("record.json");
  int64_t newest = -1;
  for (const auto& e : fs::directory_iterator(dir / "checkpoints", ec)) {
    const std::string name = e.path().filename().string();
    if (!name.starts_with("step-")) continue;
    try {
      newest = std::max<int64_t>(newest, std::stoll(name.substr(5)));
    } catch (const std::exception&) {
    }
  }
  if (newest >= 0) found.push_back(fmt::format("checkpoints up to step-{}", newest));
  return fmt::format("{}", fmt::join(found, ", "));
}

void remove_run_files(const fs::path& dir) {
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    if (!is_run_file(e.path().filename().string())) continue;
    fs::remove_all(e.path(), ec);
    if (ec) {
      throw InputError(
          fmt::format("[train] --overwrite could not remove {}: {}; remove it, or "
                      "choose another --run-dir",
                      e.path().string(), ec.message()));
    }
  }
}

}  // namespace

RunDirClaim::RunDirClaim(const std::string& run_dir, bool resume, bool overwrite) {
  if (resume && overwrite) {
    throw InputError(
        "[train] --resume continues the run in --run-dir and --overwrite replaces "
        "it: give one of them");
  }
  const fs::path dir(run_dir);
  std::error_code ec;
  fs::create_directories(dir, ec);
  const std::string lock = (dir / ".keel-lock").string();
  fd_ = ::open(lock.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd_ < 0) {
    throw InputError(
        fmt::format("[train] cannot use --run-dir {}: {} ({}); give a writable "
                    "directory",
                    run_dir, std::strerror(errno), lock));
  }
  if (::flock(fd_, LOCK_EX | LOCK_NB) != 0) {
    char holder[256] = {};
    const ssize_t n = ::pread(fd_, holder, sizeof holder - 1, 0);
    std::string who(holder, static_cast<size_t>(std::max<ssize_t>(n, 0)));
    while (!who.empty() && (who.back() == '\n' || who.back() == '\0')) who.pop_back();
    ::close(fd_);
    fd_ = -1;
    throw InputError(fmt::format(
        "[train] --run-dir {} is in use by another keel train ({}); wait for it to end, or "
        "choose another --run-dir",
        run_dir, who.empty() ? "its lock is " + lock : who));
  }
  const std::string me = fmt::format("pid {} on host {}", ::getpid(), files::host_name());
  if (::ftruncate(fd_, 0) == 0) {
    [[maybe_unused]] const ssize_t written = ::pwrite(fd_, me.data(), me.size(), 0);
  }
  const std::string earlier = resume ? "" : earlier_run(dir);
  if (earlier.empty()) return;
  if (!overwrite) {
    ::close(fd_);
    fd_ = -1;
    throw InputError(fmt::format(
        "[train] --run-dir {} holds an earlier run ({}); --resume continues it, --overwrite "
        "replaces it, or choose another --run-dir",
        run_dir, earlier));
  }
  try {
    remove_run_files(dir);
  } catch (...) {
    ::close(fd_);
    fd_ = -1;
    throw;
  }
}

RunDirClaim::~RunDirClaim() {
  if (fd_ >= 0) ::close(fd_);
}

}  // namespace keel::train
