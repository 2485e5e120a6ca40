// Running a loaded program: dispatched to the device's run queue and returning at once (on the
// calling thread when collectives reach other processes); one 64-byte aligned arena shared by
// every program and kept across calls (a concurrent call allocates its own rather than wait),
// outputs from the backend's host block cache, libkeel's kernel table.
#include "backend/cpu/executable.h"

#include <fmt/format.h>

#include <omp.h>

#include <cstring>

#include "backend/collectives.h"
#include "backend/cpu/host_block_cache.h"
#include "backend/cpu/kernels.h"
#include "backend/cpu/run_queue.h"
#include "backend/host_memory.h"
#include "ir/error.h"

namespace keel::cpu {

// From the host's allocator: a large arena is mapped on 2 MB pages, populated up front (the
// first step's writes took ~100 k page faults at ~10 us each for gpt2-s).
std::shared_ptr<HostBlock> CpuExecutable::allocate_arena(int64_t bytes) {
  return allocate_host((static_cast<size_t>(bytes) + 63) / 64 * 64 + 64, false);  // never zero
}

namespace {

struct SharedArena {
  std::mutex mu;
  std::shared_ptr<HostBlock> bytes;
  int64_t size = 0;
};

SharedArena& shared_arena() {
  static SharedArena* arena = new SharedArena;  // never destroyed: programs may run at exit
  return *arena;
}

}  // namespace

int64_t shared_arena_bytes() {
  SharedArena& a = shared_arena();
  std::lock_guard lock(a.mu);
  return a.size;
}

CpuExecutable::CpuExecutable(ExecutableHeader info, std::string so_bytes)
    : info_(std::move(info)),
      so_bytes_(std::move(so_bytes)),
      object_(so_bytes_, info_.graph_name) {}

void CpuExecutable::check_inputs(std::span<const backend::Buffer> args) const {
  if (args.size() != info_.inputs.size()) {
    throw Error(
        fmt::format("[backend.cpu] program '{}' takes {} inputs but {} were given; pass "
                    "one buffer per graph parameter",
                    info_.graph_name, info_.inputs.size(), args.size()));
  }
  for (size_t i = 0; i < args.size(); ++i) {
    backend::host_device_memory(args[i], "cpu");  // refuses another device's buffer
    const TensorType got{args[i].dtype(), args[i].shape()};
    if (got != info_.inputs[i]) {
      throw Error(fmt::format("[backend.cpu] input {} is {} but the program expects {}", i,
                              got.str(), info_.inputs[i].str()));
    }
  }
  // A donated input is overwritten while the program runs: no other input may be its storage.
  for (int32_t a : info_.aliases) {
    if (a < 0 || args[static_cast<size_t>(a)].nbytes() == 0) continue;
    for (size_t j = 0; j < args.size(); ++j) {
      if (j != static_cast<size_t>(a) &&
          args[j].address() == args[static_cast<size_t>(a)].address()) {
        throw Error(
            fmt::format("[backend.cpu] program '{}': input {} is donated (written in "
                        "place) and input {} is the same buffer; pass a copy of one",
                        info_.graph_name, a, j));
      }
    }
  }
}

CpuExecutable::~CpuExecutable() {
  // A queued run calls into the shared object: it must finish before the object unloads (its
  // event completes after its last use of this object).
  if (in_flight_.load() > 0) run_queue().drain();
}

void CpuExecutable::run_now(std::span<const void* const> in, std::span<void* const> out) {
  SharedArena& shared = shared_arena();
  std::unique_lock lock(shared.mu, std::try_to_lock);
  std::shared_ptr<HostBlock> own;
  void* arena = nullptr;
  if (lock.owns_lock()) {
    if (shared.size < info_.arena_bytes || !shared.bytes) {
      shared.bytes.reset();  // free first: old and new never both held
      shared.bytes = allocate_arena(info_.arena_bytes);
      shared.size = info_.arena_bytes;
    }
    arena = shared.bytes->data();
  } else {
    own = allocate_arena(info_.arena_bytes);
    arena = own->data();
  }
#ifdef KEEL_POISON_MEMORY
  // The shared arena holds the previous program's values; NaN them so no program relies on them.
  std::memset(arena, 0xFF, static_cast<size_t>(info_.arena_bytes));
#endif
  const int rc = object_.run()(&kernels(), const_cast<const void**>(in.data()),
                               const_cast<void**>(out.data()), arena);
  if (rc != 0) {
    throw Error(
        fmt::format("[backend.cpu] program '{}' refused to run (code {}): its ABI does not "
                    "match this libkeel's kernel table; recompile it",
                    info_.graph_name, rc));
  }
}

std::vector<backend::Buffer> CpuExecutable::execute(std::span<const backend::Buffer> args) {
  check_inputs(args);
  // What the run waits for, taken before it marks its own writes: each input's last write.
  std::vector<Event> after;
  std::vector<const void*> in;
  for (const backend::Buffer& b : args) {
    after.push_back(b.ready());
    in.push_back(backend::host_device_memory(b, "cpu").array().data());
  }
  std::vector<Array> outputs;
  std::vector<void*> out;
  for (size_t k = 0; k < info_.outputs.size(); ++k) {
    const TensorType& t = info_.outputs[k];
    const int32_t a = info_.aliases.empty() ? -1 : info_.aliases[k];
    // A donated output is written into its input's buffer and returned as that buffer.
    outputs.push_back(a >= 0
                          ? backend::host_device_memory(args[static_cast<size_t>(a)], "cpu").array()
                          : cached_array(t.dtype, t.shape));
    out.push_back(outputs.back().data());
  }
  // With peers, the calling thread owns the communicators a collective uses: run here, in order.
  const bool here = backend::collectives().reaches_other_processes() || run_queue().on_worker();
  const Event done = here ? Event() : Event::pending();
  if (here) {
    if (!run_queue().on_worker()) run_queue().drain();
    for (const Event& e : after) e.wait();
    run_now(in, out);
  } else {
    std::vector<backend::Buffer> held(args.begin(), args.end());  // alive until the run ends
    ++in_flight_;
    run_queue().dispatch(
        [this, done, after = std::move(after), in = std::move(in), out = std::move(out),
         held = std::move(held), outputs, team = omp_get_max_threads()]() mutable {
          std::exception_ptr failure;
          try {
            for (const Event& e : after) e.wait();  // a failed input fails the run with its error
            if (omp_get_max_threads() != team) omp_set_num_threads(team);  // the caller's team size
            run_now(in, out);
          } catch (...) {
            failure = std::current_exception();
          }
          // Once its event is done the queue holds none of the run's memory: a caller that waited
          // and dropped its handles gets the blocks back.
          held.clear();
          outputs.clear();
          --in_flight_;
          done.complete(failure);
        },
        done);
  }
  const backend::Device cpu = backend::host_device();
  std::vector<backend::Buffer> result;
  for (size_t k = 0; k < outputs.size(); ++k) {
    const int32_t a = info_.aliases.empty() ? -1 : info_.aliases[k];
    if (a >= 0) {
      const backend::Buffer& donated = args[static_cast<size_t>(a)];
      donated.written(done);
      result.push_back(donated);
    } else {
      result.push_back(backend::adopt_host_array(std::move(outputs[k]), cpu, done));
    }
  }
  std::vector<bool> donated(args.size(), false);
  for (int32_t a : info_.aliases) {
    if (a >= 0) donated[static_cast<size_t>(a)] = true;
  }
  for (size_t i = 0; i < args.size(); ++i) {
    if (!donated[i]) args[i].read_by(done);
  }
  return result;
}

}  // namespace keel::cpu
