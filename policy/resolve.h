#pragma once
/// @file
/// Resolving the launch policy, lowest precedence first:
///   1. defaults (the `none` profile)
///   2. the profile file, after the profiles it `extends` (base first)
///   3. environment variables KEEL_<GROUP>_<KEY>
///   4. --set group.key=value, in command-line order
/// All before the runtime starts; Runtime::init freezes the result.
#include <map>
#include <string>
#include <vector>

#include "policy/launch_policy.h"

namespace keel::policy {

/// What resolve_policy reads besides the defaults.
struct PolicySources {
  std::string profile;  ///< a name looked up in profile_dirs, or a path; empty: env or "none"
  std::vector<std::string> sets;                   ///< "group.key=value"
  std::map<std::string, std::string> environment;  ///< KEEL_* variables (see keel_environment)
  std::vector<std::string> profile_dirs;           ///< empty: default_profile_dirs()
};

/// The KEEL_* variables of this process.
std::map<std::string, std::string> keel_environment();
/// $KEEL_PROFILE_PATH (colon-separated), then those of these that exist: share/keel/profiles
/// beside the running binary's bin/, the install prefix's, the keel source tree's profiles/.
std::vector<std::string> default_profile_dirs();
/// The file a profile name or path refers to; keel::InputError listing what exists when none.
std::string find_profile(const std::string& name_or_path, const std::vector<std::string>& dirs);
/// The names of the profiles in `dirs` (file stems), sorted, plus "none".
std::vector<std::string> list_profiles(const std::vector<std::string>& dirs);

/// The launch policy from `sources`, in the order above. keel::InputError with one line naming
/// file:line (or the variable, or --set), the key and what is allowed, on any bad profile, variable
/// or override.
LaunchPolicy resolve_policy(const PolicySources& sources);
/// Validates one profile file (and what it extends) on top of the defaults.
LaunchPolicy check_profile_file(const std::string& path, const std::vector<std::string>& dirs);

}  // namespace keel::policy
