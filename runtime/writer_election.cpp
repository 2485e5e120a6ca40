#include "runtime/writer_election.h"

#include <fmt/format.h>

#include <exception>

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
  // A writer that cannot prepare the program (its compile failed, the memory budget refused it)
  // still joins the exchange, so its readers stop with its reason instead of waiting for it.
  std::exception_ptr failed;
  std::string why;
  if (elects) {
    try {
      mine = cache.get(parts, graph, compile, cache::Access::elect);
    } catch (const std::exception& e) {
      failed = std::current_exception();
      why = e.what();
    }
  }

  // Each writer tells whether its directory now holds the entry (1), or that it failed (2); the
  // readers wait for that.
  const uint8_t status = failed ? 2 : elects && mine.stored ? 1 : 0;
  std::vector<uint8_t> all(static_cast<size_t>(world.size()));
  std::vector<std::string> whys;
  int failing = -1;  // this rank's writer if it failed, else the first rank that did
  {
    dist::ProgramScope program(parts.function, true);
    dist::WaitScope waiting(fmt::format("the exchange after the cache writers' compiles (rank "
                                        "{} on host {} writes this rank's cache)",
                                        writer, hosts[size_t(writer)]),
                            true, true);
    world.all_gather(&status, all.data(), 1);
    for (int r = 0; r < world.size(); ++r) {
      if (all[size_t(r)] == 2 && (failing < 0 || r == writer)) failing = r;
    }
    if (failing >= 0) whys = dist::all_gather_text(world, why);
  }
  if (failing >= 0) {
    dist::mark_failure_shared();
    if (failed) std::rethrow_exception(failed);
    throw dist::LaunchFailure(fmt::format(
        "[jit] rank {} (host {}) could not prepare program '{}', so this rank stops too: {}",
        failing, hosts[size_t(failing)], parts.function, whys[size_t(failing)]));
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
