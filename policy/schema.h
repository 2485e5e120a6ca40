#pragma once
// Every launch-policy key: its group, type, default, allowed values and whether it changes
// generated code (those go into the cache key). The one place a new setting is declared.
#include <cstdint>
#include <optional>
#include <string>
#include <variant>
#include <vector>

namespace keel::policy {

enum class Kind { boolean, integer, string, string_list, integer_list };
std::string kind_name(Kind k);

using Value =
    std::variant<bool, int64_t, std::string, std::vector<std::string>, std::vector<int64_t>>;
std::string value_text(const Value& v);  // TOML spelling: true, 42, "x", ["a", "b"], [1, 2]

struct KeySpec {
  std::string group;
  std::string key;
  Kind kind;
  Value fallback;                    // the value of the `none` profile
  int64_t min = 0, max = INT64_MAX;  // integers and integer-list elements
  std::vector<std::string> allowed;  // strings and string-list elements; empty: any
  std::string doc;
  bool codegen = false;   // changes generated code: part of the cache key
  bool from_file = true;  // false: chosen at launch only (launch.profile)

  std::string name() const { return group + "." + key; }
  std::string env_name() const;      // KEEL_<GROUP>_<KEY>, upper case
  std::string allowed_text() const;  // "an integer in 0..3", "one of off, warn, strict", ...
};

const std::vector<KeySpec>& policy_schema();
std::string group_env_prefix(const std::string& group);  // "KEEL_COMPILE_CACHE_"
const std::vector<std::string>& policy_groups();
const KeySpec* find_key(const std::string& group, const std::string& key);
const KeySpec* find_key(const std::string& dotted);

// Why `v` is not allowed for `spec` ("7 is outside 0..3"), or nullopt when it is.
std::optional<std::string> check_value(const KeySpec& spec, const Value& v);
// Parses the text of --set or an environment variable; lists are comma-separated.
// Returns nullopt when the text does not spell a value of the key's kind.
std::optional<Value> parse_value_text(const KeySpec& spec, const std::string& text);

}  // namespace keel::policy
