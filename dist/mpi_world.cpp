// The MPI implementation of the communicator, and the process's world.
#include <fmt/format.h>
#include <mpi.h>

#include <sched.h>
#include <signal.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <climits>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "dist/communicator.h"
#include "dist/deadline.h"
#include "files/host.h"
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

// Nanoseconds this process has waited in completed collectives (collective_wait_seconds).
std::atomic<int64_t> waited_ns{0};

// Host names by world rank, for the messages of missed deadlines.
std::vector<std::string>& world_hosts() {
  static std::vector<std::string> hosts;
  return hosts;
}

enum Tag : int {
  kHeader = 100,
  kAllGather = 101,
  kAllToAll = 102,
  kBroadcast = 103,
  kBarrier = 104
};

// What a process says of each collective before its data: the k-th header from a peer is that
// peer's k-th collective on the communicator, so processes that took different paths are told
// apart at once (kind, size, root, where it was made) instead of exchanging mismatched bytes or
// waiting out the deadline. `what` is its wait context, for the message.
struct Header {
  uint64_t seq = 0;
  uint64_t bytes = 0;
  uint64_t site = 0;  // wait_site(): where the collective was made, 0 when not comparable
  int32_t kind = 0;
  int32_t root = -1;
  char what[112] = {};
};

std::string describe(const Header& h) {
  const std::string what(h.what, strnlen(h.what, sizeof h.what));
  switch (h.kind) {
    case kAllGather:
      return fmt::format("all_gather of {} bytes per process ({})", h.bytes, what);
    case kAllToAll:
      return fmt::format("all_to_all of {} bytes per block ({})", h.bytes, what);
    case kBroadcast:
      return fmt::format("broadcast of {} bytes from rank {} ({})", h.bytes, h.root, what);
    case kBarrier:
      return fmt::format("barrier ({})", what);
  }
  return fmt::format("an unknown collective {} ({})", h.kind, what);
}

// Collectives as point-to-point messages to and from every peer, polled against a deadline:
// a peer that never sends is named, instead of blocking the caller forever (MPI's own
// collectives cannot be abandoned). Direct exchange means every process hears from every other,
// so a waiting process names the peers it did not hear from: the one that stopped, and any
// that are themselves still waiting for it in an earlier exchange.
class Mpi final : public Communicator {
 public:
  explicit Mpi(MPI_Comm comm, bool owned) : comm_(comm), owned_(owned) {
    MPI_Comm_rank(comm_, &rank_);
    MPI_Comm_size(comm_, &size_);
    MPI_Group mine = MPI_GROUP_NULL, all = MPI_GROUP_NULL;
    MPI_Comm_group(comm_, &mine);
    MPI_Comm_group(MPI_COMM_WORLD, &all);
    std::vector<int> local(static_cast<size_t>(size_));
    for (int r = 0; r < size_; ++r) local[size_t(r)] = r;
    world_rank_.resize(local.size());
    MPI_Group_translate_ranks(mine, size_, local.data(), all, world_rank_.data());
    MPI_Group_free(&mine);
    MPI_Group_free(&all);
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
    auto* o = static_cast<std::byte*>(out);
    Exchange x = start(kAllGather, bytes);
    for (int p = 0; p < size_; ++p) {
      if (p == rank_) continue;
      x.recv_later(o + size_t(p) * bytes, n, p, kAllGather);
      x.send(in, n, p, kAllGather, comm_);
    }
    std::memmove(o + size_t(rank_) * bytes, in, bytes);
    wait(x);
  }
  void all_to_all(const void* in, void* out, size_t bytes) override {
    const int n = byte_count(bytes, "all_to_all");
    const auto* i = static_cast<const std::byte*>(in);
    auto* o = static_cast<std::byte*>(out);
    Exchange x = start(kAllToAll, bytes);
    for (int p = 0; p < size_; ++p) {
      if (p == rank_) continue;
      x.recv_later(o + size_t(p) * bytes, n, p, kAllToAll);
      x.send(i + size_t(p) * bytes, n, p, kAllToAll, comm_);
    }
    std::memcpy(o + size_t(rank_) * bytes, i + size_t(rank_) * bytes, bytes);
    wait(x);
  }
  void broadcast(void* data, size_t bytes, int root) override {
    const int n = byte_count(bytes, "broadcast");
    Exchange x = start(kBroadcast, bytes, root);
    if (rank_ == root) {
      for (int p = 0; p < size_; ++p) {
        if (p != root) x.send(data, n, p, kBroadcast, comm_);
      }
    } else {
      x.recv_later(data, n, root, kBroadcast);
    }
    wait(x);
  }
  void barrier() override {
    std::vector<char> out(static_cast<size_t>(size_));
    const char in = 0;
    Exchange x = start(kBarrier, 0);
    for (int p = 0; p < size_; ++p) {
      if (p == rank_) continue;
      x.recv_later(&out[size_t(p)], 1, p, kBarrier);
      x.send(&in, 1, p, kBarrier, comm_);
    }
    wait(x);
  }
  std::unique_ptr<Communicator> split(int color, int key) override {
    MPI_Comm part = MPI_COMM_NULL;
    check(MPI_Comm_split(comm_, color, key, &part), "MPI_Comm_split");
    return std::make_unique<Mpi>(part, true);
  }

