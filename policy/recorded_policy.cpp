#include "policy/recorded_policy.h"

#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include "ir/error.h"
#include "ir/utf8_escape.h"

namespace keel::policy {
namespace {

// The recorded JSON value as a Value of the key's kind, or nullopt when it is not one.
std::optional<Value> value_of(const KeySpec& spec, const nlohmann::json& v) {
  switch (spec.kind) {
    case Kind::boolean:
      if (v.is_boolean()) return Value(v.get<bool>());
      break;
    case Kind::integer:
      if (v.is_number_integer()) return Value(v.get<int64_t>());
      break;
    case Kind::string:
      if (v.is_string()) return Value(utf8_to_bytes(v.get<std::string>()));
      break;
    case Kind::string_list:
      if (v.is_array()) {
        std::vector<std::string> out;
        for (const auto& e : v) {
          if (!e.is_string()) return std::nullopt;
          out.push_back(utf8_to_bytes(e.get<std::string>()));
        }
        return Value(out);
      }
      break;
    case Kind::integer_list:
      if (v.is_array()) {
        std::vector<int64_t> out;
        for (const auto& e : v) {
          if (!e.is_number_integer()) return std::nullopt;
          out.push_back(e.get<int64_t>());
        }
        return Value(out);
      }
      break;
  }
  return std::nullopt;
}

// The compiler, its flags and the BLAS library decide what runs and what is loaded.
bool names_a_program(const KeySpec& spec) {
  return spec.key == "compiler" || spec.key == "flags" || spec.key == "blas";
}

}  // namespace

RecordedChoices adopt_recorded_codegen(LaunchPolicy& policy,
                                       const std::string& recorded_policy_json,
                                       const std::string& source) {
  const nlohmann::json recorded = nlohmann::json::parse(recorded_policy_json, nullptr, false);
  if (!recorded.is_object()) {
    throw InputError(fmt::format("[policy] {}: \"policy\" is not a JSON object", source));
  }
  RecordedChoices out;
  for (const KeySpec& spec : policy_schema()) {
    if (!spec.codegen) continue;
    // A record written before the key was renamed holds it under its former name.
    const std::optional<std::string> former = former_name(spec.name());
    auto group = recorded.find(spec.group);
    std::string key = spec.key;
    if ((group == recorded.end() || !group->is_object() || !group->contains(key)) && former) {
      group = recorded.find(former->substr(0, former->find('.')));
      key = former->substr(former->find('.') + 1);
    }
    if (group == recorded.end() || !group->is_object()) continue;
    const auto entry = group->find(key);
    if (entry == group->end()) continue;
    const auto origin = entry->is_object() ? entry->find("origin") : entry->end();
    if (!entry->is_object() || !entry->contains("value") || origin == entry->end() ||
        !origin->is_string()) {
      throw InputError(fmt::format(
          "[policy] {}: {} is not {{\"value\": ..., \"origin\": \"...\"}}; the record is damaged: "
          "delete it to prewarm with this launch's policy",
          source, spec.name()));
    }
    if (origin->get<std::string>() == "default") continue;
    if (policy.setting(spec.name()).origin.source != Origin::Source::fallback) continue;
    std::optional<Value> v = value_of(spec, entry->at("value"));
    // Pass names renamed since (remat is recompute_elementwise), as a record before them says.
    if (v && spec.name() == "passes.disable") {
      for (std::string& pass : std::get<std::vector<std::string>>(*v)) {
        if (pass == "remat") pass = "recompute_elementwise";
      }
    }
    const std::optional<std::string> why = v ? check_value(spec, *v) : std::nullopt;
    if (!v || why) {
      throw InputError(
          fmt::format("[policy] {}: the recorded {} is not one this keel allows ({}); prewarm with "
                      "--set {}=... instead",
                      source, spec.name(), why ? *why : spec.allowed_text(), spec.name()));
    }
    if (*v == policy.setting(spec.name()).value) continue;
    const std::string text = fmt::format("{} = {}", spec.name(), value_text(*v));
    if (names_a_program(spec)) {
      out.not_taken.push_back(text);
      continue;
    }
    policy.set(spec.name(), *v, {Origin::Source::file, source});
    out.taken.push_back(text);
  }
  return out;
}

}  // namespace keel::policy
