#pragma once
// Where everything lives under <dir>/v1 (the format version is in the path, so a future layout
// never misreads this one), and which file names belong to which entry.
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace keel::cache {

// The file kinds of one entry, in publishing order; the manifest comes last.
inline constexpr std::string_view kGraphExt = "kir";
inline constexpr std::string_view kBinExt = "bin";
inline constexpr std::string_view kUsedExt = "used";
inline constexpr std::string_view kSigExt = "sig";  // only in signed caches
inline constexpr std::string_view kManifestExt = "json";

struct Layout {
  std::string root;        // the configured directory
  std::string versioned;   // <root>/v1
  std::string entries;     // <root>/v1/entries
  std::string locks;       // <root>/v1/locks
  std::string quarantine;  // <root>/v1/quarantine

  explicit Layout(const std::string& root_dir);
  std::string file(const std::string& key, std::string_view ext) const;
  std::string lock(const std::string& key) const;
};

// 32 lowercase hex digits: the only names the disk tier builds paths from.
bool is_key(std::string_view s);

// A unique temporary name for one file of `key`: ".tmp.<key>.<ext>.<pid>.<random>".
std::string temp_name(const std::string& key, std::string_view ext);

// What an entries/ name is: a file of an entry, a temporary of a writer, or neither.
struct EntryName {
  enum Kind { file, temp, other } kind = other;
  std::string key;
  std::string ext;  // for files
};
EntryName classify_name(const std::string& name);

// The layouts newer than this keel's under `root` (its v<N> folders with N above
// Formats::cache_layout), ascending: another keel's entries, which this one never reads.
std::vector<int> newer_layouts(const std::string& root);
// "" when there are none; else one line naming them and the layout this keel reads.
std::string newer_layouts_note(const std::string& root);

}  // namespace keel::cache
