#include "files/read.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "files/fd.h"

namespace keel::files {
namespace {

using Kind = ReadError::Kind;

// What a failed stat or open means; nullopt for "nothing there".
std::optional<ReadError> open_problem(int err, const std::string& path, std::string_view what,
                                      const ReadOptions& options) {
  if (err == ENOENT || err == ENOTDIR) return std::nullopt;
  if (err == ELOOP && !options.follow_symlinks) {
    return ReadError(Kind::symlink, path, "is a symlink; refusing to follow it", what);
  }
  return ReadError(Kind::unreadable, path, fmt::format("cannot be opened: {}", std::strerror(err)),
                   what);
}

ReadError too_large(const std::string& path, std::string_view what, int64_t max_bytes,
                    const std::string& size) {
  return ReadError(Kind::too_large, path,
                   fmt::format("is {} bytes, over the cap of {} bytes", size, max_bytes), what);
}

}  // namespace

std::string file_type_text(unsigned mode) {
  if (S_ISREG(mode)) return "a regular file";
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISSOCK(mode)) return "a socket";
  if (S_ISLNK(mode)) return "a symlink";
  return "a file of unknown type";
}

ReadError::ReadError(Kind kind, const std::string& path, const std::string& reason,
                     std::string_view what)
    : InputError(fmt::format("[files] cannot read {}: {} {}", what, path, reason)),
      kind_(kind),
      problem_(fmt::format("{} {}", path, reason)) {}

std::optional<std::string> read_file_if_exists(const std::string& path, int64_t max_bytes,
                                               std::string_view what, const ReadOptions& options) {
  if (max_bytes < 0 || max_bytes == INT64_MAX) {
    throw Error(fmt::format("[files] read_file: max_bytes {} is not a cap", max_bytes));
  }
  // Checked before opening, so no device or FIFO is ever opened; fstat below is the authority.
  struct stat st {};
  const int stat_rc =
      options.follow_symlinks ? ::stat(path.c_str(), &st) : ::lstat(path.c_str(), &st);
  if (stat_rc != 0) {
    if (auto problem = open_problem(errno, path, what, options)) throw *problem;
    return std::nullopt;
  }
  if (S_ISLNK(st.st_mode)) {
    throw ReadError(Kind::symlink, path, "is a symlink; refusing to follow it", what);
  }
  if (!S_ISREG(st.st_mode)) {
    throw ReadError(Kind::not_regular, path,
                    fmt::format("is {}, not a regular file", file_type_text(st.st_mode)), what);
  }
  // O_NONBLOCK: a FIFO swapped in after the stat must not block the open.
  const int flags =
      O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY | (options.follow_symlinks ? 0 : O_NOFOLLOW);
  Fd fd(::open(path.c_str(), flags));
  if (fd.get() < 0) {
    if (auto problem = open_problem(errno, path, what, options)) throw *problem;
    return std::nullopt;
  }
  if (::fstat(fd.get(), &st) != 0 || !S_ISREG(st.st_mode)) {
    throw ReadError(Kind::not_regular, path, "is not a regular file", what);
  }
  if (st.st_size > max_bytes) {
    throw too_large(path, what, max_bytes, std::to_string(static_cast<int64_t>(st.st_size)));
  }
  // Sized from st_size, but read until EOF and never past the cap: a file may grow, and /proc
  // files report 0.
  const size_t cap = static_cast<size_t>(max_bytes) + 1;
  std::string out(std::min(cap, std::max<size_t>(static_cast<size_t>(st.st_size) + 1, 4096)), '\0');
  size_t done = 0;
  while (true) {
    if (done == out.size()) out.resize(std::min(cap, out.size() * 2));
    const ssize_t n = ::read(fd.get(), out.data() + done, out.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      throw ReadError(Kind::unreadable, path,
                      fmt::format("cannot be read: {}", std::strerror(errno)), what);
    }
    if (n == 0) break;
    done += static_cast<size_t>(n);
    if (done > static_cast<size_t>(max_bytes)) {
      throw too_large(path, what, max_bytes, fmt::format("more than {}", max_bytes));
    }
  }
  out.resize(done);
  return out;
}

std::string read_file(const std::string& path, int64_t max_bytes, std::string_view what,
                      const ReadOptions& options) {
  std::optional<std::string> bytes = read_file_if_exists(path, max_bytes, what, options);
  if (!bytes) throw ReadError(Kind::missing, path, "does not exist", what);
  return std::move(*bytes);
}

}  // namespace keel::files
