// JSON header + shared object. Every header field is checked on load with a message that says
// which field is wrong and what to do (recompile), because these bytes come from a cache on disk.
#include "backend/cpu/serialize.h"

#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include "backend/cpu/abi.h"
#include "backend/executable_bytes.h"
#include "ir/error.h"
#include "ir/utf8_escape.h"

namespace keel::cpu {
namespace {

using nlohmann::json;
constexpr std::string_view kRoom = "backend.cpu";

[[noreturn]] void bad(const std::string& why) {
  backend::bad_executable(kRoom, why);
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
  return backend::pack_executable({{"magic", kExecutableMagic},
                                   {"abi_version", KEEL_ABI_VERSION},
                                   {"graph", bytes_to_utf8(info.graph_name)},
                                   {"inputs", backend::types_json(info.inputs)},
                                   {"outputs", backend::types_json(info.outputs)},
                                   {"aliases", info.aliases},
                                   {"arena_bytes", info.arena_bytes},
                                   {"predicted_peak_bytes", info.predicted_peak_bytes}},
                                  so_bytes);
}

ExecutableHeader deserialize_program(std::string_view bytes, std::string_view& so_bytes) {
  const json h = backend::unpack_executable(bytes, kExecutableMagic, kRoom, so_bytes);
  const int64_t abi = backend::parse_count(h, "abi_version", kRoom);
  if (abi != KEEL_ABI_VERSION) {
    bad(fmt::format("the executable was built for ABI version {} but this libkeel speaks {}", abi,
                    KEEL_ABI_VERSION));
  }
  ExecutableHeader info;
  if (!h.contains("graph") || !h["graph"].is_string()) bad("header field 'graph' is missing");
  info.graph_name = utf8_to_bytes(h["graph"].get<std::string>());
  info.inputs = backend::parse_types(h, "inputs", kRoom);
  info.outputs = backend::parse_types(h, "outputs", kRoom);
  info.aliases = parse_aliases(h, info);
  info.arena_bytes = backend::parse_count(h, "arena_bytes", kRoom);
  info.predicted_peak_bytes = backend::parse_count(h, "predicted_peak_bytes", kRoom);
  if (so_bytes.size() < 4 || so_bytes.substr(0, 4) != std::string_view("\x7f"
                                                                       "ELF",
                                                                       4)) {
    bad("the payload is not an ELF shared object");
  }
  return info;
}

}  // namespace keel::cpu
