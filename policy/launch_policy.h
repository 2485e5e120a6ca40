#pragma once
/// @file
/// The effective launch policy: one value per schema key and where it came from. Resolved from
/// defaults, profile files, the environment and --set before the runtime starts; frozen by
/// Runtime::init, after which any change is an error.
#include <map>
#include <string>
#include <vector>

#include "policy/schema.h"

/// The launch policy (its schema, profiles and resolution) and the compatibility bundle.
namespace keel::policy {

/// Where a setting's value came from.
struct Origin {
  /// The default, a profile file, a KEEL_* variable, or the command line (--set, --profile).
  enum class Source { fallback, file, environment, command_line };
  Source source = Source::fallback;  ///< which kind of place
  std::string where;  ///< "profiles/ci.toml:4", "KEEL_CPU_OPT_LEVEL", "--set"; "" for defaults
  std::string text() const;  ///< "default", "profiles/ci.toml:4", "env KEEL_X", "--set"
};

/// One key's effective value and its origin.
struct Setting {
  Value value;    ///< of the key's kind
  Origin origin;  ///< where it was set
};

/// Every schema key's effective value and origin ("group.key" names a key).
class LaunchPolicy {
 public:
  LaunchPolicy();  ///< the `none` profile: every key at its default

  /// Sets key `dotted` ("group.key") to `value` from `origin`. Throws keel::Error when frozen,
  /// keel::InputError when the key is unknown or the value is not allowed (the message names
  /// `origin`).
  void set(const std::string& dotted, Value value, Origin origin);
  void freeze() { frozen_ = true; }        ///< from now on, set() is an error
  bool frozen() const { return frozen_; }  ///< whether freeze() was called

  const Setting& setting(const std::string& dotted) const;  ///< keel::Error if unknown
  /// A boolean key's value; keel::Error if unknown or of another kind.
  bool boolean(const std::string& dotted) const;
  /// An integer key's value; keel::Error if unknown or of another kind.
  int64_t integer(const std::string& dotted) const;
  /// A string key's value; keel::Error if unknown or of another kind.
  const std::string& string(const std::string& dotted) const;
  /// A string-list key's value; keel::Error if unknown or of another kind.
  const std::vector<std::string>& strings(const std::string& dotted) const;
  /// An integer-list key's value; keel::Error if unknown or of another kind.
  const std::vector<int64_t>& integers(const std::string& dotted) const;
  /// Every key's setting, by "group.key".
  const std::map<std::string, Setting>& settings() const { return settings_; }

  /// {"group": {"key": {"value": ..., "origin": "..."}}}, or plain values without origins; text
  /// as ir/utf8_escape.h encodes it.
  std::string to_json(bool with_origins = true) const;
  /// TOML, one "key = value  # origin" line per setting, grouped.
  std::string to_text() const;

 private:
  std::map<std::string, Setting> settings_;  ///< "group.key" -> setting
  bool frozen_ = false;
};

}  // namespace keel::policy
