#pragma once
// Every program lookup counted, and every compile or load one line in RUN_DIR/compiles.jsonl.
#include <cstdint>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "files/append.h"

namespace keel::diag {

struct CompileEvent {
  // The host's step when it declared one (a training loop's), else the function's call count.
  int64_t step = -1;
  int64_t call = -1;  // how many times the function had run before: the step the guard counts
  std::string function;
  std::string key;
  std::string tier;  // "memory" | "disk" | "compiled"
  double seconds = 0;
  std::string reason;  // why a new program was needed (empty for memory hits)

  std::string to_json() const;  // one line, no newline
  // `source` names the line in errors ("run/compiles.jsonl:3"); throws InputError
  // "[diag] <source>: <what is wrong>".
  static CompileEvent from_json(const std::string& line, const std::string& source);
};

bool is_tier(std::string_view tier);  // "memory", "disk" or "compiled"

struct Counters {
  int64_t memory_hits = 0;
  int64_t disk_hits = 0;
  int64_t compiles = 0;
  double compile_seconds = 0;
  double load_seconds = 0;
};

class CompileLog {
 public:
  // Empty path: count and keep events in memory only. Otherwise the parent directory and the
  // file are created now (keel::Error "[diag] cannot open compile log ..." when they can't be).
  explicit CompileLog(std::string path = "");
  ~CompileLog();
  CompileLog(const CompileLog&) = delete;
  CompileLog& operator=(const CompileLog&) = delete;

  // Counts every event; disk loads and compiles are also kept and appended to the file as one
  // write() each (O_APPEND), so lines from concurrent processes never interleave. Memory hits
  // are only counted: they happen once per step. Unknown tier: keel::Error.
  void record(const CompileEvent& e);
  Counters counters() const;
  std::vector<CompileEvent> events() const;  // the disk and compiled events, in order
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  files::AppendFile file_;
  mutable std::mutex mu_;
  Counters counters_;
  std::vector<CompileEvent> events_;
};

// Reads a compiles.jsonl; blank lines are skipped. A missing file or a malformed line is an
// InputError "[diag] <file>:<line>: <what is wrong>".
std::vector<CompileEvent> read_compile_log(const std::string& path);

}  // namespace keel::diag
