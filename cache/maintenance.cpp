#include "cache/maintenance.h"

#include <algorithm>
#include <map>

#include "cache/entry.h"
#include "cache/fs.h"
#include "cache/lock.h"

namespace keel::cache {

int64_t remove_leftovers(const Layout& layout) {
  struct Seen {
    std::vector<std::string> temps;
    bool files = false;
    bool manifest = false;
  };
  std::map<std::string, Seen> keys;
  for (const std::string& name : fs::list_dir(layout.entries)) {
    EntryName n = classify_name(name);
    if (n.kind == EntryName::temp) keys[n.key].temps.push_back(name);
    if (n.kind == EntryName::file) {
      keys[n.key].files = true;
      if (n.ext == kManifestExt) keys[n.key].manifest = true;
    }
  }
  int64_t removed = 0;
  for (const auto& [key, seen] : keys) {
    if (seen.temps.empty() && seen.manifest) continue;
    std::optional<KeyLock> lock = KeyLock::try_acquire(layout.lock(key));
    if (!lock) continue;  // a live writer
    for (const std::string& name : seen.temps) {
      std::string path = layout.entries + "/" + name;
      std::optional<struct stat> st = fs::lstat_path(path);
      if (st && fs::remove_file(path)) removed += st->st_size;
    }
    // Re-checked under the lock: the manifest may have appeared since the listing.
    if (seen.files && !fs::lstat_path(layout.file(key, kManifestExt))) {
      removed += remove_entry(layout, key);
    }
  }
  return removed;
}

std::vector<Usage> usage(const Layout& layout) {
  std::vector<Usage> out;
  for (const std::string& name : fs::list_dir(layout.entries)) {
    EntryName n = classify_name(name);
    if (n.kind != EntryName::file || n.ext != kManifestExt) continue;
    Usage u;
    u.key = n.key;
    u.bytes = entry_bytes(layout, n.key);
    std::optional<struct stat> used = fs::lstat_path(layout.file(n.key, kUsedExt));
    if (!used) used = fs::lstat_path(layout.file(n.key, kManifestExt));
    if (!used) continue;  // removed while we looked
    u.last_used_ns = fs::mtime_ns(*used);
    out.push_back(std::move(u));
  }
  return out;
}

int64_t evict_lru(const Layout& layout, int64_t max_bytes, const std::string& keep) {
  std::vector<Usage> all = usage(layout);
  int64_t total = 0;
  for (const Usage& u : all) total += u.bytes;
  std::sort(all.begin(), all.end(), [](const Usage& a, const Usage& b) {
    return a.last_used_ns != b.last_used_ns ? a.last_used_ns < b.last_used_ns : a.key < b.key;
  });
  int64_t freed = 0;
  for (const Usage& u : all) {
    if (total <= max_bytes) break;
    if (u.key == keep) continue;
    std::optional<KeyLock> lock = KeyLock::try_acquire(layout.lock(u.key));
    if (!lock) continue;
    int64_t n = remove_entry(layout, u.key);
    freed += n;
    total -= n;
  }
  return freed;
}

}  // namespace keel::cache
