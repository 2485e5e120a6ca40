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

#include "files/errno_text.h"
#include "files/fd.h"

namespace keel::cache::fs {

// An entry that exists but must not be used; the text is the reason, for a quarantine note.
class Problem : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

using Fd = files::Fd;
using files::errno_text;

// lstat: nullopt when the path does not exist; keel::Error on any other failure.
std::optional<struct stat> lstat_path(const std::string& path);
int64_t mtime_ns(const struct stat& st);

// files::read_file for the disk tier: no symlink is followed; nullopt when nothing is there;
// Problem when it is a symlink, not a regular file, unreadable or over max_bytes.
std::optional<std::string> read_file(const std::string& path, int64_t max_bytes);

// Names in `dir` (no "." or ".."); empty when the directory does not exist.
std::vector<std::string> list_dir(const std::string& dir);

// Creates a directory with mode 0700; false when it already existed. keel::Error otherwise.
bool make_dir(const std::string& path);

using Hook = std::function<void(std::string_view step)>;

// Sets a file's mtime to now without following a symlink or creating it; false on failure.
bool touch(const std::string& path);
// unlink; true when something was removed. keel::Error on failures other than ENOENT.
bool remove_file(const std::string& path);

}  // namespace keel::cache::fs
