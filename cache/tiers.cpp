// The three ways a lookup is satisfied: the memory tier, a verified disk entry, a compile.
#include <fmt/format.h>

#include <chrono>
#include <ctime>

#include "cache/entry.h"
#include "cache/impl.h"
#include "ir/error.h"
#include "ir/text.h"

namespace keel::cache {

namespace {

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

std::string inputs_text(const KeyParts& parts, const std::string& key) {
  return fmt::format("{}; key {}", parts.signature.empty() ? "no inputs" : parts.signature, key);
}

std::shared_ptr<backend::Executable> ExecutableCache::Impl::find(const std::string& key,
                                                                 bool* stored) {
  std::lock_guard lock(mu);
  auto it = memory.find(key);
  *stored = on_disk.count(key) > 0;
  return it == memory.end() ? nullptr : it->second;
}

void ExecutableCache::Impl::remember(const std::string& key,
                                     std::shared_ptr<backend::Executable> exe, bool stored) {
  std::lock_guard lock(mu);
  memory[key] = std::move(exe);
  if (stored) on_disk.insert(key);
}

std::shared_ptr<std::mutex> ExecutableCache::Impl::key_mutex(const std::string& key) {
  std::lock_guard lock(mu);
  std::shared_ptr<std::mutex>& m = key_mutexes[key];
  if (!m) m = std::make_shared<std::mutex>();
  return m;
}

bool ExecutableCache::Impl::load_from_disk(const KeyParts& parts, Lookup& r,
                                           std::optional<std::string>* problem, Access access) {
  auto t0 = std::chrono::steady_clock::now();
  try {
    std::optional<StoredEntry> e = read_entry(layout, r.key);
    if (!e) return false;
    // Implied by the key; checked again so a collision or a bug can never load foreign code.
    if (e->manifest.platform != parts.platform) {
      throw fs::Problem(fmt::format("built for platform '{}', this process runs '{}'",
                                    e->manifest.platform, parts.platform));
    }
    if (e->manifest.bundle_hash != parts.bundle.hash()) {
      // read_entry already proved bundle_json parses and hashes to bundle_hash.
      policy::Bundle theirs = policy::Bundle::from_json(e->manifest.bundle_json, "manifest");
      throw fs::Problem(fmt::format("built by bundle {}, this process runs bundle {} ({})",
                                    e->manifest.bundle_hash, parts.bundle.hash(),
                                    fmt::join(theirs.differences(parts.bundle), "; ")));
    }
    if (config.signatures != Signatures::off) {
      if (std::optional<std::string> why = trust_problem(*e, trusted)) {
        if (config.signatures == Signatures::refuse) {
          throw Error(fmt::format(
              "{}; refused, never loaded (compile_cache.signatures = refuse): sign it (keel cache "
              "sign --key FILE), trust its signer (compile_cache.trusted_keys), or remove it",
              entry_problem_text(r.key, parts.function, *why)));
        }
        throw fs::Problem(*why);  // reported, and compiled here instead
      }
    }
    std::unique_ptr<backend::Executable> exe;
    try {
      exe = client->load(e->bytes);
    } catch (const Error& err) {
      throw fs::Problem(
          fmt::format("the {} backend refused to load it: {}", parts.platform, err.what()));
    }
    if (!exe) throw fs::Problem("the backend loaded it as nothing");
    r.executable = std::shared_ptr<backend::Executable>(std::move(exe));
    r.tier = Tier::disk;
    r.seconds = seconds_since(t0);
    r.stored = true;
    // LRU: never touch .bin/.json
    if (writes() && access == Access::elect) fs::touch(layout.file(r.key, kUsedExt));
    remember(r.key, r.executable, true);
    return true;
  } catch (const fs::Problem& p) {
    // An entry evicted while we read it is simply gone, not bad.
    if (!fs::lstat_path(layout.file(r.key, kManifestExt))) return false;
    *problem = p.what();
    return false;
  }
}

void ExecutableCache::Impl::compile_into(
    const KeyParts& parts, const std::function<std::unique_ptr<backend::Executable>()>& compile,
    Lookup& r) {
  if (forbid) {
    throw Error(
        fmt::format("[cache] compile of '{}' (inputs {}) is forbidden "
                    "(compile_cache.forbid_compile): the cache is "
                    "not warm",
                    parts.function, inputs_text(parts, r.key)));
  }
  auto t0 = std::chrono::steady_clock::now();
  std::unique_ptr<backend::Executable> exe = compile();
  if (!exe)
    throw Error(fmt::format("[cache] compiling '{}' produced no executable", parts.function));
  r.seconds = seconds_since(t0);
  r.tier = Tier::compiled;
  r.executable = std::shared_ptr<backend::Executable>(std::move(exe));
  remember(r.key, r.executable, false);
}

void ExecutableCache::Impl::publish(const KeyParts& parts, const Graph& graph, const Lookup& r) {
  Manifest m;
  m.key = r.key;
  m.function = parts.function;
  m.signature = parts.signature;
  m.graph_hash = parts.graph.hex();
  m.bundle_json = parts.bundle.to_json();
  m.bundle_hash = parts.bundle.hash();
  m.codegen = parts.codegen;
  m.platform = parts.platform;
  m.compile_seconds = r.seconds;
  m.host = config.host;
  std::string bytes = r.executable->serialize();
  m.size = static_cast<int64_t>(bytes.size());
  m.checksum = hash_bytes(bytes).hex();
  const std::string graph_text = print_graph(graph, /*with_locations=*/true);
  m.digest = content_digest(bytes);
  m.graph_text_digest = content_digest(graph_text);
  m.created_unix = static_cast<int64_t>(std::time(nullptr));
  m.predicted_peak_bytes = r.executable->predicted_peak_bytes();
  publish_entry(layout, m, bytes, graph_text, config.publish_hook, signer ? &*signer : nullptr);
}

}  // namespace keel::cache
