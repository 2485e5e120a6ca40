#pragma once
// The words of an errno value, for the one-line messages of every room that touches the disk.
#include <cerrno>
#include <cstring>
#include <string>

namespace keel::files {

// strerror(err); by default the errno of the call that just failed.
inline std::string errno_text(int err = errno) {
  return std::strerror(err);
}

}  // namespace keel::files
