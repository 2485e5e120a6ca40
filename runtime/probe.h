#pragma once
// `keel probe`: "installed" is not "alive". Each check runs the real thing (find and run the
// compiler, compile and run a program and compare it with the reference interpreter, reload it
// from its serialized bytes, load BLAS and time a GEMM, count OpenMP threads, inspect the cache
// directory) and says PASS, FAIL or SKIP with the reason and the next step.
#include <string>
#include <utility>
#include <vector>

#include "policy/launch_policy.h"

namespace keel::runtime {

enum class ProbeStatus { pass, fail, skip };
const char* probe_status_name(ProbeStatus s);  // "PASS" | "FAIL" | "SKIP"

struct ProbeCheck {
  ProbeCheck() = default;
  ProbeCheck(std::string name, ProbeStatus status, std::string detail, std::string next)
      : name(std::move(name)), status(status), detail(std::move(detail)), next(std::move(next)) {}
  std::string name;
  ProbeStatus status = ProbeStatus::skip;
  std::string detail;   // what was found or measured, or why it failed / was skipped
  std::string next;     // the next step when it did not pass; empty when it did
  std::string backend;  // the backend it checks ("cpu", "ref"); empty for the launch as a whole
};

struct ProbeReport {
  std::string launch_backend;                                 // launch.backend
  std::vector<std::pair<std::string, std::string>> backends;  // every registered one: name, summary
  std::vector<ProbeCheck> checks;
  // No check of the launch's backend or of the launch as a whole failed (a skip is not a
  // failure; it always says why). Other registered backends are reported, not required.
  bool ok() const;
  std::string text() const;
  std::string json() const;
};

// Needs no Runtime and creates no tensors: it is what you run before trusting one.
ProbeReport run_probe(const policy::LaunchPolicy& policy);

}  // namespace keel::runtime
