#pragma once
// What `keel cache ls | stats | verify | explain` print, computed from plain entry facts so
// diag needs no cache code and tests need no process.
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace keel::diag {

// What the reports use of one cache entry (its manifest and its files).
struct EntrySummary {
  std::string key;
  std::string function;
  std::string signature;
  int64_t bytes = 0;  // all of the entry's files
  double compile_seconds = 0;
  int64_t created_unix = 0;
  int64_t last_used_unix = 0;
};

std::string format_bytes(int64_t bytes);  // "512 B", "1.5 KiB", "2.0 MiB"
std::string format_age(int64_t seconds);  // "42s", "5m", "3h", "2d"

// A header, then one line per entry: key prefix, function, signature, size, compile seconds,
// age, time since last use. "no entries in <dir>" when empty.
std::string format_entry_table(const std::vector<EntrySummary>& entries, int64_t now_unix,
                               const std::string& dir);

struct FunctionStats {
  std::string function;
  int64_t entries = 0;
  int64_t bytes = 0;
  double compile_seconds = 0;
};

struct CacheStats {
  int64_t entries = 0;
  int64_t bytes = 0;
  double compile_seconds = 0;  // what a warm start saves
  int64_t quarantined = 0;
  std::vector<FunctionStats> functions;  // sorted by name

  std::string to_json() const;  // one line
  std::string text(const std::string& dir) const;
};

CacheStats cache_stats(const std::vector<EntrySummary>& entries, int64_t quarantined);
// Distinct keys in <versioned_dir>/quarantine, whose names start "<key>." (one directory or
// file per quarantined entry); 0 when there is no quarantine directory.
int64_t count_quarantined(const std::string& versioned_dir);

// The one entry whose key starts with `prefix`; InputError "[cache] ..." naming `dir` when no
// entry or several match.
size_t find_entry(const std::vector<EntrySummary>& entries, const std::string& prefix,
                  const std::string& dir);
// The other entry of the same function closest before entries[i] in creation time (the
// program it most likely replaced), else the closest after it; nullopt when it is alone.
std::optional<size_t> nearest_other(const std::vector<EntrySummary>& entries, size_t i);

// "ok: N entries verified", or per bad entry its problem (prefixed "bad <key>: " unless it
// names the key) and a total; then each stray file's problem (files in entries/ that are not
// cache files) and their count, apart from the entries.
std::string format_verify(size_t checked,
                          const std::vector<std::pair<std::string, std::string>>& bad,
                          const std::vector<std::string>& stray = {});

// What a cache entry stores for explaining it: graph text (absent for entries that predate
// it), bundle JSON and codegen fingerprint.
struct StoredProgram {
  std::string key;
  std::optional<std::string> graph_text;
  std::string bundle_json;
  std::string codegen;
};

// explain_miss between two stored entries; without both graphs only bundle and codegen are
// compared, and the text says so. A bad stored graph or bundle is an InputError.
std::string explain_entry(const StoredProgram& now, const std::optional<StoredProgram>& before);

}  // namespace keel::diag
