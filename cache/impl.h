#pragma once
// The state behind ExecutableCache, shared by the files that implement its parts.
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "cache/cache.h"
#include "cache/layout.h"
#include "cache/signing.h"

namespace keel::cache {

struct ExecutableCache::Impl {
  CacheConfig config;
  std::shared_ptr<backend::Client> client;
  Layout layout;
  bool disk = false;    // the disk tier is usable (mode not off, directory safe)
  bool forbid = false;  // config.forbid_compile (compile_cache.forbid_compile)
  std::vector<std::string> warnings;

  std::mutex mu;  // guards memory and key_mutexes
  std::map<std::string, std::shared_ptr<backend::Executable>> memory;
  std::set<std::string> on_disk;  // keys of memory that were loaded from or published to disk
  std::map<std::string, std::shared_ptr<std::mutex>> key_mutexes;

  std::optional<SigningKey> signer;  // config.signing_key, read once
  std::vector<PublicKeyId> trusted;  // config.trusted_keys and the signer's own key

  Impl(CacheConfig c, std::shared_ptr<backend::Client> cl);
  bool writes() const { return disk && config.mode == Mode::readwrite; }
  // Writes entries: with signatures required, only a process that can sign them does (an
  // unsigned entry would be of no use to anyone, itself included).
  bool publishes() const {
    return writes() && (config.signatures == Signatures::off || signer.has_value());
  }

  // *stored: whether the key's entry is on disk as far as this process knows.
  std::shared_ptr<backend::Executable> find(const std::string& key, bool* stored);
  void remember(const std::string& key, std::shared_ptr<backend::Executable> exe, bool stored);
  std::shared_ptr<std::mutex> key_mutex(const std::string& key);

  // Verifies and loads `r.key` from the disk tier into `r`. False when there is no usable
  // entry; then *problem holds the reason if there is a bad one.
  // Access::read leaves the entry's last-use time alone.
  bool load_from_disk(const KeyParts& parts, Lookup& r, std::optional<std::string>* problem,
                      Access access);
  // Runs `compile` (unless compiles are forbidden) and fills r.executable, tier, seconds.
  void compile_into(const KeyParts& parts,
                    const std::function<std::unique_ptr<backend::Executable>()>& compile,
                    Lookup& r);
  // Serializes r.executable and publishes it under r.key; the caller holds the key's lock.
  void publish(const KeyParts& parts, const Graph& graph, const Lookup& r);
};

// "f32[4],i64[] (key 3f2a…)": what a message says about a program's inputs.
std::string inputs_text(const KeyParts& parts, const std::string& key);

}  // namespace keel::cache
