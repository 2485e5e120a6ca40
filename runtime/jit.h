#pragma once
/// @file
/// The one JIT owner: turns each traced program into an executable through the cache (memory,
/// disk, or compile), explains why every new program was needed, applies the shape guard and
/// logs the lookup. compile() reaches it through the keel::Jit interface.
#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "backend/backend.h"
#include "cache/cache.h"
#include "diag/compile_log.h"
#include "diag/explain.h"
#include "ir/collective.h"
#include "runtime/shape_guard.h"
#include "trace/jit.h"

/// What keel::Runtime is built from: the process's JIT and the mesh from the launch policy.
namespace keel::runtime {

/// What a runtime::CachedJit is built from; the Runtime fills it from the launch policy.
struct JitConfig {
  std::shared_ptr<backend::Client> client;  ///< the backend that compiles and loads executables
  backend::CompileOptions compile;          ///< how it compiles (passes.*, the backend's keys)
  cache::CacheConfig cache;                 ///< the executable cache (the compile_cache.* keys)
  ShapeGuardConfig guard;                   ///< the shape guard (the shape_guard.* keys)
  std::string run_dir;  ///< compiles.jsonl goes here; empty: events are kept in memory only
  std::string log_name = "compiles.jsonl";  ///< other processes of a launch: one file each
  /// Refuse programs predicted to need more on one host (all its processes together); 0: none.
  int64_t memory_budget_bytes = 0;
  /// What this process may use (files::memory_limit): a warning above it; 0: unknown.
  int64_t memory_limit_bytes = 0;
  std::string memory_limit_source = "MemTotal";  ///< what set it, for that warning
  std::function<void()> before_prepare;  ///< e.g. the Runtime's check that launch settings hold
  std::string mesh = "data=1";           ///< the mesh's axes and sizes: part of every key
};

/// The process's JIT: programs through the executable cache, with explanations, the shape guard
/// and the compile log.
class CachedJit : public keel::Jit {
 public:
  /// Detects the bundle (runs the compiler for its version), opens the cache and the log.
  explicit CachedJit(JitConfig config);

  std::string name() const override;
  std::shared_ptr<Runnable> prepare(const Graph& graph, const ProgramRequest& request) override;
  Buffer to_device(const Array& host) override;
  Buffer allocate(DType dtype, const Shape& shape, bool zeroed) override;
  int64_t program_budget() const override { return config_.guard.max_programs_per_function; }
  void count_call(const std::string& name) override;

  /// Compiles (or finds) `graph`'s executable through the cache without running it: no
  /// agreement with peers, no shape guard, no compile log line (keel cache prewarm).
  cache::Lookup prewarm(const Graph& graph);

  /// The host's step (a training loop's), recorded with each compile; -1 (the default): none,
  /// and the log records the function's own call count instead.
  void set_step(int64_t step) { step_.store(step); }
  /// A new mesh (before any tensor exists): every later key names it.
  void set_mesh(const std::string& mesh);

  diag::CompileLog& log() { return log_; }  ///< every lookup so far
  /// The executable cache it goes through.
  const cache::ExecutableCache& cache() const { return cache_; }
  const policy::Bundle& bundle() const { return bundle_; }  ///< the bundle in every key
  /// The cache key `graph` gets here: graph, signature, bundle, codegen options, platform.
  Hash128 key_for(const Graph& graph) const { return key_parts(graph).key(); }
  /// Predicted peak bytes of the largest executable prepared so far.
  int64_t predicted_peak_bytes() const;
  /// The memory use of the device its programs run on, as its backend reports it.
  backend::MemoryStats memory_stats() const;
  void release_cached_memory();  ///< the client's (backend::Client::release_cached_memory)
  /// What its backend counted (Client::counters).
  std::map<std::string, int64_t> backend_counters() const { return config_.client->counters(); }
  /// When every program dispatched so far has run (Client::after_dispatched).
  Event after_dispatched() const;
  /// An executable's memory, as program_memory() reports it.
  struct ProgramMemory {
    /// Predicted peak bytes.
    int64_t peak_bytes = 0, input_bytes = 0;  ///< bytes of its inputs (part of that peak)
  };
  /// Per function, its newest executable: predicted peak and the bytes of its inputs (part of
  /// that peak), for planners that add what the host holds between programs.
  std::map<std::string, ProgramMemory> program_memory() const;

 private:
  // Each collective's calls and bytes in one run of `graph` as the backend runs it: after the
  // graph passes where the backend lowers and the program exchanges with peers.
  std::map<std::string, CollectiveTraffic> traffic_as_run(const Graph& graph) const;
  // prepare()'s steps, in order, each adding to the Preparation of one program.
  struct Preparation;
  Preparation key(const Graph& graph, const ProgramRequest& request) const;
  void explain(Preparation& p) const;  // why it is new: against the previous program
  void guard(const Preparation& p);    // the shape guard, on this function's counts
  void agree(Preparation& p) const;    // every process is about to run this very program
  void look_up(Preparation& p);        // memory, disk, or compile (one writer per directory)
  std::shared_ptr<Runnable> record(Preparation& p);  // the trace, the log, the program record

  cache::KeyParts key_parts(const Graph& graph) const;
  std::optional<diag::ProgramFacts> previous(const std::string& function,
                                             const std::string& key) const;
  /// Whether `peak` bytes fit where the program runs: the device's capacity (an error), or for
  /// a device whose memory is the host's, the host's budget (an error) and physical memory (a
  /// warning) for `peak` bytes in each of the host's processes.
  // `when`: "before compiling it" (from the compile, once the plan exists) or "before running
  // it" (a program loaded from the cache).
  void check_program_memory(const std::string& function, int64_t peak, const char* when) const;
  // check_program_memory's case of a device whose memory is the host's.
  void check_host_memory(const std::string& function, int64_t peak, const char* when) const;

  JitConfig config_;
  policy::Bundle bundle_;
  std::string codegen_;
  cache::ExecutableCache cache_;
  diag::CompileLog log_;
  ShapeGuard guard_;
  FunctionCounts counts_;
  mutable std::mutex mu_;
  std::map<std::string, diag::ProgramFacts> last_;  ///< newest program per function, this process
  int64_t predicted_peak_ = 0;
  std::map<std::string, ProgramMemory> program_memory_;
  std::atomic<int64_t> step_{-1};
};

}  // namespace keel::runtime
