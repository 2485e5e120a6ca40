#include "policy/launch_policy.h"

#include <fmt/format.h>

#include <nlohmann/json.hpp>
#include <type_traits>

#include "ir/error.h"
#include "ir/text.h"
#include "ir/utf8_escape.h"

namespace keel::policy {

// Paths and --set values may hold any byte but NUL: escaped, so an origin prints on one line.
std::string Origin::text() const {
  switch (source) {
    case Source::fallback:
      return "default";
    case Source::file:
      return printable_text(where);
    case Source::environment:
      return "env " + printable_text(where);
    case Source::command_line:
      return where.empty() ? "--set" : printable_text(where);
  }
  return "?";
}

LaunchPolicy::LaunchPolicy() {
  for (const KeySpec& k : policy_schema()) settings_[k.name()] = {k.fallback, {}};
}

void LaunchPolicy::set(const std::string& dotted, Value value, Origin origin) {
  if (frozen_) {
    throw Error(fmt::format(
        "[policy] cannot set {} from {}: the policy was frozen by Runtime::init; rule: launch "
        "policy is resolved before the runtime starts; fix: set it in the profile, with --set "
        "{}=..., or in the environment before launch",
        dotted, origin.text(), dotted));
  }
  const KeySpec* spec = find_key(dotted);
  if (!spec) throw InputError(fmt::format("[policy] {}: unknown key '{}'", origin.text(), dotted));
  if (value.index() != spec->fallback.index()) {
    throw InputError(fmt::format("[policy] {}: {} must be {}, got {}", origin.text(), dotted,
                                 spec->allowed_text(), value_text(value)));
  }
  if (auto bad = check_value(*spec, value)) {
    throw InputError(fmt::format("[policy] {}: {}: {}; allowed: {}", origin.text(), dotted, *bad,
                                 spec->allowed_text()));
  }
  settings_[dotted] = {std::move(value), std::move(origin)};
}

const Setting& LaunchPolicy::setting(const std::string& dotted) const {
  auto it = settings_.find(dotted);
  if (it == settings_.end()) throw Error(fmt::format("[policy] no key '{}' in the schema", dotted));
  return it->second;
}

template <class T>
static const T& typed(const LaunchPolicy& p, const std::string& dotted) {
  const T* v = std::get_if<T>(&p.setting(dotted).value);
  if (!v) throw Error(fmt::format("[policy] {} read as the wrong type", dotted));
  return *v;
}

bool LaunchPolicy::boolean(const std::string& d) const {
  return typed<bool>(*this, d);
}
int64_t LaunchPolicy::integer(const std::string& d) const {
  return typed<int64_t>(*this, d);
}
const std::string& LaunchPolicy::string(const std::string& d) const {
  return typed<std::string>(*this, d);
}
const std::vector<std::string>& LaunchPolicy::strings(const std::string& d) const {
  return typed<std::vector<std::string>>(*this, d);
}
const std::vector<int64_t>& LaunchPolicy::integers(const std::string& d) const {
  return typed<std::vector<int64_t>>(*this, d);
}

std::string LaunchPolicy::to_json(bool with_origins) const {
  nlohmann::ordered_json out = nlohmann::ordered_json::object();
  for (const KeySpec& k : policy_schema()) {
    const Setting& s = settings_.at(k.name());
    nlohmann::ordered_json v;
    std::visit(
        [&](const auto& x) {
          using T = std::decay_t<decltype(x)>;
          // Paths and flags come from the environment and command line: any bytes.
          if constexpr (std::is_same_v<T, std::string> ||
                        std::is_same_v<T, std::vector<std::string>>) {
            v = bytes_to_utf8(x);
          } else {
            v = x;
          }
        },
        s.value);
    if (with_origins) {
      out[k.group][k.key] = {{"value", v}, {"origin", bytes_to_utf8(s.origin.text())}};
    } else {
      out[k.group][k.key] = v;
    }
  }
  return out.dump(2);
}

std::string LaunchPolicy::to_text() const {
  std::string out;
  std::string group;
  for (const KeySpec& k : policy_schema()) {
    if (k.group != group) {
      out += fmt::format("{}[{}]\n", group.empty() ? "" : "\n", k.group);
      group = k.group;
    }
    const Setting& s = settings_.at(k.name());
    std::string line = fmt::format("{} = {}", k.key, value_text(s.value));
    out += fmt::format("{:<44} # {}\n", line, s.origin.text());
  }
  return out;
}

}  // namespace keel::policy
