#pragma once
// The effective launch policy: one value per schema key and where it came from. Resolved from
// defaults, profile files, the environment and --set before the runtime starts; frozen by
// Runtime::init, after which any change is an error.
#include <map>
#include <string>
#include <vector>

#include "policy/schema.h"

namespace keel::policy {

struct Origin {
  enum class Source { fallback, file, environment, command_line };
  Source source = Source::fallback;
  std::string where;  // "profiles/ci.toml:4", "KEEL_CODEGEN_OPT_LEVEL", "--set"; "" for defaults
  std::string text() const;  // "default", "profiles/ci.toml:4", "env KEEL_X", "--set"
};

struct Setting {
  Value value;
  Origin origin;
};

class LaunchPolicy {
 public:
  LaunchPolicy();  // the `none` profile: every key at its default

  // Throws keel::Error when frozen, keel::InputError when the key is unknown or the value is
  // not allowed (the message names `origin`).
  void set(const std::string& dotted, Value value, Origin origin);
  void freeze() { frozen_ = true; }
  bool frozen() const { return frozen_; }

  const Setting& setting(const std::string& dotted) const;  // keel::Error if unknown
  bool boolean(const std::string& dotted) const;
  int64_t integer(const std::string& dotted) const;
  const std::string& string(const std::string& dotted) const;
  const std::vector<std::string>& strings(const std::string& dotted) const;
  const std::vector<int64_t>& integers(const std::string& dotted) const;
  const std::map<std::string, Setting>& settings() const { return settings_; }

  // {"group": {"key": {"value": ..., "origin": "..."}}}, or plain values without origins; text
  // as ir/utf8_escape.h encodes it.
  std::string to_json(bool with_origins = true) const;
  // TOML, one "key = value  # origin" line per setting, grouped.
  std::string to_text() const;

 private:
  std::map<std::string, Setting> settings_;  // "group.key" -> setting
  bool frozen_ = false;
};

}  // namespace keel::policy
