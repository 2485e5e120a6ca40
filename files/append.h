#pragma once
/// @file
/// A file keel only ever appends to, one whole record per call: metrics.jsonl, compiles.jsonl,
/// TensorBoard event files. Every failure is a keel::Error naming the file; nothing is silent.
#include <cstdint>
#include <string>
#include <string_view>

#include "files/fd.h"

namespace keel::files {

/// How an AppendFile opens and guards its file.
struct AppendOptions {
  bool exclusive = false;  ///< the file must not exist yet (O_EXCL)
  /// This process is the file's only writer: a record that fails part-way is cut back off, and
  /// a torn last line left by a crash (no '\n' at the end) is cut off at open, so every line
  /// that stays is whole. Never for files that several processes append to.
  bool single_writer = false;
  bool lines = false;  ///< records are '\n'-terminated lines (for the torn-tail check)
};

/// A file opened for appending whole records (O_APPEND); see the file comment.
class AppendFile {
 public:
  AppendFile() = default;
  /// Creates the file if needed (mode 0644). `what` names it in messages ("metrics").
  AppendFile(std::string path, std::string what, const AppendOptions& options = {});

  /// All of `record` at the end of the file in one write() where the kernel allows it (O_APPEND
  /// lands each whole write at the end, so concurrent appenders never interleave).
  void append(std::string_view record);
  void sync();                               ///< fsync: what was appended survives a power loss
  bool is_open() const { return fd_.ok(); }  ///< false when default-constructed
  const std::string& path() const { return path_; }  ///< the file's path

 private:
  std::string path_, what_;
  AppendOptions options_;
  Fd fd_;
};

}  // namespace keel::files
