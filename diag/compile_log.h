#pragma once
/// @file
/// Every program lookup counted, and every compile or load one line in RUN_DIR/compiles.jsonl.
#include <cstdint>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "files/append.h"

/// Diagnostics of compilation: the compile log, why a program was new, and the shape guard.
namespace keel::diag {

/// One program lookup: which function, which key, which tier, and why a new program was needed.
struct CompileEvent {
  /// The host's step when it declared one (a training loop's), else the function's call count.
  int64_t step = -1;
  int64_t call = -1;     ///< how many times the function had run before: the step the guard counts
  std::string function;  ///< the compiled function's name
  std::string key;       ///< the cache key, hex
  std::string tier;      ///< "memory" | "disk" | "compiled"
  double seconds = 0;    ///< load or compile time (0 for memory hits)
  std::string reason;    ///< why a new program was needed (empty for memory hits)

  std::string to_json() const;  ///< one line, no newline
  /// Parses one line of a compiles.jsonl. `source` names the line in errors
  /// ("run/compiles.jsonl:3"); throws InputError "[diag] <source>: <what is wrong>".
  static CompileEvent from_json(const std::string& line, const std::string& source);
};

bool is_tier(std::string_view tier);  ///< "memory", "disk" or "compiled"

/// Running totals of a CompileLog.
struct CompileTotals {
  int64_t memory_hits = 0;     ///< lookups served by the memory tier
  int64_t disk_hits = 0;       ///< programs loaded from the disk tier
  int64_t compiles = 0;        ///< programs compiled
  double compile_seconds = 0;  ///< time spent compiling, summed
  double load_seconds = 0;     ///< time spent loading from disk, summed
};

/// A run's record of program lookups: counters, and the disk and compiled events, kept in memory
/// and appended to compiles.jsonl.
class CompileLog {
 public:
  /// A log appending to `path`. Empty path: count and keep events in memory only. Otherwise the
  /// parent directory and the file are created now (keel::Error "[diag] cannot open compile log
  /// ..." when they can't be).
  explicit CompileLog(std::string path = "");
  ~CompileLog();
  CompileLog(const CompileLog&) = delete;
  CompileLog& operator=(const CompileLog&) = delete;

  /// Counts every event; disk loads and compiles are also kept and appended to the file as one
  /// write() each (O_APPEND), so lines from concurrent processes never interleave. Memory hits
  /// are only counted: they happen once per step. Unknown tier: keel::Error.
  void record(const CompileEvent& e);
  CompileTotals totals() const;                      ///< over every recorded event
  std::vector<CompileEvent> events() const;          ///< the disk and compiled events, in order
  const std::string& path() const { return path_; }  ///< the log file; empty when in memory only

 private:
  std::string path_;
  files::AppendFile file_;
  mutable std::mutex mu_;
  CompileTotals totals_;
  std::vector<CompileEvent> events_;
};

/// Reads a compiles.jsonl; blank lines are skipped. A missing file or a malformed line is an
/// InputError "[diag] <file>:<line>: <what is wrong>".
std::vector<CompileEvent> read_compile_log(const std::string& path);

}  // namespace keel::diag
