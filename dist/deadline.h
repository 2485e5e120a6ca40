#pragma once
// Every wait on another process has a deadline (Open MPI 4.1 has no fault tolerance: a stopped
// rank blocks its peers forever). What a thread is waiting in is kept here, so the error a
// missed deadline raises names the program, the collective and the ranks that did not arrive.
#include <cstdint>
#include <string>
#include <vector>

#include "ir/error.h"

namespace keel::dist {

// Seconds a collective may wait for its peers: `timeout_s`, or `first_run_timeout_s` in a
// program's first run (its peers may still be compiling it). Launch policy keys
// spmd.collective_timeout_s and spmd.first_run_timeout_s.
struct WaitLimits {
  double timeout_s = 60;
  double first_run_timeout_s = 900;
};
void set_wait_limits(WaitLimits limits);
WaitLimits wait_limits();

// While alive, this thread runs `program` (its first run or a later one): waits use that
// program's deadline and their errors name it.
class ProgramScope {
 public:
  ProgramScope(std::string program, bool first_run);
  ~ProgramScope();
  ProgramScope(const ProgramScope&) = delete;
  ProgramScope& operator=(const ProgramScope&) = delete;

 private:
  std::string saved_program_;
  bool saved_first_ = false;
};

// While alive, this thread's waits are for `what` (e.g. "all_reduce over 'data'"). `long_wait`:
// they take first_run_timeout_s (waiting out another process's long work: the leader's
// checkpoint or sampling, a compile); a scope inside a long one stays long. `what` is the same
// text on every process at the same point unless `differs_by_process` (it names this process's
// own rank or host): then collectives made in it (or in scopes inside it) are not compared by
// their context.
class WaitScope {
 public:
  explicit WaitScope(std::string what, bool long_wait = false, bool differs_by_process = false);
  ~WaitScope();
  WaitScope(const WaitScope&) = delete;
  WaitScope& operator=(const WaitScope&) = delete;

 private:
  std::string saved_;
  std::string saved_chain_;
  bool saved_long_ = false;
  bool saved_differs_ = false;
};

// The deadline of a wait starting now on this thread, in seconds.
double current_timeout_s();
// "all_reduce over 'data' in the first run of program 'train_step'".
std::string wait_context();
// Every open WaitScope's text, outermost first, and the program: "the evaluation's gather >
// all_gather over 'data'" (where a collective was made, for out-of-step messages).
std::string wait_path();
// A hash of every open WaitScope's text and the program, equal on processes at the same point
// of the same path, so two collectives of one kind and size made from different places are told
// apart; 0 inside a scope whose text differs by process, or inside one nested in it.
uint64_t wait_site();

// A failure that the other processes of the launch meet at about the same time (each raises
// its own): the CLI reports it and gives them a moment to report theirs before ending the
// launch (end_launch_after_failure).
class LaunchFailure : public Error {
 public:
  using Error::Error;
};
// Marks that this process's failure was sent to every peer, which now fail with it too (a cache
// writer that could not prepare a program): the CLI gives them a moment to report it.
void mark_failure_shared();
bool failure_shared();

// A peer did not arrive within the deadline.
class PeerTimeout : public LaunchFailure {
 public:
  using LaunchFailure::LaunchFailure;
};

// Two processes of a communicator are in different collectives (kind, size or root) at the same
// point of their sequences: they took different paths.
class CollectivesOutOfStep : public LaunchFailure {
 public:
  using LaunchFailure::LaunchFailure;
};

// The message of a missed deadline: who waited (rank, host), for whom, in what, for how long.
std::string missing_peers_message(int rank, const std::string& host,
                                  const std::vector<int>& missing,
                                  const std::vector<std::string>& hosts, double waited_s);

}  // namespace keel::dist
