#include "cache/lock.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/file.h>

#include <cerrno>

#include "ir/error.h"

namespace keel::cache {

namespace {

// Lock files are never unlinked: removing one while a waiter holds its old inode would let
// two processes "hold" the same key.
fs::Fd open_lock_file(const std::string& path) {
  fs::Fd fd(::open(path.c_str(), O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600));
  if (!fd.ok()) {
    throw Error(
        fmt::format("[cache] cannot open lock file {}: {}; check that the cache directory "
                    "is yours and writable",
                    path, fs::errno_text(errno)));
  }
  return fd;
}

}  // namespace

KeyLock KeyLock::acquire(const std::string& path) {
  fs::Fd fd = open_lock_file(path);
  while (::flock(fd.get(), LOCK_EX) != 0) {
    if (errno != EINTR) {
      throw Error(fmt::format("[cache] cannot lock {}: {}", path, fs::errno_text(errno)));
    }
  }
  return KeyLock(std::move(fd));
}

std::optional<KeyLock> KeyLock::try_acquire(const std::string& path) {
  fs::Fd fd = open_lock_file(path);
  while (::flock(fd.get(), LOCK_EX | LOCK_NB) != 0) {
    if (errno == EWOULDBLOCK) return std::nullopt;
    if (errno != EINTR) {
      throw Error(fmt::format("[cache] cannot lock {}: {}", path, fs::errno_text(errno)));
    }
  }
  return KeyLock(std::move(fd));
}

}  // namespace keel::cache
