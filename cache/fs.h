#pragma once
// POSIX file primitives for the disk tier: symlinks are never followed, a published file is
// durable before it is visible, and nothing is ever modified in place.
#include <sys/stat.h>

#include <cstdint>
#include <functional>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace keel::cache::fs {

// An entry that exists but must not be used; the text is the reason, for a quarantine note.
class Problem : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// An owned file descriptor.
class Fd {
 public:
  explicit Fd(int fd = -1) : fd_(fd) {}
  Fd(Fd&& o) noexcept : fd_(o.fd_) { o.fd_ = -1; }
  Fd& operator=(Fd&& o) noexcept;
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  ~Fd();
  int get() const { return fd_; }
  bool ok() const { return fd_ >= 0; }

 private:
  int fd_;
};

std::string errno_text(int err);

// lstat: nullopt when the path does not exist; keel::Error on any other failure.
std::optional<struct stat> lstat_path(const std::string& path);
int64_t mtime_ns(const struct stat& st);

// The whole regular file at `path`, without following a symlink. nullopt when it does not
// exist; Problem when it is a symlink, not a regular file, unreadable or over max_bytes.
std::optional<std::string> read_file(const std::string& path, int64_t max_bytes);

// Names in `dir` (no "." or ".."); empty when the directory does not exist.
std::vector<std::string> list_dir(const std::string& dir);

// Creates a directory with mode 0700; false when it already existed. keel::Error otherwise.
bool make_dir(const std::string& path);
void fsync_dir(const std::string& dir);  // keel::Error on failure

using Hook = std::function<void(std::string_view step)>;

// Writes `bytes` to `dir`/`temp_name` (created exclusively, mode 0600), fsyncs it and renames
// it onto `dir`/`name`; the directory is not fsynced. Calls hook("<step>.open" / ".written" /
// ".synced" / ".renamed"). On failure removes the temporary and throws keel::Error.
void publish_file(const std::string& dir, const std::string& name, const std::string& temp_name,
                  std::string_view bytes, const Hook& hook, std::string_view step);

// Sets a file's mtime to now without following a symlink or creating it; false on failure.
bool touch(const std::string& path);
// unlink; true when something was removed. keel::Error on failures other than ENOENT.
bool remove_file(const std::string& path);

}  // namespace keel::cache::fs
