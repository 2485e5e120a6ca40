#include "files/publish.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <random>

#include "files/errno_text.h"
#include "files/fd.h"
#include "ir/error.h"

namespace keel::files {
namespace {

// Unique across threads (counter), processes (pid) and hosts sharing a directory (salt).
std::string default_temp_name(const std::string& final_name) {
  static std::atomic<uint64_t> counter{0};
  static const uint64_t salt = std::random_device{}();
  return fmt::format(".{}.tmp-{}-{:x}-{}", final_name, ::getpid(), salt, counter++);
}

}  // namespace

void write_all(int fd, std::string_view bytes, const std::string& path) {
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) throw Error(fmt::format("[files] cannot write {}: {}", path, errno_text()));
    done += static_cast<size_t>(n);
  }
}

void fsync_directory(const std::string& dir) {
  const std::string d = dir.empty() ? "." : dir;
  const Fd fd(::open(d.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!fd.ok() || ::fsync(fd.get()) != 0) {
    throw Error(fmt::format("[files] cannot fsync directory {}: {}", d, errno_text()));
  }
}

std::string directory_of(const std::string& path) {
  const size_t slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  return slash == 0 ? "/" : path.substr(0, slash);
}

void publish_file(const std::string& path, std::span<const std::string_view> pieces,
                  const PublishOptions& options) {
  publish_file(
      path,
      [&](int fd, const std::string& temp) {
        for (std::string_view piece : pieces) write_all(fd, piece, temp);
      },
      options);
}

void publish_file(const std::string& path,
                  const std::function<void(int fd, const std::string& temp)>& write,
                  const PublishOptions& options) {
  auto at = [&](std::string_view step) {
    if (options.hook) options.hook(step);
  };
  const std::string dir = directory_of(path);
  const std::string name = path.substr(path.rfind('/') + 1);  // npos + 1 == 0
  // The rename would replace whatever is at `path`: a device, a pipe, a link or a directory is
  // not a file keel wrote, so it is left alone.
  struct stat st = {};
  if (::lstat(path.c_str(), &st) == 0 && !S_ISREG(st.st_mode)) {
    throw InputError(fmt::format(
        "[files] {} is {}, not a regular file; keel writes a file by renaming a new one onto its "
        "path, which would replace it: give another path",
        path,
        S_ISDIR(st.st_mode)                          ? "a directory"
        : S_ISLNK(st.st_mode)                        ? "a symbolic link"
        : S_ISFIFO(st.st_mode)                       ? "a pipe"
        : S_ISCHR(st.st_mode) || S_ISBLK(st.st_mode) ? "a device"
                                                     : "a special file"));
  }
  const std::string temp = fmt::format(
      "{}/{}", dir, options.temp_name.empty() ? default_temp_name(name) : options.temp_name);
  Fd fd(::open(temp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC,
               static_cast<mode_t>(options.mode)));
  if (!fd.ok()) {
    throw Error(fmt::format("[files] cannot create {}: {}; check that {} is a writable directory",
                            temp, errno_text(), dir));
  }
  try {
    at("open");
    write(fd.get(), temp);
    at("written");
    if (::fsync(fd.get()) != 0) {
      throw Error(fmt::format("[files] cannot fsync {}: {}", temp, errno_text()));
    }
    at("synced");
    if (fd.reset() != 0)
      throw Error(fmt::format("[files] cannot close {}: {}", temp, errno_text()));
    if (::rename(temp.c_str(), path.c_str()) != 0) {
      throw Error(fmt::format("[files] cannot rename {} onto {}: {}", temp, path, errno_text()));
    }
  } catch (...) {
    fd.reset();
    ::unlink(temp.c_str());
    throw;
  }
  at("renamed");
  if (options.sync_directory) fsync_directory(dir);
}

void publish_file(const std::string& path, std::string_view bytes, const PublishOptions& options) {
  publish_file(path, std::span<const std::string_view>(&bytes, 1), options);
}

}  // namespace keel::files
