// What is in the disk tier: listing, graph text for explanations, an fsck-like verify, prune.
#include <fmt/format.h>

#include <algorithm>
#include <nlohmann/json.hpp>
#include <set>

#include "cache/entry.h"
#include "cache/impl.h"
#include "cache/lock.h"
#include "cache/maintenance.h"
#include "files/publish.h"
#include "ir/error.h"
#include "ir/text.h"
#include "ir/utf8_escape.h"

namespace keel::cache {

namespace {

constexpr int64_t kMaxGraphTextBytes = int64_t{1} << 30;

// The function a possibly broken manifest names, for messages; "" when unreadable.
std::string function_hint(const Layout& layout, const std::string& key) {
  try {
    std::optional<std::string> text = fs::read_file(layout.file(key, kManifestExt), 16 << 20);
    if (!text) return "";
    nlohmann::json j = nlohmann::json::parse(*text);
    if (j.is_object() && j.contains("function") && j["function"].is_string()) {
      return utf8_to_bytes(j["function"].get<std::string>());
    }
  } catch (const std::exception&) {
  }
  return "";
}

std::optional<std::string> read_graph_text(const Layout& layout, const std::string& key) {
  return fs::read_file(layout.file(key, kGraphExt), kMaxGraphTextBytes);
}

// Why an entry's graph text is not the one its manifest's digest names, or nullopt (also when
// the manifest predates digests).
std::optional<std::string> graph_text_problem(const Layout& layout, const std::string& key,
                                              const std::optional<std::string>& text,
                                              const Manifest& m) {
  // The key leaves the function's name out (one graph, one entry); its graph text names it.
  if (text && !text->starts_with("graph " + name_text(m.function) + " {\n")) {
    return fmt::format("its manifest names the function {}, and {} names another (edited)",
                       name_text(m.function), layout.file(key, kGraphExt));
  }
  if (m.graph_text_digest.empty() || (text && content_digest(*text) == m.graph_text_digest)) {
    return std::nullopt;
  }
  return fmt::format("{} is {} (its manifest's BLAKE2b digest is {})", layout.file(key, kGraphExt),
                     text ? "not the graph text published with it" : "missing",
                     m.graph_text_digest);
}

// Empty when the entry is complete and intact, else the reason; a missing manifest means the
// entry is being written (or its leftovers wait for a free lock), which is not a problem.
std::optional<std::string> check_entry(const Layout& layout, const std::string& key) {
  try {
    std::optional<StoredEntry> e = read_entry(layout, key);
    if (e) {
      const std::optional<std::string> text = read_graph_text(layout, key);
      if (std::optional<std::string> p = graph_text_problem(layout, key, text, e->manifest)) {
        throw fs::Problem(*p);
      }
    }
  } catch (const fs::Problem& p) {
    if (!fs::lstat_path(layout.file(key, kManifestExt))) return std::nullopt;
    return p.what();
  }
  return std::nullopt;
}

// With signatures required: why an intact entry would not be loaded, or nullopt.
std::optional<std::string> untrusted(const Layout& layout, Signatures required,
                                     const std::vector<PublicKeyId>& trusted,
                                     const std::string& key) {
  if (required == Signatures::off) return std::nullopt;
  try {
    std::optional<StoredEntry> e = read_entry(layout, key);
    if (!e) return std::nullopt;
    return trust_problem(*e, trusted);
  } catch (const fs::Problem&) {
    return std::nullopt;  // damaged, or removed meanwhile: check_entry's to report
  }
}

}  // namespace

std::vector<EntryInfo> ExecutableCache::entries(int64_t* damaged) const {
  std::vector<EntryInfo> out;
  if (!impl_->disk) return out;
  const Layout& layout = impl_->layout;
  for (const Usage& u : usage(layout)) {
    try {
      std::optional<Manifest> m = read_manifest(layout, u.key);
      if (m) out.push_back({std::move(*m), u.bytes, u.last_used_ns});
    } catch (const fs::Problem&) {
      // Bad entries are verify_all's to report; a listing shows usable ones, and counts the rest.
      if (damaged) ++*damaged;
    }
  }
  std::sort(out.begin(), out.end(), [](const EntryInfo& a, const EntryInfo& b) {
    if (a.manifest.created_unix != b.manifest.created_unix) {
      return a.manifest.created_unix > b.manifest.created_unix;
    }
    return a.last_used_unix_ns > b.last_used_unix_ns;
  });
  return out;
}

std::vector<Manifest> ExecutableCache::list() const {
  std::vector<Manifest> out;
  for (EntryInfo& e : entries()) out.push_back(std::move(e.manifest));
  return out;
}

std::optional<Manifest> ExecutableCache::nearest(const std::string& function) const {
  std::optional<EntryInfo> best;
  for (EntryInfo& e : entries()) {
    if (e.manifest.function != function) continue;
    if (!best || e.last_used_unix_ns > best->last_used_unix_ns) best = std::move(e);
  }
  if (!best) return std::nullopt;
  return std::move(best->manifest);
}

std::optional<std::string> ExecutableCache::graph_text(const std::string& key) const {
  if (!impl_->disk || !is_key(key)) return std::nullopt;
  std::optional<std::string> text;
  std::optional<Manifest> m;
  try {
    text = read_graph_text(impl_->layout, key);
    if (text) m = read_manifest(impl_->layout, key);
  } catch (const fs::Problem& p) {
    throw InputError(fmt::format("[cache] graph text of entry {}: {}", key, p.what()));
  }
  if (m) {
    if (std::optional<std::string> p = graph_text_problem(impl_->layout, key, text, *m)) {
      throw InputError(fmt::format(
          "[cache] graph text of entry {}: {}; run `keel cache verify` to quarantine the entry",
          key, *p));
    }
  }
  return text;
}

std::vector<EntryCheck> ExecutableCache::verify_all() {
  Impl& s = *impl_;
  std::vector<EntryCheck> out;
  if (!s.disk) return out;
  if (s.writes()) remove_leftovers(s.layout);
  std::set<std::string> keys;
  for (const std::string& name : fs::list_dir(s.layout.entries)) {
    EntryName n = classify_name(name);
    if (n.kind == EntryName::file) keys.insert(n.key);
    if (n.kind == EntryName::other) {
      out.push_back({name, false,
                     fmt::format("[cache] {}/{} is not a cache file; remove it", s.layout.entries,
                                 printable_text(name)),
                     true});
    }
  }
  for (const std::string& key : keys) {
    auto intact = [&] {
      if (!fs::lstat_path(s.layout.file(key, kManifestExt))) return;
      if (std::optional<std::string> why =
              untrusted(s.layout, s.config.signatures, s.trusted, key)) {
        out.push_back({key, false,
                       entry_problem_text(key, function_hint(s.layout, key), *why) +
                           "; intact, left in place (it would not be loaded)"});
        return;
      }
      out.push_back({key, true, ""});
    };
    std::optional<std::string> problem = check_entry(s.layout, key);
    if (!problem) {
      intact();
      continue;
    }
    if (!s.writes()) {
      out.push_back({key, false,
                     entry_problem_text(key, function_hint(s.layout, key), *problem) +
                         "; left in place (read-only cache)"});
      continue;
    }
    KeyLock lock = KeyLock::acquire(s.layout.lock(key), s.config.lock_timeout_s);
    problem = check_entry(s.layout, key);  // it may have been replaced or evicted meanwhile
    if (!problem) {
      intact();
      continue;
    }
    std::string text = entry_problem_text(key, function_hint(s.layout, key), *problem);
    out.push_back({key, false, text + "; quarantined to " + quarantine_entry(s.layout, key)});
  }
  std::sort(out.begin(), out.end(),
            [](const EntryCheck& a, const EntryCheck& b) { return a.key < b.key; });
  return out;
}

int64_t ExecutableCache::sign_all(const std::string& key_file, int64_t* damaged) {
  Impl& s = *impl_;
  if (!s.writes()) {
    throw Error(fmt::format("[cache] cannot sign the entries of {}: the cache is open {}",
                            s.layout.versioned,
                            s.disk ? mode_name(s.config.mode) : "without a disk tier"));
  }
  const SigningKey key = SigningKey::read(key_file);
  int64_t signed_count = 0;
  for (const std::string& name : fs::list_dir(s.layout.entries)) {
    EntryName n = classify_name(name);
    if (n.kind != EntryName::file || n.ext != kManifestExt) continue;
    KeyLock lock = KeyLock::acquire(s.layout.lock(n.key), s.config.lock_timeout_s);
    std::optional<StoredEntry> e;
    try {
      e = read_entry(s.layout, n.key);
    } catch (const fs::Problem&) {
      if (damaged) ++*damaged;
      continue;  // damaged: never vouched for (keel cache verify quarantines it)
    }
    if (!e) continue;
    auto put = [&](std::string_view ext, const std::string& text) {
      files::PublishOptions o;
      o.temp_name = temp_name(n.key, ext);
      o.mode = 0600;
      o.sync_directory = false;
      files::publish_file(s.layout.file(n.key, ext), text, o);
    };
    if (e->manifest.digest.empty()) {  // published before digests: vouch for these bytes
      Manifest m = e->manifest;
      m.digest = content_digest(e->bytes);
      std::optional<std::string> text;
      try {
        text = read_graph_text(s.layout, n.key);
      } catch (const fs::Problem&) {
        if (damaged) ++*damaged;
        continue;  // damaged like the above: verify's to quarantine, never vouched for
      }
      if (text) m.graph_text_digest = content_digest(*text);
      const std::string manifest_text = m.to_json();
      put(kSigExt, key.sign(manifest_text));
      put(kManifestExt, manifest_text);
    } else {
      put(kSigExt, key.sign(e->manifest_text));
    }
    ++signed_count;
  }
  files::fsync_directory(s.layout.entries);
  return signed_count;
}

int64_t ExecutableCache::prune(int64_t max_bytes) {
  Impl& s = *impl_;
  if (!s.disk) return 0;
  if (!s.writes()) {
    throw Error(fmt::format("[cache] cannot prune {}: the cache is open {}; prune needs readwrite",
                            s.layout.versioned, mode_name(s.config.mode)));
  }
  int64_t freed = remove_leftovers(s.layout);
  return max_bytes < 0 ? freed : freed + evict_lru(s.layout, max_bytes, "");
}

}  // namespace keel::cache
