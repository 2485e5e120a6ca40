#include "cache/lock.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/file.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <sstream>
#include <thread>

#include "files/host.h"
#include "files/read.h"
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

// LOCK_EX | LOCK_NB: true when taken, false when someone else holds it. Storage without flock
// (ENOLCK, ENOSYS, EOPNOTSUPP) counts as taken when `unlocked_ok`: the caller elects otherwise.
bool try_lock(int fd, const std::string& path, bool unlocked_ok = false) {
  while (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    if (errno == EWOULDBLOCK) return false;
    if (unlocked_ok && (errno == ENOLCK || errno == ENOSYS || errno == EOPNOTSUPP)) return true;
    if (errno != EINTR) {
      throw Error(fmt::format("[cache] cannot lock {}: {}{}", path, fs::errno_text(errno),
                              unlocked_ok ? ""
                                          : "; on storage without flock use "
                                            "compile_cache.layout = shared"));
    }
  }
  return true;
}

// "pid N on host H", with the process state when it runs here: what a waiter names.
std::string holder_text(const std::string& path) {
  int64_t pid = 0;
  std::string word, host;
  try {  // bounded reads: the lock file is any bytes another process left
    std::istringstream in(files::read_file(path, 4096, "a cache lock file"));
    if (!(in >> word >> pid >> word >> host)) pid = 0;
  } catch (const Error&) {
    pid = 0;
  }
  if (pid <= 0) return "by a process that has not written its pid yet";
  std::string state;
  if (host == files::host_name()) {
    std::string line;
    try {
      std::istringstream stat(
          files::read_file(fmt::format("/proc/{}/stat", pid), 1 << 16, "a process's stat"));
      std::getline(stat, line);
    } catch (const Error&) {
    }
    const size_t paren = line.rfind(')');
    if (paren != std::string::npos && paren + 2 < line.size()) {
      const char s = line[paren + 2];  // the state letter after "pid (comm) "
      state = s == 'T' || s == 't' ? " (stopped)" : s == 'Z' ? " (exited)" : " (running)";
    } else {
      state = " (no longer running)";
    }
  }
  return fmt::format("by pid {} on host {}{}", pid, host, state);
}

}  // namespace

KeyLock::KeyLock(fs::Fd fd) : fd_(std::move(fd)) {
  const std::string text = fmt::format("pid {} host {}\n", ::getpid(), files::host_name());
  // Best effort: a waiter that finds no text says the holder is unknown.
  if (::ftruncate(fd_.get(), 0) == 0) {
    (void)!::pwrite(fd_.get(), text.data(), text.size(), 0);
  }
}

KeyLock::~KeyLock() {
  if (fd_.ok()) (void)!::ftruncate(fd_.get(), 0);
}

KeyLock KeyLock::acquire(const std::string& path, double timeout_s, bool unlocked_ok) {
  fs::Fd fd = open_lock_file(path);
  using Clock = std::chrono::steady_clock;
  const auto deadline = Clock::now() + std::chrono::duration<double>(timeout_s);
  // flock has no timed form: try, then sleep a little longer each time (1 ms to 50 ms).
  auto pause = std::chrono::milliseconds(1);
  while (!try_lock(fd.get(), path, unlocked_ok)) {
    if (Clock::now() >= deadline) {
      throw Error(fmt::format(
          "[cache] gave up after {} s (compile_cache.lock_timeout_s) waiting for the lock {}, "
          "held {}; it is compiling or checking this entry and has not finished: let it "
          "finish (or continue it if stopped), kill it, or raise compile_cache.lock_timeout_s",
          timeout_s, path, holder_text(path)));
    }
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, std::chrono::milliseconds(50));
  }
  return KeyLock(std::move(fd));
}

std::optional<KeyLock> KeyLock::try_acquire(const std::string& path) {
  fs::Fd fd = open_lock_file(path);
  if (!try_lock(fd.get(), path)) return std::nullopt;
  return KeyLock(std::move(fd));
}

}  // namespace keel::cache
