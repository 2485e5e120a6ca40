// Opening the cache and the lookup itself: memory, then disk, then one compile per key per
// directory under the key's lock, published atomically.
#include <fmt/format.h>

#include <chrono>
#include <cstdlib>

#include "cache/entry.h"
#include "cache/impl.h"
#include "cache/lock.h"
#include "cache/maintenance.h"
#include "cache/safe_dir.h"
#include "ir/error.h"

namespace keel::cache {

namespace {

// Lock waits shorter than this are contention noise, not worth a note.
constexpr double kWaitNoteSeconds = 0.05;

std::string root_dir(const CacheConfig& c) {
  if (!c.dir.empty()) return c.dir;
  if (c.mode != Mode::off) return default_cache_dir();
  try {
    return default_cache_dir();
  } catch (const Error&) {
    return "";  // off needs no directory
  }
}

}  // namespace

ExecutableCache::Impl::Impl(CacheConfig c, std::shared_ptr<backend::Client> cl)
    : config(std::move(c)), client(std::move(cl)), layout(root_dir(config)) {
  if (!client) throw Error("[cache] ExecutableCache needs a backend client; got none");
  forbid = config.forbid_compile;
  for (const std::string& id : config.trusted_keys) {
    check_public_key_id(id, "compile_cache.trusted_keys");
    trusted.push_back(id);
  }
  if (!config.signing_key.empty()) {
    signer = SigningKey::read(config.signing_key);
    trusted.push_back(signer->public_id());
  }
  if (config.signatures != Signatures::off && trusted.empty()) {
    throw InputError(
        fmt::format("[cache] compile_cache.signatures = {} but no key is trusted: set "
                    "compile_cache.trusted_keys (keys printed by keel cache keygen) or "
                    "compile_cache.signing_key",
                    signatures_name(config.signatures)));
  }
  if (config.mode == Mode::off) return;
  std::optional<std::string> why;
  try {
    why = prepare_layout(layout, /*create=*/config.mode == Mode::readwrite);
  } catch (const Error& e) {
    if (config.unsafe_dir_is_error) throw;
    why = e.what();
  }
  if (why) {
    if (config.unsafe_dir_is_error) throw InputError(*why);
    warnings.push_back(*why + "; the disk tier is disabled for this run");
    return;
  }
  disk = true;
  // What a crashed writer left behind; in a shared directory a temporary may belong to a live
  // writer on another host, whose lock this host cannot see, so only `keel cache prune` clears.
  if (writes() && config.sharing == Sharing::per_host) remove_leftovers(layout);
}

ExecutableCache::ExecutableCache(CacheConfig config, std::shared_ptr<backend::Client> client)
    : impl_(std::make_shared<Impl>(std::move(config), std::move(client))) {}

bool ExecutableCache::disk_enabled() const {
  return impl_->disk;
}
const std::string& ExecutableCache::dir() const {
  return impl_->layout.versioned;
}
const std::vector<std::string>& ExecutableCache::warnings() const {
  return impl_->warnings;
}
bool ExecutableCache::writes() const {
  return impl_->writes();
}
Sharing ExecutableCache::sharing() const {
  return impl_->config.sharing;
}

Lookup ExecutableCache::get(const KeyParts& parts, const Graph& graph,
                            const std::function<std::unique_ptr<backend::Executable>()>& compile,
                            Access access) {
  Impl& s = *impl_;
  auto t0 = std::chrono::steady_clock::now();
  Lookup r;
  r.key = parts.key().hex();
  auto memory_hit = [&] {
    r.executable = s.find(r.key, &r.stored);
    r.tier = Tier::memory;
    r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    return r.executable != nullptr;
  };
  if (memory_hit()) return r;
  std::shared_ptr<std::mutex> key_mu = s.key_mutex(r.key);
  std::lock_guard in_process(*key_mu);  // threads of this process elect one compiler too
  if (memory_hit()) return r;

  std::optional<std::string> problem;
  if (s.disk && s.load_from_disk(parts, r, &problem, access)) return r;
  if (s.config.mode == Mode::sealed) {
    throw SealedMiss(fmt::format(
        "[cache] sealed cache has no {}entry for '{}' with inputs ({}); the shipped cache does "
        "not cover this run{}",
        problem ? "usable " : "", parts.function, inputs_text(parts, r.key),
        problem ? fmt::format(" ({})", *problem) : ""));
  }

  if (!s.publishes() || access == Access::read) {
    s.compile_into(parts, compile, r);
    r.problem = problem.value_or("");
    if (s.disk && (!s.publishes() || access == Access::read)) {
      // Why this process leaves the directory alone.
      const char* why = !s.writes()      ? "read-only cache"
                        : !s.publishes() ? "no compile_cache.signing_key to sign a new one"
                                         : "its writer is another process";
      const char* who = !s.writes() ? "read-only" : !s.publishes() ? "unsigned" : "reader";
      if (problem) {
        r.notes.push_back(entry_problem_text(r.key, parts.function, *problem) +
                          fmt::format("; not loaded, left in place ({})", why));
      }
      r.notes.push_back(
          fmt::format("[cache] {}: compiled '{}' in memory, not stored", who, parts.function));
    }
    return r;
  }

  {
    auto wait0 = std::chrono::steady_clock::now();
    KeyLock lock = KeyLock::acquire(s.layout.lock(r.key), s.config.lock_timeout_s,
                                    s.config.sharing == Sharing::shared);
    double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - wait0).count();
    // Whoever held the lock may have published the entry: check again before compiling.
    problem.reset();
    if (s.load_from_disk(parts, r, &problem, access)) {
      if (waited >= kWaitNoteSeconds) {
        r.notes.push_back(fmt::format(
            "[cache] waited {:.2f} s while another process compiled '{}' (key {}); loaded its "
            "result",
            waited, parts.function, r.key));
      }
      return r;
    }
    if (waited >= kWaitNoteSeconds) {
      r.notes.push_back(fmt::format(
          "[cache] waited {:.2f} s for the lock of '{}' (key {}); nothing was published "
          "meanwhile (its holder failed or was killed); compiling",
          waited, parts.function, r.key));
    }
    if (problem) {
      std::string where = quarantine_entry(s.layout, r.key);
      r.notes.push_back(entry_problem_text(r.key, parts.function, *problem) +
                        fmt::format("; quarantined to {}; recompiling", where));
    }
    s.compile_into(parts, compile, r);
    try {
      s.publish(parts, graph, r);
      r.stored = true;
      s.remember(r.key, r.executable, true);
    } catch (const Error& e) {
      // The run goes on with the executable in memory; only the next run pays again.
      r.notes.push_back(
          fmt::format("[cache] could not store '{}' (key {}): {}; using it from memory this run",
                      parts.function, r.key, e.what()));
      return r;
    }
  }
  if (s.config.max_bytes > 0) {
    try {
      evict_lru(s.layout, s.config.max_bytes, r.key);
    } catch (const Error& e) {
      r.notes.push_back(fmt::format("[cache] eviction failed: {}", e.what()));
    }
  }
  return r;
}

}  // namespace keel::cache
