#pragma once
/// @file
/// Every launch-policy key: its group, type, default, allowed values and whether it changes
/// generated code (those go into the cache key). Backends register their own groups' keys.
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <variant>
#include <vector>

namespace keel::policy {

/// The type of a key's value (the alternatives of Value, in order).
enum class Kind { boolean, integer, string, string_list, integer_list };
/// "a boolean", "an integer", "a string", "an array of strings", ...
std::string kind_name(Kind k);

/// A setting's value, of its key's Kind.
using Value =
    std::variant<bool, int64_t, std::string, std::vector<std::string>, std::vector<int64_t>>;
/// TOML spelling: true, 42, "x", ["a", "b"], [1, 2]; strings escaped as TOML's basic strings.
std::string value_text(const Value& v);

/// One launch-policy key as the schema declares it.
struct KeySpec {
  std::string group;  ///< "cpu", "compile_cache", ...
  std::string key;    ///< the name within its group
  Kind kind;          ///< the type of its values
  Value fallback;     ///< the value of the `none` profile
  /// Smallest allowed value of integers and integer-list elements.
  int64_t min = 0, max = INT64_MAX;  ///< largest allowed value, likewise
  std::vector<std::string> allowed;  ///< strings and string-list elements; empty: any
  /// Strings and string-list elements must pass this test, which `form` names; null: any.
  bool (*matches)(const std::string&) = nullptr;
  std::string form;       ///< "a public key ed25519:<64 hex digits>", ...
  std::string doc;        ///< one line on what it does, for `keel policy` listings
  bool codegen = false;   ///< changes generated code: part of the cache key
  bool from_file = true;  ///< false: chosen at launch only (launch.profile)

  std::string name() const { return group + "." + key; }  ///< "group.key"
  std::string env_name() const;                           ///< KEEL_<GROUP>_<KEY>, upper case
  std::string allowed_text() const;  ///< "an integer in 0..3", "one of off, warn, strict", ...
};

/// A key of `group` named `name` (the schema's own keys and each backend's are declared so).
KeySpec make_key(std::string group, std::string name, Kind kind, Value fallback, std::string doc);
/// An integer key in min..max.
KeySpec make_integer(std::string group, std::string name, int64_t fallback, int64_t min,
                     int64_t max, std::string doc);
/// A string key with one of `allowed`.
KeySpec make_choice(std::string group, std::string name, std::string fallback,
                    std::vector<std::string> allowed, std::string doc);

/// A backend as the launch policy knows it: a value of launch.backend and the keys of its own
/// group (the group is the backend's name: cpu.compiler, cpu.blas, ...).
struct BackendKeys {
  std::string backend;        ///< launch.backend's value: "cpu"
  std::string doc;            ///< what it is, for launch.backend's line: "compiled C++"
  std::vector<KeySpec> keys;  ///< its group's keys; each one's group is `backend`
  /// Its keys' former names, old "group.key" to new ("codegen.flags" to "cpu.flags"): an old
  /// name is refused naming the new one (renamed_keys).
  std::map<std::string, std::string> renamed;
  /// The optional features it judges (BackendSpec::features), which features.request may name.
  std::vector<std::string> features;
};
/// Adds a backend's name to launch.backend's values and its keys to the schema, after passes.*;
/// keel::Error once the schema was read (it is fixed then), twice, or for a bad name, key or
/// rename (a former name that is a key, or that another rename claims).
void register_backend_keys(BackendKeys keys);
/// The backends registered with register_backend_keys, in order.
std::vector<std::string> policy_backends();

/// Every key, in the order the schema declares them; the registered backends' keys included.
/// std::logic_error when no backend registered (a program not linked with keel_backend_builtin).
const std::vector<KeySpec>& policy_schema();
std::string group_env_prefix(const std::string& group);  ///< "KEEL_COMPILE_CACHE_"
/// The groups, in schema order.
const std::vector<std::string>& policy_groups();
/// The key `key` of `group`; null when there is none.
const KeySpec* find_key(const std::string& group, const std::string& key);
/// The key named "group.key"; null when there is none.
const KeySpec* find_key(const std::string& dotted);
/// Keys that were renamed, the policy's own and every registered backend's, old "group.key" to
/// new: an old name is refused with one line naming the new one (in a profile, --set or KEEL_*
/// variable), and read from records written before.
const std::map<std::string, std::string>& renamed_keys();
/// The name `dotted` had before renamed_keys renamed it; nullopt when it was not renamed.
std::optional<std::string> former_name(const std::string& dotted);
/// What a renamed key's refusal adds when its value changed form too; "" when it did not.
std::string renamed_value_note(const std::string& before);

/// Why `v` is not allowed for `spec` ("7 is outside 0..3"), or nullopt when it is.
std::optional<std::string> check_value(const KeySpec& spec, const Value& v);
/// Parses the text of --set or an environment variable; lists are comma-separated (resolve also
/// takes a bracketed TOML array).
/// Returns nullopt when the text does not spell a value of the key's kind.
std::optional<Value> parse_value_text(const KeySpec& spec, const std::string& text);

}  // namespace keel::policy
