#include "files/append.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>

#include <cerrno>
#include <cstring>

#include "ir/error.h"

namespace keel::files {
namespace {

// The size of the file up to and including its last '\n' (0 when it has none).
off_t whole_lines_size(int fd, off_t size) {
  char buf[4096];
  for (off_t end = size; end > 0;) {
    const off_t start = end > off_t(sizeof buf) ? end - off_t(sizeof buf) : 0;
    const ssize_t n = ::pread(fd, buf, static_cast<size_t>(end - start), start);
    if (n <= 0) return size;  // unreadable: leave it as it is
    for (ssize_t i = n - 1; i >= 0; --i) {
      if (buf[i] == '\n') return start + i + 1;
    }
    end = start;
  }
  return 0;
}

}  // namespace

AppendFile::AppendFile(std::string path, std::string what, const AppendOptions& options)
    : path_(std::move(path)), what_(std::move(what)), options_(options) {
  // A single writer reads its own tail back (the torn-line check), so it opens O_RDWR.
  const int flags = (options.single_writer ? O_RDWR : O_WRONLY) | O_CREAT | O_APPEND | O_CLOEXEC |
                    O_NOFOLLOW | (options.exclusive ? O_EXCL : 0);
  fd_ = Fd(::open(path_.c_str(), flags, 0644));
  if (!fd_.ok()) {
    throw Error(fmt::format("[files] cannot open the {} file {} for appending: {}", what_, path_,
                            std::strerror(errno)));
  }
  struct stat st {};
  if (::fstat(fd_.get(), &st) != 0 || !S_ISREG(st.st_mode)) {
    throw Error(fmt::format("[files] the {} file {} is not a regular file", what_, path_));
  }
  if (options.single_writer && options.lines && st.st_size > 0) {
    const off_t keep = whole_lines_size(fd_.get(), st.st_size);
    if (keep != st.st_size && ::ftruncate(fd_.get(), keep) != 0) {
      throw Error(fmt::format("[files] cannot cut the torn last line off the {} file {}: {}", what_,
                              path_, std::strerror(errno)));
    }
  }
}

void AppendFile::append(std::string_view record) {
  struct stat st {};
  const bool cut_back = options_.single_writer && ::fstat(fd_.get(), &st) == 0;
  size_t done = 0;
  while (done < record.size()) {
    const ssize_t n = ::write(fd_.get(), record.data() + done, record.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int err = errno;
      // Best effort: without it a later record would follow half of this one.
      if (cut_back && done > 0) (void)!::ftruncate(fd_.get(), st.st_size);
      throw Error(fmt::format("[files] cannot append to the {} file {}: {}", what_, path_,
                              std::strerror(err)));
    }
    done += static_cast<size_t>(n);
  }
}

void AppendFile::sync() {
  if (::fsync(fd_.get()) != 0) {
    throw Error(
        fmt::format("[files] cannot fsync the {} file {}: {}", what_, path_, std::strerror(errno)));
  }
}

}  // namespace keel::files
