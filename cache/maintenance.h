#pragma once
// Housekeeping that is safe while other processes use the directory: every writer holds its
// key's lock, so a key whose lock is free has no writer, and its leftovers are garbage.
#include <cstdint>
#include <string>
#include <vector>

#include "cache/layout.h"

namespace keel::cache {

// Removes temporaries and files of keys without a manifest (a writer that died mid-publish),
// for keys whose lock can be taken without waiting. Returns bytes removed.
int64_t remove_leftovers(const Layout& layout);

// Every key that has a manifest file (complete or bad), with its size and last use.
struct Usage {
  std::string key;
  int64_t bytes = 0;
  int64_t last_used_ns = 0;  // mtime of .used, else of .json
};
std::vector<Usage> usage(const Layout& layout);

// Unlinks least-recently-used entries until the tier holds at most max_bytes; skips `keep`
// and entries whose lock is held (being written or checked). Returns bytes freed.
int64_t evict_lru(const Layout& layout, int64_t max_bytes, const std::string& keep);

}  // namespace keel::cache
