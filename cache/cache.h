#pragma once
/// @file
/// The executable cache: a memory tier and a disk tier of compiled executables (not IR), so a
/// warm restart only loads. One compile per key per directory (flock), atomic publishing,
/// verification before loading, quarantine instead of execution when an entry is bad.
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "backend/backend.h"
#include "ir/error.h"
#include "ir/hash.h"
#include "policy/bundle.h"

/// The executable cache: compiled programs in memory and on disk, by key.
namespace keel::cache {

/// What the disk tier may do (compile_cache.mode). readwrite: load and publish. readonly: load
/// only, never write. sealed: load only, and a miss is a SealedMiss instead of a compile. off:
/// no disk tier.
enum class Mode { readwrite, readonly, sealed, off };
/// The mode's policy name ("readwrite", ...).
std::string_view mode_name(Mode m);
/// The mode named `s`; nullopt for an unknown name.
std::optional<Mode> parse_mode(std::string_view s);

/// Who else writes the directory (compile_cache.layout). per_host: the processes of one host;
/// the per-key lock elects one compiler. shared: every host of the launch sees it, so a lock
/// another host can see is not assumed: the launch elects one writer per key and the other
/// processes only read (Access::read), and nobody clears what a writer elsewhere may still own.
enum class Sharing { per_host, shared };
/// "per_host" or "shared".
std::string_view sharing_name(Sharing s);
/// The sharing named `s`; nullopt for an unknown name.
std::optional<Sharing> parse_sharing(std::string_view s);

/// Whose entries load (compile_cache.signatures). off: any intact entry. recompile: only those
/// signed by a trusted key; another is reported and compiled locally. refuse: another is an error.
enum class Signatures { off, recompile, refuse };
/// "off", "recompile" or "refuse".
std::string_view signatures_name(Signatures s);
/// The signatures setting named `s`; nullopt for an unknown name.
std::optional<Signatures> parse_signatures(std::string_view s);

/// How one lookup may use the disk tier. elect: load, or take the key's lock, compile and
/// publish (quarantining a bad entry). read: load only; on a miss or a bad entry compile in
/// memory and leave the directory exactly as it was (an elected writer elsewhere owns it).
enum class Access { elect, read };

/// How an ExecutableCache uses its directory (the compile_cache.* policy keys).
struct CacheConfig {
  std::string dir;                      ///< empty: default_cache_dir()
  Mode mode = Mode::readwrite;          ///< what the disk tier may do (compile_cache.mode)
  Sharing sharing = Sharing::per_host;  ///< who else writes the directory (compile_cache.layout)
  std::string host;                     ///< recorded in the manifests this process writes
  int64_t max_bytes = 0;                ///< disk tier limit, LRU eviction; 0: unlimited
  bool unsafe_dir_is_error = true;      ///< false: disable the disk tier with a warning instead
  bool forbid_compile = false;          ///< any compile is an error
  /// Longest wait for a key's lock held by another process (compile_cache.lock_timeout_s); a
  /// deadline, so it is not part of any key. Longer than a compile may take.
  double lock_timeout_s = 900;
  Signatures signatures = Signatures::off;  ///< whose entries load (compile_cache.signatures)
  std::vector<std::string> trusted_keys;    ///< "ed25519:`<hex>`" (compile_cache.trusted_keys)
  /// A secret key file (keel cache keygen) that signs every entry this process publishes; its
  /// own public key is trusted too. Empty: entries are published unsigned.
  std::string signing_key;
  /// Tests only: called between the steps of publishing an entry ("bin.renamed", ...), so a
  /// crash test can stop a process in every window.
  std::function<void(std::string_view step)> publish_hook;
};

/// $XDG_CACHE_HOME/keel, else ~/.cache/keel (compile_cache.dir overrides it).
std::string default_cache_dir();
/// The steps of publishing one entry, in order, as passed to CacheConfig::publish_hook.
const std::vector<std::string>& publish_steps();

/// Everything a key is made of. Never tensor values.
struct KeyParts {
  std::string function;   ///< for manifests and messages; not part of the key
  std::string signature;  ///< input types, "f32[8,256],i64[]"
  Hash128 graph;          ///< structural hash of the traced graph
  policy::Bundle bundle;  ///< the compatibility bundle of the running stack
  std::string codegen;    ///< backend::CompileOptions::fingerprint()
  std::string platform;   ///< "cpu" | "ref"
  /// The cache key: a hash of signature, graph, bundle hash, codegen and platform.
  Hash128 key() const;
};

/// One entry's manifest, `<dir>/v1/entries/<key>.json`; written last, so it marks a complete entry.
struct Manifest {
  std::string key;             ///< the entry's key, hex
  std::string function;        ///< the traced function's name
  std::string signature;       ///< input types, as in KeyParts
  std::string graph_hash;      ///< structural hash of the graph, hex
  std::string bundle_json;     ///< the whole bundle
  std::string bundle_hash;     ///< Bundle::hash() of the bundle
  std::string codegen;         ///< backend::CompileOptions::fingerprint()
  std::string platform;        ///< "cpu" | "ref"
  double compile_seconds = 0;  ///< how long the compile took
  std::string host;      ///< where it was compiled (its CPU features are in the bundle and the key)
  int64_t size = 0;      ///< bytes of the serialized executable
  std::string checksum;  ///< XXH3-128 hex of those bytes
  /// BLAKE2b-256 hex of those bytes (content_digest); empty in entries published before
  /// digests, which a cache requiring signatures does not load.
  std::string digest;
  /// BLAKE2b-256 hex of the graph text published beside them; empty as `digest` is.
  std::string graph_text_digest;
  int64_t created_unix = 0;  ///< when it was published, Unix seconds
  /// backend::Executable::predicted_peak_bytes() of the executable.
  int64_t predicted_peak_bytes = 0;

