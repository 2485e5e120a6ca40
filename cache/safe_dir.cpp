#include "cache/safe_dir.h"

#include <fmt/format.h>
#include <unistd.h>

#include <array>

#include "cache/fs.h"

namespace keel::cache {

std::optional<std::string> unsafe_reason(const std::string& path) {
  std::optional<struct stat> st = fs::lstat_path(path);
  if (!st) return fmt::format("[cache] {} does not exist", path);
  if (S_ISLNK(st->st_mode)) {
    std::array<char, 4096> target{};
    ssize_t n = ::readlink(path.c_str(), target.data(), target.size() - 1);
    std::string to = n > 0 ? std::string(target.data(), static_cast<size_t>(n)) : "?";
    return fmt::format(
        "[cache] {} is a symlink (to {}); a cache directory must be a real directory only you "
        "can write: set compile_cache.dir to the directory itself",
        path, to);
  }
  if (!S_ISDIR(st->st_mode)) {
    return fmt::format("[cache] {} is not a directory: set compile_cache.dir to a directory", path);
  }
  if (st->st_uid != ::geteuid()) {
    return fmt::format(
        "[cache] {} is owned by uid {}, not by you (uid {}); its owner can run code as you: use "
        "a directory you own (set compile_cache.dir)",
        path, st->st_uid, ::geteuid());
  }
  unsigned mode = st->st_mode & 07777;
  if (mode & S_IWOTH) {
    return fmt::format(
        "[cache] {} is writable by others (mode {:04o}); anyone who can write it can run code "
        "as you: chmod 700 {}",
        path, mode, path);
  }
  if (mode & S_IWGRP) {
    return fmt::format(
        "[cache] {} is writable by its group (mode {:04o}); anyone in the group can run code as "
        "you: chmod 700 {}",
        path, mode, path);
  }
  return std::nullopt;
}

namespace {

// mkdir -p with mode 0700 for every directory it makes.
void make_dirs(const std::string& path) {
  for (size_t pos = 1; pos <= path.size(); ++pos) {
    if (pos == path.size() || path[pos] == '/') fs::make_dir(path.substr(0, pos));
  }
}

}  // namespace

std::optional<std::string> prepare_layout(const Layout& layout, bool create) {
  if (create && !fs::lstat_path(layout.root)) make_dirs(layout.root);
  const std::array<const std::string*, 5> dirs = {&layout.root, &layout.versioned, &layout.entries,
                                                  &layout.locks, &layout.quarantine};
  for (const std::string* dir : dirs) {
    // Each level is checked before the next is created inside it.
    if (create && dir != &layout.root && !fs::lstat_path(*dir)) fs::make_dir(*dir);
    if (!fs::lstat_path(*dir)) {
      if (create) return fmt::format("[cache] {} vanished while being created", *dir);
      break;
    }
    if (auto why = unsafe_reason(*dir)) return why;
  }
  return std::nullopt;
}

}  // namespace keel::cache
