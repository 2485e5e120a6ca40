#pragma once
// The registered backends as the CLI lists them: their names, and whether each can run here.
#include <string>
#include <vector>

#include "policy/bundle.h"
#include "policy/features.h"
#include "policy/launch_policy.h"

namespace keel {

// Every backend this build can run on (launch.backend's choices), in registration order.
std::vector<std::string> registered_backend_names();

// One feature per registered backend ("backend.cpu", "backend.ref"): available when its client
// can be made under `policy`, else why not; `keel features` lists them with the others.
std::vector<policy::Feature> backend_features(const policy::LaunchPolicy& policy);

// The optional features of a launch with `bundle`: every registered backend's own, judged from
// it, then the general ones (features.request names them).
std::vector<policy::Feature> feature_table(const policy::Bundle& bundle);

// Runs every registered backend's launch check (BackendSpec::check_launch) on `policy`.
void check_backend_keys(const policy::LaunchPolicy& policy, const policy::Bundle& bundle);

}  // namespace keel
