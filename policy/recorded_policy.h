#pragma once
/// @file
/// A recorded run's choices of the keys that change generated code, taken into a launch that
/// prepares programs for that run (`keel cache prewarm RUN_DIR`), so its entries serve the run.
#include <string>
#include <vector>

#include "policy/launch_policy.h"

namespace keel::policy {

/// For every key that changes generated code (KeySpec::codegen) which the recorded policy (the
/// "policy" object of a record.json, values with origins) set away from the default and this
/// launch left at its default, takes the recorded value, with origin `source`. Returns
/// "group.key = value" for each key taken. keel::InputError (naming `source` and the key) for
/// a recorded value this build does not allow.
std::vector<std::string> adopt_recorded_codegen(LaunchPolicy& policy,
                                                const std::string& recorded_policy_json,
                                                const std::string& source);

}  // namespace keel::policy
