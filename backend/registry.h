#pragma once
/// @file
/// The backends keel can run on, by name (`launch.backend`). Each one says how its client is
/// made from the launch policy, what it adds to the compatibility bundle when no client can be
/// made, how its own thread pools are sized, and which installation checks `keel probe` runs,
/// so the rooms above name no backend: a new backend is added by registering it.
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "policy/bundle.h"
#include "policy/features.h"
#include "policy/launch_policy.h"

namespace keel::backend {

enum class CheckStatus { pass, fail, skip };

/// One installation check of a backend: what was found, or why it failed and the next step.
struct Check {
  std::string name;
  CheckStatus status = CheckStatus::skip;
  std::string detail;
  std::string next;  ///< empty when it passed
};

/// A backend's share of the compatibility bundle.
struct BundlePart {
  std::map<std::string, std::string> fields;  ///< the CPU backend: its BLAS
  Toolchain toolchain;                        ///< what builds its programs
};

/// What the runtime needs of a backend beyond its Client.
struct BackendSpec {
  std::string name;     ///< launch.backend's value: "cpu", "ref"
  std::string summary;  ///< one line for keel probe and keel features
  /// The lowering passes its compile runs, in order, by the rules of its passes::Target;
  /// empty: it runs the traced graph as it is.
  std::vector<std::string> passes;
  /// Its part of a launch's compile options, from its policy group (the CPU's: cpu::Settings
  /// and the matmul precision); may be empty.
  std::function<void(const policy::LaunchPolicy&, CompileOptions&)> configure_compile;
  /// A client for this launch; throws keel::Error naming what is missing and what to do.
  std::function<std::shared_ptr<Client>(const policy::LaunchPolicy&)> make_client;
  /// What the backend adds to the compatibility bundle for `options`, without throwing: a
  /// library that cannot be loaded is reported as such, so `keel bundle` still prints (and
  /// `keel probe` says what to do). The same as a client's bundle_fields and toolchain.
  std::function<BundlePart(const policy::LaunchPolicy&, const CompileOptions&)> bundle_part;
  /// Sizes the backend's own thread pools (BLAS) to the runtime's choice; may be empty.
  std::function<void(int threads)> set_threads;
  /// Installed, before anything is compiled: libraries, toolchains, devices.
  std::function<std::vector<Check>(const policy::LaunchPolicy&)> installation_checks;
  /// Its optional features (`keel features`, features.request), judged from a launch's bundle
  /// whichever backend it chose; may be empty.
  std::function<std::vector<policy::Feature>(const policy::Bundle&)> features;
  /// Refuses a launch its own keys ask for and this host or backend choice cannot give
  /// (keel::InputError naming the key, its origin and the fix); run for every registered
  /// backend, whichever the launch chose; may be empty.
  std::function<void(const policy::LaunchPolicy&, const policy::Bundle&)> check_launch;
  /// Why this machine cannot run the programs of launch `p` (one line: "no CUDA device: ..."),
  /// or empty; suites that run every backend skip it with this line. Unset: it runs wherever
  /// keel builds.
  std::function<std::string(const policy::LaunchPolicy& p)> unavailable_here;
  /// Ops its programs cannot hold yet (the CUDA backend's scans); the conformance suite leaves
  /// out the cases whose programs (or gradients) hold one, naming each.
  std::set<std::string> ops_without_kernels;
  /// What to try when its compiled code disagrees with the reference ("cpu.opt_level = 0").
  std::string miscompile_workaround;
};

/// Registers `spec`; a second backend of the same name is an error.
void register_backend(BackendSpec spec);
/// The registered backend `name`; throws keel::InputError naming the registered ones.
const BackendSpec& find_backend(const std::string& name);
/// Every registered backend's name, in the order they were registered.
std::vector<std::string> backend_names();

}  // namespace keel::backend
