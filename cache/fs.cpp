#include "cache/fs.h"

#include <dirent.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "files/read.h"
#include "ir/error.h"

namespace keel::cache::fs {

std::optional<struct stat> lstat_path(const std::string& path) {
  struct stat st {};
  if (::lstat(path.c_str(), &st) == 0) return st;
  if (errno == ENOENT || errno == ENOTDIR) return std::nullopt;
  throw Error(fmt::format("[cache] cannot stat {}: {}", path, errno_text(errno)));
}

int64_t mtime_ns(const struct stat& st) {
  return static_cast<int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec;
}

std::optional<std::string> read_file(const std::string& path, int64_t max_bytes) {
  try {
    return files::read_file_if_exists(path, max_bytes, "a cache file", {.follow_symlinks = false});
  } catch (const files::ReadError& e) {
    throw Problem(e.problem());
  }
}

std::vector<std::string> list_dir(const std::string& dir) {
  std::vector<std::string> names;
  DIR* d = ::opendir(dir.c_str());
  if (!d) {
    if (errno == ENOENT) return names;
    throw Error(fmt::format("[cache] cannot list {}: {}", dir, errno_text(errno)));
  }
  while (const dirent* e = ::readdir(d)) {
    std::string name = e->d_name;
    if (name != "." && name != "..") names.push_back(std::move(name));
  }
  ::closedir(d);
  return names;
}

bool make_dir(const std::string& path) {
  if (::mkdir(path.c_str(), 0700) == 0) return true;
  if (errno == EEXIST) return false;
  throw Error(
      fmt::format("[cache] cannot create directory {}: {}; set compile_cache.dir to a "
                  "writable directory or use compile_cache.mode=off",
                  path, errno_text(errno)));
}

bool touch(const std::string& path) {
  return ::utimensat(AT_FDCWD, path.c_str(), nullptr, AT_SYMLINK_NOFOLLOW) == 0;
}

bool remove_file(const std::string& path) {
  if (::unlink(path.c_str()) == 0) return true;
  if (errno == ENOENT) return false;
  throw Error(fmt::format("[cache] cannot remove {}: {}", path, errno_text(errno)));
}

}  // namespace keel::cache::fs
