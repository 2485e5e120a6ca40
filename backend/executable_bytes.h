#pragma once
/// @file
/// The serialized form every backend's executables share: one JSON header line, "\n", then the
/// payload (the CPU's shared object, CUDA's cubin). The header names the kind of executable
/// (magic), the payload's size and checksum, and whatever else its backend needs; a load checks
/// each field with one line naming it, since these bytes come from a cache on disk.
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "ir/graph.h"

namespace keel::backend {

/// `header` (with "magic" set) plus the payload's size and checksum, one line, then the payload.
std::string pack_executable(nlohmann::json header, std::string_view payload);
/// The header of `bytes`, checked for `magic` and the payload's size and checksum; `payload` is
/// set to the bytes after it. Throws keel::InputError "[<room>] load: ...; recompile the program".
nlohmann::json unpack_executable(std::string_view bytes, std::string_view magic,
                                 std::string_view room, std::string_view& payload);
/// [<room>] load: <why>; recompile the program, as keel::InputError.
[[noreturn]] void bad_executable(std::string_view room, const std::string& why);
/// Types as [{"dtype": "f32", "shape": [2, 3]}, ...] and back (each entry checked).
nlohmann::json types_json(const std::vector<TensorType>& types);
std::vector<TensorType> parse_types(const nlohmann::json& h, const char* field,
                                    std::string_view room);
/// A non-negative integer field.
int64_t parse_count(const nlohmann::json& h, const char* field, std::string_view room);

}  // namespace keel::backend
