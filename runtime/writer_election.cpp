#include "runtime/writer_election.h"

#include <fmt/format.h>

#include "dist/deadline.h"

namespace keel::runtime {

int cache_writer_of(int rank, cache::Sharing sharing, const std::vector<std::string>& hosts) {
  if (sharing == cache::Sharing::shared) return 0;
  for (int r = 0; r < static_cast<int>(hosts.size()); ++r) {
    if (hosts[size_t(r)] == hosts.at(size_t(rank))) return r;
  }
  return rank;
}

cache::Lookup elected_lookup(dist::Communicator& world, cache::ExecutableCache& cache,
                             const cache::KeyParts& parts, const Graph& graph,
                             const std::function<std::unique_ptr<backend::Executable>()>& compile) {
  std::vector<std::string> hosts;
  for (int r = 0; r < world.size(); ++r) hosts.push_back(dist::host_of_rank(r));
  const int me = world.rank();
  const int writer = cache_writer_of(me, cache.sharing(), hosts);
  // A process that stores nothing (mode readonly, sealed, off; an unsafe directory) has nobody
  // to wait for, but still joins the exchange: its peers cannot know that.
  const bool elects = me == writer || !cache.writes();
  cache::Lookup mine;
  if (elects) mine = cache.get(parts, graph, compile, cache::Access::elect);

  // Each writer tells whether its directory now holds the entry; the readers wait for that.
  const uint8_t stored = elects && mine.stored ? 1 : 0;
  std::vector<uint8_t> all(static_cast<size_t>(world.size()));
  {
    dist::ProgramScope program(parts.function, true);
    dist::WaitScope waiting(fmt::format("the exchange after the cache writers' compiles (rank "
                                        "{} on host {} writes this rank's cache)",
                                        writer, hosts[size_t(writer)]),
                            true);
    world.all_gather(&stored, all.data(), 1);
  }
  if (elects) return mine;
  cache::Lookup read = cache.get(parts, graph, compile, cache::Access::read);
  if (read.tier == cache::Tier::compiled) {
    // Stored, yet nothing here: the writer's directory is not the one this host sees.
    const bool unseen = all[size_t(writer)] && read.problem.empty();
    const char* what = !all[size_t(writer)] ? "could not store"
                       : unseen             ? "stored, but this rank finds no entry for"
                                            : "stored an entry this rank could not load for";
    read.notes.push_back(fmt::format(
        "[cache] rank {} (host {}), this rank's cache writer, {} '{}' (key {}); compiled "
        "here{}",
        writer, hosts[size_t(writer)], what, parts.function, read.key,
        unseen ? "; is compile_cache.dir on storage that every host sees?" : ""));
  }
  return read;
}

}  // namespace keel::runtime
