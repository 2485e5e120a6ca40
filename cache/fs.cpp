#include "cache/fs.h"

#include <dirent.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "ir/error.h"

namespace keel::cache::fs {

Fd& Fd::operator=(Fd&& o) noexcept {
  if (this != &o) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = o.fd_;
    o.fd_ = -1;
  }
  return *this;
}

Fd::~Fd() {
  if (fd_ >= 0) ::close(fd_);
}

std::string errno_text(int err) {
  return std::strerror(err);
}

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
  // O_NONBLOCK: a FIFO planted in the directory must not hang the reader.
  Fd fd(::open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK));
  if (!fd.ok()) {
    int err = errno;
    if (err == ENOENT) return std::nullopt;
    if (err == ELOOP) throw Problem(fmt::format("{} is a symlink; refusing to follow it", path));
    throw Problem(fmt::format("{} cannot be opened: {}", path, errno_text(err)));
  }
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) {
    throw Problem(fmt::format("{} cannot be read: {}", path, errno_text(errno)));
  }
  if (!S_ISREG(st.st_mode)) throw Problem(fmt::format("{} is not a regular file", path));
  if (st.st_size > max_bytes) {
    throw Problem(fmt::format("{} is {} bytes, expected at most {}", path,
                              static_cast<int64_t>(st.st_size), max_bytes));
  }
  std::string out(static_cast<size_t>(st.st_size), '\0');
  size_t done = 0;
  while (done < out.size()) {
    ssize_t n = ::read(fd.get(), out.data() + done, out.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) throw Problem(fmt::format("{} cannot be read: {}", path, errno_text(errno)));
    if (n == 0) break;  // shrank while reading: the size check of the caller reports it
    done += static_cast<size_t>(n);
  }
  out.resize(done);
  return out;
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

void fsync_dir(const std::string& dir) {
  Fd fd(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  if (!fd.ok() || ::fsync(fd.get()) != 0) {
    throw Error(fmt::format("[cache] cannot fsync directory {}: {}", dir, errno_text(errno)));
  }
}

namespace {

void write_all(int fd, std::string_view bytes, const std::string& path) {
  size_t done = 0;
  while (done < bytes.size()) {
    ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) throw Error(fmt::format("[cache] cannot write {}: {}", path, errno_text(errno)));
    done += static_cast<size_t>(n);
  }
}

}  // namespace

void publish_file(const std::string& dir, const std::string& name, const std::string& temp_name,
                  std::string_view bytes, const Hook& hook, std::string_view step) {
  auto at = [&](std::string_view what) {
    if (hook) hook(fmt::format("{}.{}", step, what));
  };
  std::string temp = dir + "/" + temp_name;
  std::string final_path = dir + "/" + name;
  Fd fd(::open(temp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600));
  if (!fd.ok()) {
    throw Error(fmt::format("[cache] cannot create {}: {}", temp, errno_text(errno)));
  }
  try {
    at("open");
    write_all(fd.get(), bytes, temp);
    at("written");
    if (::fsync(fd.get()) != 0) {
      throw Error(fmt::format("[cache] cannot fsync {}: {}", temp, errno_text(errno)));
    }
    at("synced");
    fd = Fd();
    if (::rename(temp.c_str(), final_path.c_str()) != 0) {
      throw Error(
          fmt::format("[cache] cannot rename {} to {}: {}", temp, final_path, errno_text(errno)));
    }
  } catch (...) {
    ::unlink(temp.c_str());
    throw;
  }
  at("renamed");
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
