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

// What keel train writes in a run directory; --overwrite moves (or removes) these, nothing else.
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
  for (fs::directory_iterator it(dir / "checkpoints", ec), end; !ec && it != end;
       it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (!name.starts_with("step-")) continue;
    try {
      newest = std::max<int64_t>(newest, std::stoll(name.substr(5)));
    } catch (const std::exception&) {
    }
  }
  if (newest >= 0) found.push_back(fmt::format("checkpoints up to step-{}", newest));
  return fmt::format("{}", fmt::join(found, ", "));
}

// Every run file of `dir` moved into `to` (replaced), or removed when `to` is empty.
void clear_run_files(const fs::path& dir, const fs::path& to) {
  std::error_code ec;
  std::vector<fs::path> files;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    if (is_run_file(it->path().filename().string())) files.push_back(it->path());
  }
  if (!ec && !to.empty()) {
    fs::remove_all(to, ec);
    if (!ec) fs::create_directory(to, ec);
  }
  for (const fs::path& f : files) {
    if (ec) break;
    if (to.empty()) {
      fs::remove_all(f, ec);
    } else {
      fs::rename(f, to / f.filename(), ec);
    }
  }
  if (ec) {
    throw InputError(
        fmt::format("[train] --overwrite could not clear {}: {}; move the earlier "
                    "run away yourself, or choose another --run-dir",
                    dir.string(), ec.message()));
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
  lock_ = files::Fd(::open(lock.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644));
  if (!lock_.ok()) {
    throw InputError(
        fmt::format("[train] cannot use --run-dir {}: {} ({}); give a writable "
                    "directory",
                    run_dir, std::strerror(errno), lock));
  }
  if (::flock(lock_.get(), LOCK_EX | LOCK_NB) != 0) {
    char holder[256] = {};
    const ssize_t n = ::pread(lock_.get(), holder, sizeof holder - 1, 0);
    std::string who(holder, static_cast<size_t>(std::max<ssize_t>(n, 0)));
    while (!who.empty() && (who.back() == '\n' || who.back() == '\0')) who.pop_back();
    throw InputError(fmt::format(
        "[train] --run-dir {} is in use by another keel train ({}); wait for it to end, or "
        "choose another --run-dir",
        run_dir, who.empty() ? "its lock is " + lock : who));
  }
  const std::string me = fmt::format("pid {} on host {}", ::getpid(), files::host_name());
  if (::ftruncate(lock_.get(), 0) == 0) {
    [[maybe_unused]] const ssize_t written = ::pwrite(lock_.get(), me.data(), me.size(), 0);
  }
  if (resume) return;
  const std::string earlier = earlier_run(dir);
  if (!earlier.empty() && !overwrite) {
    throw InputError(fmt::format(
        "[train] --run-dir {} holds an earlier run ({}); --resume continues it, --overwrite "
        "replaces it (keeping it in {}/previous), or choose another --run-dir",
        run_dir, earlier, run_dir));
  }
  if (!overwrite) return;
  // An earlier run is kept, one generation deep; what a run that never got going left is not.
  clear_run_files(dir, earlier.empty() ? fs::path() : dir / "previous");
  if (!earlier.empty()) {
    note_ = fmt::format("--overwrite: moved the earlier run ({}) to {}/previous", earlier, run_dir);
  }
}

}  // namespace keel::train
