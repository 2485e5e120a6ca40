#include "cache/entry.h"

#include <fmt/format.h>

#include <array>
#include <cerrno>
#include <cstdio>
#include <ctime>

#include "cache/key.h"
#include "files/publish.h"
#include "ir/error.h"
#include "ir/text.h"
#include "policy/bundle.h"

namespace keel::cache {

namespace {

constexpr int64_t kMaxManifestBytes = 16 << 20;
constexpr int64_t kMaxSignatureBytes = 4096;
constexpr std::array<std::string_view, 5> kAllExts = {kManifestExt, kBinExt, kGraphExt, kUsedExt,
                                                      kSigExt};  // manifest first

std::string without_api_prefix(const std::string& message) {
  return message.rfind("[cache] ", 0) == 0 ? message.substr(8) : message;
}

}  // namespace

std::optional<Manifest> read_manifest(const Layout& layout, const std::string& key,
                                      std::string* text_out) {
  std::string path = layout.file(key, kManifestExt);
  std::optional<std::string> text = fs::read_file(path, kMaxManifestBytes);
  if (!text) return std::nullopt;
  if (text_out) *text_out = *text;
  Manifest m;
  try {
    m = Manifest::from_json(*text, path);
  } catch (const InputError& e) {
    throw fs::Problem(without_api_prefix(e.what()));
  }
  if (m.key != key) {
    throw fs::Problem(fmt::format("manifest {} names key {}, not its own", path, m.key));
  }
  std::string bundle_hash;
  try {
    bundle_hash = policy::Bundle::from_json(m.bundle_json, path).hash();
  } catch (const InputError& e) {
    throw fs::Problem(fmt::format("manifest {} has a bad bundle: {}", path, e.what()));
  }
  if (bundle_hash != m.bundle_hash) {
    throw fs::Problem(fmt::format(
        "manifest {} has a bundle that hashes to {}, not its bundle_hash {} (edited, or copied "
        "from another bundle)",
        path, bundle_hash, m.bundle_hash));
  }
  std::string recomputed =
      key_of(m.signature, m.graph_hash, m.bundle_hash, m.codegen, m.platform).hex();
  if (recomputed != key) {
    throw fs::Problem(fmt::format(
        "manifest {} describes inputs whose key is {}, not its own (edited or misplaced)", path,
        recomputed));
  }
  return m;
}

std::optional<StoredEntry> read_entry(const Layout& layout, const std::string& key) {
  std::string manifest_text;
  std::optional<Manifest> m = read_manifest(layout, key, &manifest_text);
  if (!m) return std::nullopt;
  for (std::string_view ext : {kGraphExt, kUsedExt, kSigExt}) {
    std::string path = layout.file(key, ext);
    std::optional<struct stat> st = fs::lstat_path(path);
    if (st && S_ISLNK(st->st_mode)) {
      throw fs::Problem(fmt::format("{} is a symlink; refusing to follow it", path));
    }
    if (st && !S_ISREG(st->st_mode)) throw fs::Problem(path + " is not a regular file");
  }
  std::string bin = layout.file(key, kBinExt);
  std::optional<std::string> bytes = fs::read_file(bin, m->size);
  if (!bytes) {
    throw fs::Problem(fmt::format("{} is missing (its manifest says {} bytes)", bin, m->size));
  }
  if (static_cast<int64_t>(bytes->size()) != m->size) {
    throw fs::Problem(fmt::format("{} is truncated: {} bytes, its manifest says {}", bin,
                                  bytes->size(), m->size));
  }
  std::string sum = hash_bytes(*bytes).hex();
  if (sum != m->checksum) {
    throw fs::Problem(
        fmt::format("{} failed its checksum (manifest {}, file {})", bin, m->checksum, sum));
  }
  if (!m->digest.empty() && content_digest(*bytes) != m->digest) {
    throw fs::Problem(fmt::format("{} does not match its manifest's BLAKE2b digest (manifest {})",
                                  bin, m->digest));
  }
  std::optional<std::string> signature =
      fs::read_file(layout.file(key, kSigExt), kMaxSignatureBytes);
  return StoredEntry{std::move(*m), std::move(manifest_text), std::move(signature),
                     std::move(*bytes)};
}

void publish_entry(const Layout& layout, const Manifest& manifest, std::string_view bytes,
                   std::string_view graph_text, const fs::Hook& hook, const SigningKey* signer) {
  const std::string& key = manifest.key;
  auto put = [&](std::string_view ext, std::string_view content) {
    files::PublishOptions o;
    o.temp_name = temp_name(key, ext);  // maintenance recognises a dead writer's by its name
    o.mode = 0600;
    o.sync_directory = false;  // once for the data files, once for the manifest
    if (hook) o.hook = [&](std::string_view step) { hook(fmt::format("{}.{}", ext, step)); };
    files::publish_file(layout.file(key, ext), content, o);
  };
  put(kGraphExt, graph_text);
  put(kBinExt, bytes);
  put(kUsedExt, "");
  const std::string manifest_text = manifest.to_json();
  if (signer) put(kSigExt, signer->sign(manifest_text));
  // The data files are durable under their names before the manifest can point at them.
  files::fsync_directory(layout.entries);
  if (hook) hook("dir.synced");
  put(kManifestExt, manifest_text);
  files::fsync_directory(layout.entries);
  if (hook) hook("published");
}

std::optional<std::string> trust_problem(const StoredEntry& e,
                                         const std::vector<PublicKeyId>& trusted) {
  if (std::optional<std::string> why = signature_problem(e.signature, e.manifest_text, trusted)) {
    return why;
  }
  // A signature binds the executable only through a digest an attacker cannot match.
  if (e.manifest.digest.empty()) {
    return std::string(
        "its signed manifest has no BLAKE2b digest of the executable (published before "
        "digests); sign it again (keel cache sign --key FILE)");
  }
  return std::nullopt;
}

std::string quarantine_entry(const Layout& layout, const std::string& key) {
  std::string base = fmt::format("{}/{}.{}", layout.quarantine, key, std::time(nullptr));
  std::string dir = base;
  for (int n = 1; !fs::make_dir(dir); ++n) dir = fmt::format("{}.{}", base, n);
  for (std::string_view ext : kAllExts) {
    std::string from = layout.file(key, ext);
    std::string to = fmt::format("{}/{}.{}", dir, key, ext);
    // rename moves a symlink itself, never its target.
    if (std::rename(from.c_str(), to.c_str()) != 0 && errno != ENOENT) {
      throw Error(fmt::format("[cache] cannot quarantine {} to {}: {}; remove it by hand", from, to,
                              fs::errno_text(errno)));
    }
  }
  files::fsync_directory(layout.entries);
  files::fsync_directory(dir);
  return dir;
}

int64_t remove_entry(const Layout& layout, const std::string& key) {
  int64_t freed = 0;
  for (std::string_view ext : kAllExts) {
    std::string path = layout.file(key, ext);
    std::optional<struct stat> st = fs::lstat_path(path);
    if (st && fs::remove_file(path)) freed += static_cast<int64_t>(st->st_size);
  }
  files::fsync_directory(layout.entries);
  return freed;
}

int64_t entry_bytes(const Layout& layout, const std::string& key) {
  int64_t total = 0;
  for (std::string_view ext : kAllExts) {
    if (auto st = fs::lstat_path(layout.file(key, ext))) total += st->st_size;
  }
  return total;
}

std::string entry_problem_text(const std::string& key, const std::string& function,
                               const std::string& reason) {
  if (function.empty()) return fmt::format("[cache] entry {}: {}", key, reason);
  return fmt::format("[cache] entry {} ('{}'): {}", key, name_text(function), reason);
}

}  // namespace keel::cache
