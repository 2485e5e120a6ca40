#pragma once
/// @file
/// A group of processes and the byte-level collectives keel builds on. The world is MPI's when
/// the process was started by a launcher (mpirun), else one process with no MPI at all.
#include <cstddef>
#include <memory>
#include <string>
#include <vector>

/// Processes and their collectives: communicators (MPI under a launcher) and the device mesh.
namespace keel::dist {

/// A group of processes, ranked 0..size()-1, and the byte-level collectives among them; every
/// process of the group must make the same calls in the same order.
class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;  ///< this process's rank in the group
  virtual int size() const = 0;  ///< how many processes the group has
  /// Gathers `bytes` of `in` from every rank. out: size() blocks of `bytes`, block r from rank r.
  virtual void all_gather(const void* in, void* out, size_t bytes) = 0;
  /// Exchanges blocks between all ranks. in and out: size() blocks of `bytes`; block r of `in` goes
  /// to rank r, block r of `out` came from rank r.
  virtual void all_to_all(const void* in, void* out, size_t bytes) = 0;
  /// `bytes` of `data` from rank `root` to every rank.
  virtual void broadcast(void* data, size_t bytes, int root) = 0;
  virtual void barrier() = 0;  ///< returns once every process of the group has called it
  /// The processes that passed the same color, ranked by key (every process must call it).
  virtual std::unique_ptr<Communicator> split(int color, int key) = 0;
};

/// Where this process sits, as MPI reports it (one process: 0 of 1 on this host).
struct ProcessPlace {
  /// This process's world rank.
  int rank = 0, size = 1;  ///< how many processes the launch has
  /// This process's rank among the processes on its host.
  int local_rank = 0, local_size = 1;  ///< how many processes run on this host
  std::string host;                    ///< this host's name (MPI's processor name under a launcher)
  bool launched = false;               ///< started by an MPI launcher
};

/// True when an MPI launcher started this process (its environment says so).
bool launched_by_mpi();
/// The world communicator, created on first use: MPI's (MPI_Init_thread) under a launcher,
/// else the one-process communicator. MPI is finalized at exit.
Communicator& world();
/// This process's place, read on first use of the world.
const ProcessPlace& process_place();
/// After a failure under a launcher with more than one process: ends every process of the
/// launch now (MPI_Abort with `code`), so no rank waits forever in a collective for this one.
/// Does nothing in one process or when MPI was never started. Waits `grace_s` first.
void end_launch_after_failure(int code, double grace_s = 0);
/// Every process's `mine`, whatever their lengths, by rank (every process must call it).
std::vector<std::string> all_gather_text(Communicator& comm, const std::string& mine);
/// The host of world rank `rank` ("?" when unknown).
std::string host_of_rank(int rank);
/// Seconds this process has spent waiting for its peers in completed collectives so far (every
/// communicator, every thread). A stretch in which it was not running itself (stopped, or
/// starved of a core for over a second) is not waiting.
double collective_wait_seconds();
/// How many processes of the launch run on this one's host (they share its memory).
int processes_on_this_host();
/// A communicator of one process (tests, and the world without a launcher).
std::unique_ptr<Communicator> one_process_communicator();

}  // namespace keel::dist
