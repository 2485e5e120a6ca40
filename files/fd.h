#pragma once
/// @file
/// An owned file descriptor, closed when it goes out of scope.
#include <unistd.h>

#include <utility>

namespace keel::files {

/// An owned file descriptor, closed when it goes out of scope; movable, not copyable.
class Fd {
 public:
  explicit Fd(int fd = -1) : fd_(fd) {}                   ///< takes ownership of `fd` (-1: none)
  Fd(Fd&& o) noexcept : fd_(std::exchange(o.fd_, -1)) {}  ///< takes `o`'s descriptor; `o` owns none
  /// Closes the descriptor held, then takes `o`'s.
  Fd& operator=(Fd&& o) noexcept {
    if (this != &o) {
      reset();
      fd_ = std::exchange(o.fd_, -1);
    }
    return *this;
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  ~Fd() { reset(); }

  int get() const { return fd_; }       ///< the descriptor, -1 when none
  bool ok() const { return fd_ >= 0; }  ///< a descriptor is held
  /// Closes now; the result of close(2) (0, or -1 with errno), for writers that must check it.
  int reset() { return fd_ >= 0 ? ::close(std::exchange(fd_, -1)) : 0; }

 private:
  int fd_;
};

}  // namespace keel::files
