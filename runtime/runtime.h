#pragma once
/// @file
/// keel::Runtime: the startup contract. Constructing it resolves nothing and guesses nothing: it
/// takes a resolved LaunchPolicy, freezes it, probes the backend (compiler found, BLAS loaded),
/// opens the executable cache, builds the mesh and makes its JIT the one compile() uses. Phases:
/// uninitialised -> initialised (this constructor) -> running (the first tensor). One per
/// process at a time; destroying it returns to uninitialised.
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "policy/bundle.h"
#include "policy/launch_policy.h"
#include "runtime/jit.h"
#include "runtime/mesh.h"
#include "trace/startup.h"

namespace keel {

/// What a Runtime takes besides the launch policy.
struct RuntimeOptions {
  std::string run_dir;                      ///< compiles.jsonl goes here; empty: kept in memory
  std::shared_ptr<backend::Client> client;  ///< null: the one launch.backend names
};

/// The startup contract: the one live runtime of the process (see the file comment).
class Runtime {
 public:
  /// Starts the runtime (see the file comment). keel::Error when another Runtime is alive or the
  /// backend is not usable (naming what is missing and 'keel probe'); keel::InputError on a bad
  /// mesh or an unavailable feature that features.on_unavailable = "error" forbids.
  explicit Runtime(policy::LaunchPolicy policy, RuntimeOptions options = {},
                   SourceLoc loc = SourceLoc::current());
  ~Runtime();
  Runtime(const Runtime&) = delete;
  Runtime& operator=(const Runtime&) = delete;

  /// The live runtime; keel::Error naming the rule when there is none.
  static Runtime& current(SourceLoc loc = SourceLoc::current());
  static bool active();  ///< whether a Runtime is alive

  /// Initialised, or running once a tensor exists.
  StartupPhase phase() const { return startup_phase(); }
  const policy::LaunchPolicy& policy() const { return policy_; }  ///< the frozen launch policy
  /// Always an error: the policy is frozen at init. Says how to set `assignment` at launch.
  [[noreturn]] void update_policy(const std::string& assignment,
                                  SourceLoc loc = SourceLoc::current());

  const runtime::Mesh& mesh() const { return mesh_; }  ///< the device mesh
  bool spmd() const { return spmd_; }  ///< whether SPMD is on (spmd.enabled or enable_spmd)
  /// This process in the launch, as MPI reports it (rank 0 of 1 without a launcher).
  const dist::ProcessPlace& place() const;
  /// This process's coordinate on mesh axis `axis` (0 when the mesh has no such axis).
  int64_t axis_index(const std::string& axis) const;
  /// Threads each kernel team uses: launch.threads, or the host's cores (CPU quota included)
  /// divided by the processes on this host, within the affinity mask (at least 1);
  /// `oversubscribed` when those processes outnumber cores.
  int threads() const { return threads_; }
  /// Whether this host's processes outnumber its cores.
  bool oversubscribed() const { return oversubscribed_; }
  /// Turns SPMD on over `mesh`. Allowed only before the first tensor exists (keel::Error naming
  /// where it was created).
  void enable_spmd(runtime::Mesh mesh, SourceLoc loc = SourceLoc::current());
  /// Replaces the mesh, SPMD unchanged; as enable_spmd, only before the first tensor exists.
  void set_mesh(runtime::Mesh mesh, SourceLoc loc = SourceLoc::current());

  runtime::CachedJit& jit() { return *jit_; }  ///< the JIT compile() uses
  /// The memory use of the device programs run on, as its backend reports it.
  backend::MemoryStats memory_stats() const { return jit_->memory_stats(); }
  /// Gives the device's cached free buffers back (backend::Client::release_cached_memory).
  void release_cached_memory() const { jit_->release_cached_memory(); }
  /// When every program dispatched so far has run: programs may run after their call returns
  /// (the CPU backend queues them), and a value is read on the host only once its event is done.
  Event after_dispatched() const { return jit_->after_dispatched(); }
  const policy::Bundle& bundle() const { return bundle_; }  ///< the bundle this run compiles under
  /// true when available; otherwise warns and returns false (fall back), or throws
  /// keel::InputError when features.on_unavailable = "error".
  bool use_feature(const std::string& name);
  /// Feature fallbacks taken so far, one line each (also in the run record).
  const std::vector<std::string>& fallbacks() const { return fallbacks_; }

  /// An error when a policy environment variable changed since init (it would be ignored).
  void check_environment() const;
  /// {"policy": {...with origins}, "bundle": {...}, "mesh": "...", "spmd": bool, "fallbacks"}
  std::string record_json() const;

 private:
  void change_mesh(runtime::Mesh mesh, bool spmd, const SourceLoc& loc, const char* what);

  policy::LaunchPolicy policy_;
  policy::Bundle bundle_;
  runtime::Mesh mesh_;
  bool spmd_ = false;
  int threads_ = 1;
  std::string threads_why_;
  bool oversubscribed_ = false;
  std::shared_ptr<runtime::CachedJit> jit_;
  std::map<std::string, std::string> environment_;  ///< policy variables at init
  std::vector<std::string> fallbacks_;
};

/// The bundle a Runtime of `policy` would run under, without starting one: the codegen
/// settings plus what the backend reports (a BLAS that cannot be loaded reads "not loaded").
policy::Bundle launch_bundle(const policy::LaunchPolicy& policy);

}  // namespace keel
