#pragma once
// A group of processes and the byte-level collectives keel builds on. The world is MPI's when
// the process was started by a launcher (mpirun), else one process with no MPI at all.
#include <cstddef>
#include <memory>
#include <string>
#include <vector>

namespace keel::dist {

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // out: size() blocks of `bytes`, block r from rank r.
  virtual void all_gather(const void* in, void* out, size_t bytes) = 0;
  // in and out: size() blocks of `bytes`; block r of `in` goes to rank r, block r of `out`
  // came from rank r.
  virtual void all_to_all(const void* in, void* out, size_t bytes) = 0;
  virtual void broadcast(void* data, size_t bytes, int root) = 0;
  virtual void barrier() = 0;
  // The processes that passed the same color, ranked by key (every process must call it).
  virtual std::unique_ptr<Communicator> split(int color, int key) = 0;
};

// Where this process sits, as MPI reports it (one process: 0 of 1 on this host).
struct ProcessPlace {
  int rank = 0, size = 1;
  int local_rank = 0, local_size = 1;  // among the processes on this host
  std::string host;
  bool launched = false;  // started by an MPI launcher
};

// True when an MPI launcher started this process (its environment says so).
bool launched_by_mpi();
// The world communicator, created on first use: MPI's (MPI_Init_thread) under a launcher,
// else the one-process communicator. MPI is finalized at exit.
Communicator& world();
const ProcessPlace& process_place();
// After a failure under a launcher with more than one process: ends every process of the
// launch now (MPI_Abort with `code`), so no rank waits forever in a collective for this one.
// Does nothing in one process or when MPI was never started. Waits `grace_s` first.
void end_launch_after_failure(int code, double grace_s = 0);
// Every process's `mine`, whatever their lengths, by rank (every process must call it).
std::vector<std::string> all_gather_text(Communicator& comm, const std::string& mine);
// The host of world rank `rank` ("?" when unknown).
std::string host_of_rank(int rank);
// How many processes of the launch run on this one's host (they share its memory).
int processes_on_this_host();
// A communicator of one process (tests, and the world without a launcher).
std::unique_ptr<Communicator> one_process_communicator();

}  // namespace keel::dist
