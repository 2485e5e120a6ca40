// The MPI implementation of the communicator, and the process's world.
#include <fmt/format.h>
#include <mpi.h>

#include <climits>
#include <cstdio>
#include <cstdlib>
#include <mutex>

#include "dist/communicator.h"
#include "ir/error.h"

namespace keel::dist {
namespace {

void check(int rc, const char* what) {
  if (rc == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING] = {};
  int len = 0;
  MPI_Error_string(rc, text, &len);
  throw Error(fmt::format("[dist] {} failed: {}", what, text));
}

int byte_count(size_t bytes, const char* what) {
  if (bytes > static_cast<size_t>(INT_MAX)) {
    throw Error(
        fmt::format("[dist] {} of {} bytes per block exceeds MPI's int count; keel "
                    "sends large buffers in segments, so this is a keel bug",
                    what, bytes));
  }
  return static_cast<int>(bytes);
}

class Mpi final : public Communicator {
 public:
  explicit Mpi(MPI_Comm comm, bool owned) : comm_(comm), owned_(owned) {
    MPI_Comm_rank(comm_, &rank_);
    MPI_Comm_size(comm_, &size_);
  }
  ~Mpi() override {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (owned_ && !finalized) MPI_Comm_free(&comm_);
  }
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  void all_gather(const void* in, void* out, size_t bytes) override {
    const int n = byte_count(bytes, "all_gather");
    check(MPI_Allgather(in, n, MPI_BYTE, out, n, MPI_BYTE, comm_), "MPI_Allgather");
  }
  void all_to_all(const void* in, void* out, size_t bytes) override {
    const int n = byte_count(bytes, "all_to_all");
    check(MPI_Alltoall(in, n, MPI_BYTE, out, n, MPI_BYTE, comm_), "MPI_Alltoall");
  }
  void broadcast(void* data, size_t bytes, int root) override {
    check(MPI_Bcast(data, byte_count(bytes, "broadcast"), MPI_BYTE, root, comm_), "MPI_Bcast");
  }
  void barrier() override { check(MPI_Barrier(comm_), "MPI_Barrier"); }
  std::unique_ptr<Communicator> split(int color, int key) override {
    MPI_Comm part = MPI_COMM_NULL;
    check(MPI_Comm_split(comm_, color, key, &part), "MPI_Comm_split");
    return std::make_unique<Mpi>(part, true);
  }

 private:
  MPI_Comm comm_;
  bool owned_;
  int rank_ = 0, size_ = 1;
};

// Owns MPI's lifetime: init on first use, finalize at exit.
struct World {
  std::unique_ptr<Communicator> comm;
  ProcessPlace place;
  World() {
    place.host = this_host_name();
    if (!launched_by_mpi()) {
      comm = one_process_communicator();
      return;
    }
    int provided = 0;
    check(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_SERIALIZED, &provided), "MPI_Init_thread");
    if (provided < MPI_THREAD_SERIALIZED) {
      throw Error(
          "[dist] this MPI grants less than MPI_THREAD_SERIALIZED, which keel needs (programs "
          "may call collectives from any one thread at a time); use Debian's Open MPI");
    }
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    comm = std::make_unique<Mpi>(MPI_COMM_WORLD, false);
    place.launched = true;
    place.rank = comm->rank();
    place.size = comm->size();
    MPI_Comm local = MPI_COMM_NULL;
    check(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, place.rank, MPI_INFO_NULL,
                              &local),
          "MPI_Comm_split_type");
    MPI_Comm_rank(local, &place.local_rank);
    MPI_Comm_size(local, &place.local_size);
    MPI_Comm_free(&local);
    char name[MPI_MAX_PROCESSOR_NAME] = {};
    int len = 0;
    if (MPI_Get_processor_name(name, &len) == MPI_SUCCESS && len > 0) place.host = name;
  }
  ~World() {
    if (!place.launched) return;
    comm.reset();
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (!finalized) MPI_Finalize();
  }
};

bool world_started = false;

World& the_world() {
  static World w;
  world_started = true;
  return w;
}

}  // namespace

bool launched_by_mpi() {
  for (const char* name : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK"}) {
    if (std::getenv(name)) return true;
  }
  return false;
}

Communicator& world() {
  return *the_world().comm;
}

const ProcessPlace& process_place() {
  return the_world().place;
}

void end_launch_after_failure(int code) {
  if (!world_started || !the_world().place.launched || the_world().place.size < 2) return;
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized) return;
  std::fflush(stdout);
  std::fflush(stderr);
  MPI_Abort(MPI_COMM_WORLD, code);
}

}  // namespace keel::dist
