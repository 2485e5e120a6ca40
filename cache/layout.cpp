#include "cache/layout.h"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <random>

#include "ir/version.h"

namespace keel::cache {

Layout::Layout(const std::string& root_dir)
    : root(root_dir),
      versioned(root_dir + "/v" + std::to_string(Formats::cache_layout)),
      entries(versioned + "/entries"),
      locks(versioned + "/locks"),
      quarantine(versioned + "/quarantine") {}

std::string Layout::file(const std::string& key, std::string_view ext) const {
  return fmt::format("{}/{}.{}", entries, key, ext);
}

std::string Layout::lock(const std::string& key) const {
  return fmt::format("{}/{}.lock", locks, key);
}

bool is_key(std::string_view s) {
  if (s.size() != 32) return false;
  for (char c : s) {
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  }
  return true;
}

std::string temp_name(const std::string& key, std::string_view ext) {
  // The random part keeps names unique across hosts sharing a directory and across pid reuse.
  thread_local std::mt19937_64 rng(std::random_device{}());
  return fmt::format(".tmp.{}.{}.{}.{:016x}", key, ext, static_cast<long>(::getpid()), rng());
}

EntryName classify_name(const std::string& name) {
  EntryName out;
  if (name.rfind(".tmp.", 0) == 0) {
    std::string key = name.substr(5, 32);
    if (is_key(key) && name.size() > 37 && name[37] == '.') {
      out.kind = EntryName::temp;
      out.key = key;
    }
    return out;
  }
  size_t dot = name.find('.');
  if (dot != 32 || !is_key(std::string_view(name).substr(0, 32))) return out;
  std::string ext = name.substr(33);
  if (ext == kGraphExt || ext == kBinExt || ext == kUsedExt || ext == kManifestExt ||
      ext == kSigExt) {
    out.kind = EntryName::file;
    out.key = name.substr(0, 32);
    out.ext = ext;
  }
  return out;
}

std::vector<int> newer_layouts(const std::string& root) {
  std::vector<int> out;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(root, ec)) {
    const std::string name = e.path().filename().string();
    if (name.size() < 2 || name.size() > 6 || name[0] != 'v' ||
        name.find_first_not_of("0123456789", 1) != std::string::npos || !e.is_directory(ec)) {
      continue;
    }
    const int version = std::stoi(name.substr(1));
    if (version > Formats::cache_layout) out.push_back(version);
  }
  std::sort(out.begin(), out.end());
  return out;
}

std::string newer_layouts_note(const std::string& root) {
  std::vector<int> newer = newer_layouts(root);
  if (newer.empty()) return "";
  std::string names;
  for (int v : newer) names += fmt::format("{}v{}", names.empty() ? "" : ", ", v);
  return fmt::format(
      "[cache] {} also holds layout {}, written by a newer keel; this keel ({}) reads layout v{} "
      "and leaves the newer one alone: use a keel release that reads layout v{} to see those "
      "entries",
      root, names, kVersion, Formats::cache_layout, newer.back());
}

}  // namespace keel::cache