  /// The manifest file's JSON text.
  std::string to_json() const;
  /// Parses a manifest's JSON; keel::InputError naming `source` when it is bad.
  static Manifest from_json(const std::string& json, const std::string& source);
};

/// Where a lookup found its executable: the memory tier, the disk tier, or a fresh compile.
enum class Tier { memory, disk, compiled };
/// "memory", "disk" or "compiled".
std::string_view tier_name(Tier t);

/// A lookup in a sealed cache that has no usable entry: nothing was compiled.
class SealedMiss : public Error {
 public:
  using Error::Error;
};

/// The result of ExecutableCache::get.
struct Lookup {
  std::shared_ptr<backend::Executable> executable;  ///< the program, ready to run
  Tier tier = Tier::compiled;                       ///< where it came from
  double seconds = 0;                               ///< compile or load time
  std::string key;                                  ///< the cache key, hex
  bool stored = false;  ///< a verified entry for the key is on disk: loaded from it or published
  std::string problem;  ///< why an entry found on disk was not used; empty: none was there
  std::vector<std::string> notes;  ///< quarantines, read-only misses, lock waits: one line each
};

/// A complete entry with what eviction and `keel cache ls` need beyond its manifest.
struct EntryInfo {
  Manifest manifest;              ///< the entry's manifest
  int64_t bytes = 0;              ///< all of the entry's files
  int64_t last_used_unix_ns = 0;  ///< mtime of `<key>.used`: set on publish and on every load
};

/// One entry's outcome in ExecutableCache::verify_all.
struct EntryCheck {
  std::string key;      ///< the entry's key, hex
  bool ok = true;       ///< intact (and signed by a trusted key when signatures are required)
  std::string problem;  ///< empty when ok
  bool stray = false;   ///< not an entry: a file of another name in the entries directory
};

/// The executable cache of one directory: lookups through the memory and disk tiers, and the
/// maintenance behind `keel cache` (list, verify, sign, prune).
class ExecutableCache {
 public:
  /// Opens (creating if needed) the directory and checks it is safe: owned by this user, not
  /// writable by group or others, no symlinks. Unsafe: InputError, or per config a warning and
  /// no disk tier.
  ExecutableCache(CacheConfig config, std::shared_ptr<backend::Client> client);

  /// Memory tier, then disk tier (verified; a bad entry is quarantined and recompiled), then
  /// `compile` under the per-key lock, published atomically. `graph` is stored beside the entry
  /// (canonical text with locations) so later misses can be explained across restarts. With
  /// Access::read nothing on disk is created, touched, moved or removed.
  Lookup get(const KeyParts& parts, const Graph& graph,
             const std::function<std::unique_ptr<backend::Executable>()>& compile,
             Access access = Access::elect);
  Sharing sharing() const;  ///< as configured (compile_cache.layout)

  bool disk_enabled() const;  ///< false when the mode is off or an unsafe directory disabled it
  bool writes() const;        ///< the disk tier is enabled and mode is readwrite
  const std::string& dir() const;  ///< the versioned directory, `<dir>/v1`
  /// Problems met when opening, such as an unsafe directory.
  const std::vector<std::string>& warnings() const;

  std::vector<Manifest> list() const;  ///< complete entries, newest first
  /// The same, with sizes and last use; `damaged` (if given) counts the entries left out because
  /// their manifest cannot be read (verify_all names them).
  std::vector<EntryInfo> entries(int64_t* damaged = nullptr) const;
  /// Like fsck: damaged entries are quarantined; with signatures required, an entry not signed by
  /// a trusted key is reported (and left: another user may trust its signer).
  std::vector<EntryCheck> verify_all();
  /// Signs every intact entry with the key file (`keel cache sign`); returns how many.
  /// `damaged` (if given) counts the entries left unsigned because they are damaged.
  int64_t sign_all(const std::string& key_file, int64_t* damaged = nullptr);
  /// LRU eviction by unlink (never truncation) until the disk tier fits; entries being written
  /// are skipped. Also removes what crashed writers left behind (only that when max_bytes < 0).
  /// Returns bytes freed.
  int64_t prune(int64_t max_bytes);
  /// The most recently used entry of `function`, for explaining a miss.
  std::optional<Manifest> nearest(const std::string& function) const;
  /// The canonical graph text stored beside entry `key`; nullopt without a disk tier or for a
  /// malformed key. InputError when it cannot be read.
  std::optional<std::string> graph_text(const std::string& key) const;

 private:
  struct Impl;
  std::shared_ptr<Impl> impl_;
};

}  // namespace keel::cache
