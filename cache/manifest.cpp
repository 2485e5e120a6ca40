// The manifest as JSON: every key component spelled out (the bundle as an object, so a person
// can read which compiler built it), plus size and checksum of the executable.
#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include "cache/cache.h"
#include "cache/layout.h"
#include "ir/error.h"
#include "ir/utf8_escape.h"
#include "ir/version.h"

namespace keel::cache {

namespace {

constexpr int kFormat = Formats::cache_manifest;
using nlohmann::json;

[[noreturn]] void bad(const std::string& source, std::string_view field, std::string_view what) {
  throw InputError(
      fmt::format("[cache] manifest {}: field '{}' {}; remove the entry or run "
                  "`keel cache verify` to quarantine it",
                  source, field, what));
}

const json& member(const json& j, const std::string& source, const char* field) {
  auto it = j.find(field);
  if (it == j.end()) bad(source, field, "is missing");
  return *it;
}

// Decoded: names and flags are bytes, written as ir/utf8_escape.h encodes them.
std::string string_field(const json& j, const std::string& source, const char* field) {
  const json& v = member(j, source, field);
  if (!v.is_string()) bad(source, field, "must be a string");
  return utf8_to_bytes(v.get<std::string>());
}

std::string hex_field(const json& j, const std::string& source, const char* field) {
  std::string s = string_field(j, source, field);
  if (!is_key(s)) bad(source, field, fmt::format("must be 32 lowercase hex digits, got '{}'", s));
  return s;
}

int64_t int_field(const json& j, const std::string& source, const char* field) {
  const json& v = member(j, source, field);
  if (!v.is_number_integer() || v.get<int64_t>() < 0) {
    bad(source, field, "must be a non-negative integer");
  }
  return v.get<int64_t>();
}

}  // namespace

std::string Manifest::to_json() const {
  json bundle;
  try {
    bundle = json::parse(bundle_json);
  } catch (const json::exception& e) {
    throw Error(fmt::format("[cache] manifest for {}: bundle_json is not JSON: {}", key, e.what()));
  }
  json j = {{"format", kFormat},
            {"key", key},
            {"function", bytes_to_utf8(function)},
            {"signature", bytes_to_utf8(signature)},
            {"graph_hash", graph_hash},
            {"bundle", bundle},
            {"bundle_hash", bundle_hash},
            {"codegen", bytes_to_utf8(codegen)},
            {"platform", bytes_to_utf8(platform)},
            {"compile_seconds", compile_seconds},
            {"host", bytes_to_utf8(host)},
            {"size", size},
            {"checksum", checksum},
            {"created_unix", created_unix},
            {"predicted_peak_bytes", predicted_peak_bytes}};
  if (!digest.empty()) j["digest"] = digest;
  if (!graph_text_digest.empty()) j["graph_text_digest"] = graph_text_digest;
  return j.dump(2) + "\n";
}

Manifest Manifest::from_json(const std::string& text, const std::string& source) {
  json j;
  try {
    j = json::parse(text);
  } catch (const json::parse_error& e) {
    throw InputError(
        fmt::format("[cache] manifest {} is not JSON (at byte {}); remove the entry, or `keel "
                    "cache verify` quarantines it",
                    source, e.byte));
  } catch (const json::exception&) {
    throw InputError(fmt::format(
        "[cache] manifest {} holds a number out of range; remove the entry, or `keel cache "
        "verify` quarantines it",
        source));
  }
  if (!j.is_object()) bad(source, "(top level)", "must be an object");
  const json& format = member(j, source, "format");
  if (!format.is_number_integer()) bad(source, "format", "must be an integer");
  check_format("cache", "manifest " + source, "format", format.get<long long>(), kFormat);
  Manifest m;
  m.key = hex_field(j, source, "key");
  m.function = string_field(j, source, "function");
  m.signature = string_field(j, source, "signature");
  m.graph_hash = hex_field(j, source, "graph_hash");
  const json& bundle = member(j, source, "bundle");
  if (!bundle.is_object()) bad(source, "bundle", "must be an object");
  for (const auto& [name, value] : bundle.items()) {
    if (!value.is_string()) bad(source, "bundle." + name, "must be a string");
  }
  m.bundle_json = bundle.dump();  // the same canonical text policy::Bundle::to_json writes
  m.bundle_hash = hex_field(j, source, "bundle_hash");
  m.codegen = string_field(j, source, "codegen");
  m.platform = string_field(j, source, "platform");
  const json& seconds = member(j, source, "compile_seconds");
  if (!seconds.is_number() || seconds.get<double>() < 0) {
    bad(source, "compile_seconds", "must be a non-negative number");
  }
  m.compile_seconds = seconds.get<double>();
  // Entries published before hosts were recorded have none; they still load.
  if (j.contains("host")) m.host = string_field(j, source, "host");
  m.size = int_field(j, source, "size");
  m.checksum = hex_field(j, source, "checksum");
  // Entries published before digests have none; they load where signatures are not required.
  for (auto [field, out] :
       {std::pair{"digest", &m.digest}, std::pair{"graph_text_digest", &m.graph_text_digest}}) {
    if (!j.contains(field)) continue;
    *out = string_field(j, source, field);
    if (out->size() != 64 || out->find_first_not_of("0123456789abcdef") != std::string::npos) {
      bad(source, field, fmt::format("must be 64 lowercase hex digits, got '{}'", *out));
    }
  }
  m.created_unix = int_field(j, source, "created_unix");
  m.predicted_peak_bytes = int_field(j, source, "predicted_peak_bytes");
  return m;
}

}  // namespace keel::cache
