// Listing, statistics, verification and explanation reports for the executable cache.
#include "diag/cache_report.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <set>

#include "diag/explain.h"
#include "ir/error.h"
#include "ir/text.h"
#include "ir/utf8_escape.h"

namespace keel::diag {
namespace {

constexpr size_t kKeyPrefix = 12;  // enough to be unique in any real cache, short to read

std::string plural(int64_t n, const char* one, const char* many) {
  return fmt::format("{} {}", n, n == 1 ? one : many);
}

}  // namespace

std::string format_bytes(int64_t bytes) {
  static constexpr std::array<const char*, 5> units = {"B", "KiB", "MiB", "GiB", "TiB"};
  if (bytes < 1024) return fmt::format("{} B", bytes);
  double v = static_cast<double>(bytes);
  size_t u = 0;
  while (v >= 1024 && u + 1 < units.size()) v /= 1024, ++u;
  return fmt::format("{:.1f} {}", v, units[u]);
}

std::string format_age(int64_t seconds) {
  if (seconds < 0) seconds = 0;  // a clock that moved back: created "now"
  if (seconds < 60) return fmt::format("{}s", seconds);
  if (seconds < 3600) return fmt::format("{}m", seconds / 60);
  if (seconds < 86400) return fmt::format("{}h", seconds / 3600);
  return fmt::format("{}d", seconds / 86400);
}

std::string format_entry_table(const std::vector<EntrySummary>& entries, int64_t now_unix,
                               const std::string& dir) {
  if (entries.empty()) return fmt::format("no entries in {}\n", dir);
  std::vector<std::array<std::string, 7>> rows;
  rows.push_back({"KEY", "FUNCTION", "SIGNATURE", "SIZE", "COMPILE", "AGE", "USED"});
  for (const EntrySummary& e : entries) {
    // Names come from files: spelled as the graph text does, never raw control characters.
    rows.push_back({e.key.substr(0, kKeyPrefix), name_text(e.function), e.signature,
                    format_bytes(e.bytes), fmt::format("{:.2f}s", e.compile_seconds),
                    format_age(now_unix - e.created_unix),
                    format_age(now_unix - e.last_used_unix) + " ago"});
  }
  std::array<size_t, 7> width{};
  for (const auto& r : rows) {
    for (size_t c = 0; c < r.size(); ++c) width[c] = std::max(width[c], r[c].size());
  }
  std::string out;
  for (const auto& r : rows) {
    // Text columns left-aligned, numbers right-aligned; no trailing spaces.
    out += fmt::format("{:<{}}  {:<{}}  {:<{}}  {:>{}}  {:>{}}  {:>{}}  {:>{}}\n", r[0], width[0],
                       r[1], width[1], r[2], width[2], r[3], width[3], r[4], width[4], r[5],
                       width[5], r[6], width[6]);
  }
  return out;
}

CacheStats cache_stats(const std::vector<EntrySummary>& entries, int64_t quarantined) {
  CacheStats s;
  s.quarantined = quarantined;
  std::map<std::string, FunctionStats> by_function;
  for (const EntrySummary& e : entries) {
    ++s.entries;
    s.bytes += e.bytes;
    s.compile_seconds += e.compile_seconds;
    FunctionStats& f = by_function[e.function];
    f.function = e.function;
    ++f.entries;
    f.bytes += e.bytes;
    f.compile_seconds += e.compile_seconds;
  }
  for (auto& [name, f] : by_function) s.functions.push_back(std::move(f));
  return s;
}

std::string CacheStats::to_json() const {
  nlohmann::json fns = nlohmann::json::object();
  for (const FunctionStats& f : functions) {
    fns[bytes_to_utf8(f.function)] = {
        {"entries", f.entries}, {"bytes", f.bytes}, {"compile_seconds", f.compile_seconds}};
  }
  nlohmann::json j = {{"entries", entries},
                      {"bytes", bytes},
                      {"compile_seconds", compile_seconds},
                      {"quarantined", quarantined},
                      {"functions", fns}};
  return j.dump();
}

std::string CacheStats::text(const std::string& dir) const {
  std::string out = fmt::format("{}: {}, {}, {:.2f} s of compiling stored, {} quarantined\n",
                                printable_text(dir), plural(entries, "entry", "entries"),
                                format_bytes(bytes), compile_seconds, quarantined);
  size_t width = 0;
  for (const FunctionStats& f : functions) width = std::max(width, name_text(f.function).size());
  for (const FunctionStats& f : functions) {
    out += fmt::format("  {:<{}}  {}, {}, {:.2f} s\n", name_text(f.function), width,
                       plural(f.entries, "entry", "entries"), format_bytes(f.bytes),
                       f.compile_seconds);
  }
  return out;
}

int64_t count_quarantined(const std::string& versioned_dir) {
  std::filesystem::path q = std::filesystem::path(versioned_dir) / "quarantine";
  std::error_code ec;
  if (!std::filesystem::is_directory(q, ec)) return 0;
  std::set<std::string> stems;
  for (const auto& d : std::filesystem::directory_iterator(q, ec)) {
    std::string name = d.path().filename().string();
    stems.insert(name.substr(0, name.find('.')));
  }
  if (ec) {
    throw InputError(fmt::format("[cache] cannot list {}: {}", q.string(), ec.message()));
  }
  return static_cast<int64_t>(stems.size());
}

size_t find_entry(const std::vector<EntrySummary>& entries, const std::string& prefix,
                  const std::string& dir) {
  if (prefix.empty()) throw InputError("[cache] an empty KEY matches every entry; give a prefix");
  std::vector<size_t> hits;
  for (size_t i = 0; i < entries.size(); ++i) {
    if (entries[i].key.rfind(prefix, 0) == 0) hits.push_back(i);
  }
  if (hits.empty()) {
    throw InputError(
        fmt::format("[cache] no cache entry in {} has a key starting with '{}'; "
                    "'keel cache ls' lists them",
                    dir, prefix));
  }
  if (hits.size() > 1) {
    throw InputError(
        fmt::format("[cache] {} cache entries in {} have keys starting with '{}' "
                    "({}, {}, ...); give more digits",
                    hits.size(), dir, prefix, entries[hits[0]].key, entries[hits[1]].key));
  }
  return hits[0];
}

std::optional<size_t> nearest_other(const std::vector<EntrySummary>& entries, size_t i) {
  const EntrySummary& me = entries.at(i);
  std::optional<size_t> before, after;
  for (size_t j = 0; j < entries.size(); ++j) {
    const EntrySummary& e = entries[j];
    if (j == i || e.function != me.function || e.key == me.key) continue;
    if (e.created_unix <= me.created_unix) {
      if (!before || e.created_unix > entries[*before].created_unix) before = j;
    } else if (!after || e.created_unix < entries[*after].created_unix) {
      after = j;
    }
  }
  return before ? before : after;
}

std::string format_verify(size_t checked,
                          const std::vector<std::pair<std::string, std::string>>& bad,
                          const std::vector<std::string>& stray) {
  std::string out;
  for (const auto& [key, problem] : bad) {
    // The cache's own messages already name the entry; don't say it twice.
    bool named = problem.find(key) != std::string::npos;
    out += named ? problem + "\n" : fmt::format("bad {}: {}\n", key, problem);
  }
  for (const std::string& problem : stray) out += problem + "\n";
  if (bad.empty()) {
    out += fmt::format("{}{} verified\n", stray.empty() ? "ok: " : "",
                       plural(checked, "entry", "entries"));
  } else {
    out += fmt::format("{} of {} failed verification\n", plural(bad.size(), "entry", "entries"),
                       checked);
  }
  if (!stray.empty()) {
    out += fmt::format(
        "{} in the entries directory\n",
        plural(stray.size(), "file that is not a cache file", "files that are not cache files"));
  }
  return out;
}

std::string explain_entry(const StoredProgram& now, const std::optional<StoredProgram>& before) {
  if (!before) return explain_miss(ProgramFacts{Graph(), {}, ""}, std::nullopt);
  const StoredProgram* missing = !now.graph_text ? &now : !before->graph_text ? &*before : nullptr;
  auto facts = [](const StoredProgram& p) {
    return facts_from_text(*p.graph_text, p.bundle_json, p.codegen, "cache entry " + p.key);
  };
  if (!missing) return explain_miss(facts(now), facts(*before));
  // Without a graph, compare what the manifests carry and say what was left out.
  ProgramFacts a{Graph(), policy::Bundle::from_json(now.bundle_json, "cache entry " + now.key),
                 now.codegen};
  ProgramFacts b{Graph(),
                 policy::Bundle::from_json(before->bundle_json, "cache entry " + before->key),
                 before->codegen};
  std::string text = explain_miss(a, b);
  std::string note =
      fmt::format("entry {} has no stored graph, so the programs were not compared", missing->key);
  if (text.rfind("same program", 0) == 0) return "no bundle or codegen difference; " + note;
  return text + "; " + note;
}

}  // namespace keel::diag
