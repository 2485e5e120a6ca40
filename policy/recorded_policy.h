#pragma once
/// @file
/// A recorded run's choices of the keys that change generated code, taken into a launch that
/// prepares programs for that run (`keel cache prewarm RUN_DIR`), so its entries serve the run.
#include <string>
#include <vector>

#include "policy/launch_policy.h"

namespace keel::policy {

/// What adopt_recorded_codegen did: "group.key = value" per key.
struct RecordedChoices {
  std::vector<std::string> taken;
  /// Keys that name a program to run or load (the compiler, its flags, the BLAS library): a
  /// record is data, so these are left to this launch and only reported.
  std::vector<std::string> not_taken;
};

/// For every key that changes generated code (KeySpec::codegen) which the recorded policy (the
/// "policy" object of a record.json, values with origins) set away from the default and this
/// launch left at its default (no profile, KEEL_* variable or --set chose it), takes the
/// recorded value with origin `source`, except the keys in RecordedChoices::not_taken.
/// keel::InputError naming `source` and the key for a recorded entry this build cannot take.
RecordedChoices adopt_recorded_codegen(LaunchPolicy& policy,
                                       const std::string& recorded_policy_json,
                                       const std::string& source);

}  // namespace keel::policy
