#pragma once
// One disk-tier entry: <key>.kir, <key>.bin, <key>.used and, last, <key>.json. Reading checks
// everything that can be checked without running the executable; writing is publish-by-rename.
#include <optional>
#include <string>
#include <string_view>

#include "cache/cache.h"
#include "cache/fs.h"
#include "cache/layout.h"
#include "cache/signing.h"

namespace keel::cache {

struct StoredEntry {
  Manifest manifest;
  std::string manifest_text;             // the bytes a signature covers
  std::optional<std::string> signature;  // the .sig file, when there is one
  std::string bytes;                     // the serialized executable, size and checksum verified
};

// The manifest of `key`, checked against its file name (its components must hash to `key`) and
// its bundle against bundle_hash. nullopt: no manifest, so no entry. fs::Problem: a bad entry.
std::optional<Manifest> read_manifest(const Layout& layout, const std::string& key,
                                      std::string* text = nullptr);  // text: its bytes

// The manifest and the executable bytes (size, checksum), and no file of the entry a symlink.
// nullopt: no complete entry. fs::Problem: a bad entry, with the reason.
std::optional<StoredEntry> read_entry(const Layout& layout, const std::string& key);

// Publishes .kir, .bin, .used, then .json, each durable before the next becomes visible.
// keel::Error on an I/O failure (temporaries are removed).
// With a signer, the .sig is published before the manifest too.
void publish_entry(const Layout& layout, const Manifest& manifest, std::string_view bytes,
                   std::string_view graph_text, const fs::Hook& hook,
                   const SigningKey* signer = nullptr);

// Why `e` is not vouched for by a key in `trusted` (its signature, or a signed manifest without
// the executable's digest), or nullopt. read_entry has already matched the digest to the bytes.
std::optional<std::string> trust_problem(const StoredEntry& e,
                                         const std::vector<PublicKeyId>& trusted);

// Moves every file of `key` into a new quarantine/<key>.<unix time>/ and returns that path.
std::string quarantine_entry(const Layout& layout, const std::string& key);

// Unlinks every file of `key`, the manifest first so the entry stops being complete at once.
// Never truncates: a process that has the file open or mapped keeps its bytes. Returns bytes.
int64_t remove_entry(const Layout& layout, const std::string& key);

// Bytes of all of `key`'s files that exist.
int64_t entry_bytes(const Layout& layout, const std::string& key);

// "[cache] entry <key> ('<function>'): <reason>" without a trailing period; the function as the
// graph text spells it (no raw control characters), left out when "" (unknown).
std::string entry_problem_text(const std::string& key, const std::string& function,
                               const std::string& reason);

}  // namespace keel::cache