 private:
  // Outstanding requests, each with the peer it waits for (receives) or serves (sends); the
  // first `headers` are the receives of the peers' headers (storage[1..]). The data's receives
  // wait in `later` until every header has come and matched, so data of another collective never
  // lands in the caller's buffer.
  struct Exchange {
    struct Receive {
      void* buf;
      int n, peer, tag;
    };
    std::vector<MPI_Request> req;
    std::vector<int> peer;
    std::vector<char> is_recv;
    // Heap storage, so a failed exchange can leave it to the sends MPI may still read.
    std::unique_ptr<Header[]> storage;
    size_t headers = 0;
    std::vector<Receive> later;
    MPI_Comm comm = MPI_COMM_NULL;
    void recv(void* buf, int n, int p, int tag, MPI_Comm c) {
      req.emplace_back();
      check(MPI_Irecv(buf, n, MPI_BYTE, p, tag, c, &req.back()), "MPI_Irecv");
      peer.push_back(p);
      is_recv.push_back(1);
    }
    void recv_later(void* buf, int n, int p, int tag) { later.push_back({buf, n, p, tag}); }
    void post_later() {
      for (const Receive& r : later) recv(r.buf, r.n, r.peer, r.tag, comm);
      later.clear();
    }
    void send(const void* buf, int n, int p, int tag, MPI_Comm c) {
      req.emplace_back();
      check(MPI_Isend(buf, n, MPI_BYTE, p, tag, c, &req.back()), "MPI_Isend");
      peer.push_back(p);
      is_recv.push_back(0);
    }
  };

  // Posts this collective's header to every peer it exchanges with (a broadcast's root: every
  // other rank; the others: the root) and a receive for each of theirs: storage[0] is this
  // process's, storage[1 + i] the i-th peer's (receives first).
  Exchange start(Tag kind, size_t bytes, int root = -1) {
    Exchange x;
    x.comm = comm_;
    Header mine;
    mine.seq = ++seq_;
    mine.bytes = bytes;
    mine.kind = kind;
    mine.root = root;
    mine.site = wait_site();
    wait_path().copy(mine.what, sizeof mine.what - 1);
    std::vector<int> peers;
    for (int p = 0; p < size_; ++p) {
      if (p != rank_ && (root < 0 || rank_ == root || p == root)) peers.push_back(p);
    }
    x.storage = std::make_unique<Header[]>(1 + peers.size());
    x.storage[0] = mine;
    for (size_t i = 0; i < peers.size(); ++i) {
      x.recv(&x.storage[1 + i], sizeof(Header), peers[i], kHeader, comm_);
    }
    x.headers = peers.size();
    for (int p : peers) x.send(&x.storage[0], sizeof(Header), p, kHeader, comm_);
    return x;
  }

