#pragma once
// One compile per key per cache directory across the launch, by election instead of by file
// lock: a lock is not assumed to be visible across hosts, and processes that queue on it look
// like "startup is slow". For a program every process prepares (agreed on before), the writer
// of each directory looks it up, compiles and publishes it; the others wait for it (the
// first-run deadline, naming it if it does not arrive) and then only read the directory.
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "cache/cache.h"
#include "dist/communicator.h"

namespace keel::runtime {

// The rank that writes the cache for `rank`: rank 0 of the launch for a shared directory, the
// lowest rank on the same host for per-host ones. `hosts`: every rank's host, by rank.
int cache_writer_of(int rank, cache::Sharing sharing, const std::vector<std::string>& hosts);

// The lookup of a program every process of `world` is preparing now (all must call it). The
// writer uses Access::elect; the others learn whether it stored the entry, then use
// Access::read (a reader whose writer could not store it compiles in memory and says so). A
// process whose cache stores nothing looks up on its own at once.
cache::Lookup elected_lookup(dist::Communicator& world, cache::ExecutableCache& cache,
                             const cache::KeyParts& parts, const Graph& graph,
                             const std::function<std::unique_ptr<backend::Executable>()>& compile);

}  // namespace keel::runtime
