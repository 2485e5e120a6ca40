// JSON header + shared object. Every header field is checked on load with a message that says
// which field is wrong and what to do (recompile), because these bytes come from a cache on disk.
#include "backend/cpu/serialize.h"

#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include "backend/cpu/abi.h"
#include "ir/error.h"
#include "ir/hash.h"
#include "ir/utf8_escape.h"

namespace keel::cpu {
namespace {

using nlohmann::json;

[[noreturn]] void bad(const std::string& why) {
  throw InputError(fmt::format("[backend.cpu] load: {}; recompile the program", why));
}

json types_json(const std::vector<TensorType>& types) {
  json a = json::array();
  for (const TensorType& t : types)
    a.push_back({{"dtype", dtype_name(t.dtype)}, {"shape", t.shape}});
  return a;
}

std::vector<TensorType> parse_types(const json& h, const char* field) {
  const json* a = h.contains(field) ? &h.at(field) : nullptr;
  if (!a || !a->is_array()) bad(fmt::format("header field '{}' is missing or not a list", field));
  std::vector<TensorType> out;
  for (size_t i = 0; i < a->size(); ++i) {
    const json& t = (*a)[i];
    const auto where = fmt::format("header field '{}' entry {}", field, i);
    if (!t.is_object() || !t.contains("dtype") || !t["dtype"].is_string() || !t.contains("shape") ||
        !t["shape"].is_array()) {
      bad(where + " is not {\"dtype\": ..., \"shape\": [...]}");
    }
    const auto dt = parse_dtype(t["dtype"].get<std::string>());
    if (!dt) bad(fmt::format("{} has unknown dtype '{}'", where, t["dtype"].get<std::string>()));
    TensorType tt{*dt, {}};
    for (const json& d : t["shape"]) {
      if (!d.is_number_integer() || d.get<int64_t>() < 0) bad(where + " has a bad dimension");
      tt.shape.push_back(d.get<int64_t>());
    }
    out.push_back(std::move(tt));
  }
  return out;
}

int64_t parse_count(const json& h, const char* field) {
  if (!h.contains(field) || !h[field].is_number_integer() || h[field].get<int64_t>() < 0) {
    bad(fmt::format("header field '{}' is missing or not a non-negative integer", field));
  }
  return h[field].get<int64_t>();
}

// One entry per output: -1, or an input of the output's type that no other output takes.
std::vector<int32_t> parse_aliases(const json& h, const ExecutableHeader& info) {
  const json* a = h.contains("aliases") ? &h.at("aliases") : nullptr;
  if (!a || !a->is_array() || a->size() != info.outputs.size()) {
    bad("header field 'aliases' is missing or not one entry per output");
  }
  std::vector<int32_t> out;
  std::vector<bool> taken(info.inputs.size(), false);
  for (size_t k = 0; k < a->size(); ++k) {
    const json& e = (*a)[k];
    const int64_t i = e.is_number_integer() ? e.get<int64_t>() : -2;
    const bool ok = i == -1 || (i >= 0 && static_cast<size_t>(i) < info.inputs.size() &&
                                !taken[static_cast<size_t>(i)] &&
                                info.inputs[static_cast<size_t>(i)] == info.outputs[k]);
    if (!ok) bad(fmt::format("header field 'aliases' entry {} is not a free input of its type", k));
    if (i >= 0) taken[static_cast<size_t>(i)] = true;
    out.push_back(static_cast<int32_t>(i));
  }
  return out;
}

}  // namespace

std::string serialize_program(const ExecutableHeader& info, std::string_view so_bytes) {
  const json h = {{"magic", kExecutableMagic},
                  {"abi_version", KEEL_ABI_VERSION},
                  {"graph", bytes_to_utf8(info.graph_name)},
                  {"inputs", types_json(info.inputs)},
                  {"outputs", types_json(info.outputs)},
                  {"aliases", info.aliases},
                  {"arena_bytes", info.arena_bytes},
                  {"predicted_peak_bytes", info.predicted_peak_bytes},
                  {"so_bytes", so_bytes.size()},
                  {"so_checksum", hash_bytes(so_bytes).hex()}};
  // One line: dump() without indentation escapes newlines.
  std::string out = h.dump();
  out += '\n';
  out.append(so_bytes);
  return out;
}

ExecutableHeader deserialize_program(std::string_view bytes, std::string_view& so_bytes) {
  const size_t eol = bytes.find('\n');
  if (bytes.empty() || bytes[0] != '{' || eol == std::string_view::npos) {
    bad(fmt::format("the {} bytes are not a keel CPU executable (no JSON header line)",
                    bytes.size()));
  }
  const json h = json::parse(bytes.substr(0, eol), nullptr, /*allow_exceptions=*/false);
  if (h.is_discarded() || !h.is_object()) bad("the header line is not a JSON object");
  if (!h.contains("magic") || h["magic"] != kExecutableMagic) {
    bad(fmt::format("the header's magic is not \"{}\": not a CPU executable", kExecutableMagic));
  }
  const int64_t abi = parse_count(h, "abi_version");
  if (abi != KEEL_ABI_VERSION) {
    bad(fmt::format("the executable was built for ABI version {} but this libkeel speaks {}", abi,
                    KEEL_ABI_VERSION));
  }
  ExecutableHeader info;
  if (!h.contains("graph") || !h["graph"].is_string()) bad("header field 'graph' is missing");
  info.graph_name = utf8_to_bytes(h["graph"].get<std::string>());
  info.inputs = parse_types(h, "inputs");
  info.outputs = parse_types(h, "outputs");
  info.aliases = parse_aliases(h, info);
  info.arena_bytes = parse_count(h, "arena_bytes");
  info.predicted_peak_bytes = parse_count(h, "predicted_peak_bytes");
  const int64_t size = parse_count(h, "so_bytes");
  so_bytes = bytes.substr(eol + 1);
  if (static_cast<int64_t>(so_bytes.size()) != size) {
    bad(
        fmt::format("the header promises {} bytes of shared object but {} follow (truncated or "
                    "padded)",
                    size, so_bytes.size()));
  }
  if (!h.contains("so_checksum") || !h["so_checksum"].is_string() ||
      h["so_checksum"].get<std::string>() != hash_bytes(so_bytes).hex()) {
    bad("the shared object's bytes do not match the header's checksum (corrupted)");
  }
  if (so_bytes.size() < 4 || so_bytes.substr(0, 4) != std::string_view("\x7f"
                                                                       "ELF",
                                                                       4)) {
    bad("the payload is not an ELF shared object");
  }
  return info;
}

}  // namespace keel::cpu