  // A peer's header that differs from this process's: the two took different paths.
  [[noreturn]] void fail_out_of_step(Exchange& x, size_t i) {
    const Header& mine = x.storage[0];
    const Header& theirs = x.storage[1 + i];
    const int me = world_rank_[size_t(rank_)], peer = world_rank_[size_t(x.peer[i])];
    const std::vector<std::string>& hosts = world_hosts();
    auto host = [&](int r) {
      return static_cast<size_t>(r) < hosts.size() ? hosts[size_t(r)] : files::host_name();
    };
    abandon(x);
    throw CollectivesOutOfStep(fmt::format(
        "[dist] rank {} (host {}) and rank {} (host {}) are out of step at collective #{} of "
        "their communicator: rank {} is in {}; rank {} is in {}{}. Every process must make "
        "the same collectives in the same order, so the launch ends here; look for a branch "
        "that depends on the rank in the calling code, else it is a keel bug: report it with "
        "both ranks' lines",
        me, host(me), peer, host(peer), mine.seq, me, describe(mine), peer, describe(theirs),
        theirs.seq == mine.seq ? "" : fmt::format(" (its #{})", theirs.seq)));
  }

  // After a failure: cancels the receives and leaves the headers to the sends still pending.
  static void abandon(Exchange& x) {
    for (size_t i = 0; i < x.req.size(); ++i) {
      if (x.req[i] != MPI_REQUEST_NULL && x.is_recv[i]) MPI_Cancel(&x.req[i]);
    }
    static std::mutex lock;
    static std::vector<std::unique_ptr<Header[]>> pending;
    std::lock_guard<std::mutex> hold(lock);
    pending.push_back(std::move(x.storage));
  }

  // Polls until every request completes: the peers' headers first (each checked against this
  // process's as it comes), then the data, whose receives are posted only then. Past the deadline,
  // names the peers still missing (those whose messages did not come; else those that did not take
  // ours) and throws.
  void wait(Exchange& x) {
    using Clock = std::chrono::steady_clock;
    const double timeout = current_timeout_s();
    auto start = Clock::now(), last = start, progress = start;
    for (int64_t polls = 0;; ++polls) {
      bool done = true, headers_in = true;
      bool moved = false;  // a request completed (MPI_Test then nulls it) or data was posted
      for (size_t i = 0; i < x.req.size(); ++i) {
        MPI_Request& r = x.req[i];
        if (r == MPI_REQUEST_NULL) continue;
        int flag = 0;
        check(MPI_Test(&r, &flag, MPI_STATUS_IGNORE), "MPI_Test");
        if (flag && i < x.headers) {
          const Header &mine = x.storage[0], &theirs = x.storage[1 + i];
          if (theirs.seq != mine.seq || theirs.kind != mine.kind || theirs.bytes != mine.bytes ||
              theirs.root != mine.root ||
              (mine.site != 0 && theirs.site != 0 && theirs.site != mine.site)) {
            fail_out_of_step(x, i);
          }
        }
        done = done && flag;
        moved = moved || flag;
        if (i < x.headers) headers_in = headers_in && flag;
      }
      // Every header came and matched: now the data (sends may wait for these receives).
      if (headers_in && !x.later.empty()) {
        x.post_later();
        done = false;
        moved = true;
      }
      // A gap between two polls means this process itself was not running (stopped, or
      // starved of a core): that time is not the peers' to answer for, nor waiting.
      const auto now = Clock::now();
      if (now - last > std::chrono::seconds(1)) start += now - last;
      last = now;
      if (moved) progress = now;
      if (done) {
        waited_ns.fetch_add(
            std::chrono::duration_cast<std::chrono::nanoseconds>(now - start).count());
        return;
      }
      const double waited = std::chrono::duration<double>(now - start).count();
      if (waited > timeout) fail_waiting(x, waited);
      // Spin briefly (a collective's peers usually arrive together), then give the core away:
      // processes may outnumber cores. A sleep adds at most a twentieth of the time since the
      // last request completed (up to 5 ms): peers waiting on a long compile leave its core
      // alone, and a transfer that is moving is polled as before.
      const double idle = std::chrono::duration<double>(now - progress).count();
      if (polls > 256) {
        if (idle < 0.01) {
          sched_yield();
        } else {
          std::this_thread::sleep_for(std::chrono::duration<double>(std::min(idle / 20, 5e-3)));
        }
      }
    }
  }

