#pragma once
// The one way keel reads a whole file: regular files only, never more than a cap. A FIFO,
// device, directory or socket would hang the reader or never end, so each is refused by name.
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "ir/error.h"

namespace keel::files {

// A file that cannot be read as asked. what() is one line: "[files] <what> <path> <reason>".
class ReadError : public InputError {
 public:
  enum class Kind { missing, symlink, not_regular, too_large, unreadable };
  ReadError(Kind kind, const std::string& path, const std::string& reason, std::string_view what);
  Kind kind() const { return kind_; }
  // "<path> <reason>", e.g. "/dev/zero is a character device, not a regular file".
  const std::string& problem() const { return problem_; }

 private:
  Kind kind_;
  std::string problem_;
};

struct ReadOptions {
  bool follow_symlinks = true;  // false: a symlink is a ReadError of kind symlink (O_NOFOLLOW)
};

// "a directory", "a FIFO", "a character device", ... for a st_mode that is not a regular file.
std::string file_type_text(unsigned mode);

// The whole regular file at `path`, read in bounded chunks until EOF (so /proc files, whose
// size is 0, work too). `what` names the file for the message ("model config (--config)").
// Throws ReadError when it is missing, not a regular file, or longer than max_bytes.
std::string read_file(const std::string& path, int64_t max_bytes, std::string_view what,
                      const ReadOptions& options = {});

// As read_file, but nullopt when nothing is at `path`.
std::optional<std::string> read_file_if_exists(const std::string& path, int64_t max_bytes,
                                               std::string_view what,
                                               const ReadOptions& options = {});

}  // namespace keel::files
