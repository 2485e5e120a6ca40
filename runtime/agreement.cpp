// Program agreement: keys all-gathered; on a mismatch each process's program (canonical text,
// bundle, codegen fingerprint) all-gathered too, and explained against rank 0's.
#include "runtime/agreement.h"

#include <fmt/format.h>

#include <map>
#include <nlohmann/json.hpp>
#include <vector>

#include "dist/deadline.h"
#include "ir/collective.h"
#include "ir/error.h"
#include "ir/text.h"

namespace keel::runtime {
namespace {

using json = nlohmann::json;

std::string ranks_text(const std::vector<int>& ranks) {
  std::string s = ranks.size() == 1 ? "rank " : "ranks ";
  for (size_t i = 0; i < ranks.size(); ++i) {
    s += fmt::format("{}{} (host {})", i ? ", " : "", ranks[i], dist::host_of_rank(ranks[i]));
  }
  return s;
}

// "; rank 1 (host h) differs from rank 0: <why>" for every group of ranks other than rank 0's,
// each explained against rank 0's program (`programs`: every rank's facts as JSON).
std::string explain_groups(const std::map<std::pair<uint64_t, uint64_t>, std::vector<int>>& groups,
                           const std::vector<std::string>& programs) {
  auto facts_of = [&](int r) {
    const json j = json::parse(programs[size_t(r)]);
    diag::ProgramFacts f =
        diag::facts_from_text(j.at("graph").get<std::string>(), j.at("bundle").get<std::string>(),
                              j.at("codegen").get<std::string>(), fmt::format("rank {}", r));
    f.input_names = j.value("inputs", std::vector<std::string>{});  // names only decorate
    return f;
  };
  const diag::ProgramFacts first = facts_of(0);
  std::string why;
  for (const auto& [vote_of, ranks] : groups) {
    if (ranks.front() == 0) continue;
    const diag::ProgramFacts theirs = facts_of(ranks.front());
    std::string reason = diag::explain_miss(theirs, first);
    if (theirs.graph.name() != first.graph.name()) {
      reason = fmt::format("it prepares program '{}'; {}", theirs.graph.name(), reason);
    }
    why += fmt::format("; {} differ{} from rank 0: {}", ranks_text(ranks),
                       ranks.size() == 1 ? "s" : "", reason);
  }
  return why;
}

}  // namespace

bool agree_on_program(dist::Communicator& world, const Hash128& key,
                      const diag::ProgramFacts& mine) {
  // A program that exchanges nothing cannot block a peer, and some run on some ranks only
  // (the leader's sampling, evaluation shares that leave a rank idle).
  if (world.size() < 2 || !exchanges_with_peers(mine.graph)) return false;
  const std::string& function = mine.graph.name();
  dist::ProgramScope program(function, true);
  // Ranks preparing different programs meet here by design: this exchange explains them.
  dist::WaitScope waiting("the agreement on its key", false, true);
  const uint64_t vote[2] = {key.hi, key.lo};
  std::vector<uint64_t> votes(2 * static_cast<size_t>(world.size()));
  world.all_gather(vote, votes.data(), sizeof vote);
  bool same = true;
  for (size_t r = 0; r < votes.size() / 2; ++r) {
    same = same && votes[2 * r] == key.hi && votes[2 * r + 1] == key.lo;
  }
  if (same) return true;

  // Ranks grouped by key, each group explained against rank 0's program.
  std::map<std::pair<uint64_t, uint64_t>, std::vector<int>> groups;
  for (int r = 0; r < world.size(); ++r) {
    groups[{votes[2 * size_t(r)], votes[2 * size_t(r) + 1]}].push_back(r);
  }
  const json facts = {{"graph", print_graph(mine.graph, true)},
                      {"bundle", mine.bundle.to_json()},
                      {"codegen", mine.codegen},
                      {"inputs", mine.input_names}};
  const std::vector<std::string> all = dist::all_gather_text(world, facts.dump());
  std::string why;
  try {
    why = explain_groups(groups, all);
  } catch (const std::exception& e) {  // a program that does not parse back: the keys still differ
    for (const auto& [vote_of, ranks] : groups) {
      if (ranks.front() != 0) {
        why += fmt::format("; {} traced key {} (the difference could not be explained: {})",
                           ranks_text(ranks),
                           Hash128{vote_of.first, vote_of.second}.hex().substr(0, 12), e.what());
      }
    }
  }
  throw dist::LaunchFailure(fmt::format(
      "[dist] the processes disagree on program '{}' before its first run (rank 0 on host {} "
      "traced key {}){}; every process stops here; launch every rank with the same "
      "arguments, data shapes, profile and build",
      function, dist::host_of_rank(0), Hash128{votes[0], votes[1]}.hex().substr(0, 12), why));
}

}  // namespace keel::runtime