  [[noreturn]] void fail_waiting(Exchange& x, double waited) {
    std::vector<int> missing;
    for (size_t i = 0; i < x.headers; ++i) {  // peers not yet in this collective at all
      if (x.req[i] != MPI_REQUEST_NULL) missing.push_back(world_rank_[size_t(x.peer[i])]);
    }
    for (bool recvs : {true, false}) {
      if (!missing.empty()) break;
      for (size_t i = 0; i < x.req.size(); ++i) {
        if (x.req[i] != MPI_REQUEST_NULL && bool(x.is_recv[i]) == recvs) {
          missing.push_back(world_rank_[size_t(x.peer[i])]);
        }
      }
    }
    abandon(x);
    std::sort(missing.begin(), missing.end());
    missing.erase(std::unique(missing.begin(), missing.end()), missing.end());
    const int me = world_rank_[size_t(rank_)];
    const std::vector<std::string>& hosts = world_hosts();
    throw PeerTimeout(missing_peers_message(
        me, static_cast<size_t>(me) < hosts.size() ? hosts[size_t(me)] : files::host_name(),
        missing, hosts, waited));
  }

  MPI_Comm comm_;
  bool owned_;
  int rank_ = 0, size_ = 1;
  uint64_t seq_ = 0;             // collectives started on this communicator
  std::vector<int> world_rank_;  // by rank in this communicator
};

// Owns MPI's lifetime: init on first use, finalize at exit.
struct World {
  std::unique_ptr<Communicator> comm;
  ProcessPlace place;
  World() {
    place.host = files::host_name();
    if (!launched_by_mpi()) {
      comm = one_process_communicator();
      return;
    }
    // Open MPI's TCP transport writes to peers' sockets: a peer killed mid-run must not kill this
    // process by SIGPIPE before the launcher names the dead rank; the write fails instead.
    struct sigaction pipe = {};
    if (sigaction(SIGPIPE, nullptr, &pipe) == 0 && pipe.sa_handler == SIG_DFL) {
      pipe.sa_handler = SIG_IGN;
      sigaction(SIGPIPE, &pipe, nullptr);
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
    // Every rank's host, for naming a peer that misses a deadline (the launcher started them all,
    // so this first exchange uses MPI's own collective).
    std::vector<char> all(static_cast<size_t>(place.size) * MPI_MAX_PROCESSOR_NAME);
    std::memset(name, 0, sizeof name);
    place.host.copy(name, MPI_MAX_PROCESSOR_NAME - 1);
    check(MPI_Allgather(name, MPI_MAX_PROCESSOR_NAME, MPI_CHAR, all.data(), MPI_MAX_PROCESSOR_NAME,
                        MPI_CHAR, MPI_COMM_WORLD),
          "MPI_Allgather");
    for (int r = 0; r < place.size; ++r) {
      world_hosts().emplace_back(all.data() + size_t(r) * MPI_MAX_PROCESSOR_NAME);
    }
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

std::string host_of_rank(int rank) {
  const World& w = the_world();
  if (!w.place.launched) return rank == 0 ? w.place.host : "?";
  const std::vector<std::string>& hosts = world_hosts();
  return rank >= 0 && static_cast<size_t>(rank) < hosts.size() ? hosts[size_t(rank)] : "?";
}

double collective_wait_seconds() {
  return static_cast<double>(waited_ns.load()) * 1e-9;
}

int processes_on_this_host() {
  const World& w = the_world();
  int n = 0;
  for (int r = 0; r < w.place.size; ++r) n += host_of_rank(r) == w.place.host;
  return std::max(n, 1);
}

const ProcessPlace& process_place() {
  return the_world().place;
}

void end_launch_after_failure(int code, double grace_s) {
  if (!world_started || !the_world().place.launched || the_world().place.size < 2) return;
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized) return;
  std::fflush(stdout);
  std::fflush(stderr);
  if (grace_s > 0) std::this_thread::sleep_for(std::chrono::duration<double>(grace_s));
  MPI_Abort(MPI_COMM_WORLD, code);
}

}  // namespace keel::dist
