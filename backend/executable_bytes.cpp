#include "backend/executable_bytes.h"

#include <fmt/format.h>

#include <algorithm>

#include "ir/error.h"
#include "ir/hash.h"

namespace keel::backend {

using nlohmann::json;

constexpr int64_t kMaxElements = int64_t{1} << 48;

void bad_executable(std::string_view room, const std::string& why) {
  throw InputError(fmt::format("[{}] load: {}; recompile the program", room, why));
}

std::string pack_executable(json header, std::string_view payload) {
  header["payload_bytes"] = payload.size();
  header["payload_checksum"] = hash_bytes(payload).hex();
  std::string out = header.dump();  // one line: dump() without indentation escapes newlines
  out += '\n';
  out.append(payload);
  return out;
}

json unpack_executable(std::string_view bytes, std::string_view magic, std::string_view room,
                       std::string_view& payload) {
  const size_t eol = bytes.find('\n');
  if (bytes.empty() || bytes[0] != '{' || eol == std::string_view::npos) {
    bad_executable(room, fmt::format("the {} bytes are not a keel executable (no JSON header line)",
                                     bytes.size()));
  }
  const json h = json::parse(bytes.substr(0, eol), nullptr, /*allow_exceptions=*/false);
  if (h.is_discarded() || !h.is_object())
    bad_executable(room, "the header line is not a JSON object");
  if (!h.contains("magic") || h["magic"] != magic) {
    bad_executable(room, fmt::format("the header's magic is not \"{}\": not an executable of this "
                                     "backend",
                                     magic));
  }
  const int64_t size = parse_count(h, "payload_bytes", room);
  payload = bytes.substr(eol + 1);
  if (static_cast<int64_t>(payload.size()) != size) {
    bad_executable(room, fmt::format("the header promises {} bytes of payload but {} follow "
                                     "(truncated or padded)",
                                     size, payload.size()));
  }
  if (!h.contains("payload_checksum") || !h["payload_checksum"].is_string() ||
      h["payload_checksum"].get<std::string>() != hash_bytes(payload).hex()) {
    bad_executable(room, "the payload's bytes do not match the header's checksum (corrupted)");
  }
  return h;
}

json types_json(const std::vector<TensorType>& types) {
  json a = json::array();
  for (const TensorType& t : types) {
    a.push_back({{"dtype", dtype_name(t.dtype)}, {"shape", t.shape}});
  }
  return a;
}

std::vector<TensorType> parse_types(const json& h, const char* field, std::string_view room) {
  const json* a = h.contains(field) ? &h.at(field) : nullptr;
  if (!a || !a->is_array()) {
    bad_executable(room, fmt::format("header field '{}' is missing or not a list", field));
  }
  std::vector<TensorType> out;
  for (size_t i = 0; i < a->size(); ++i) {
    const json& t = (*a)[i];
    const auto where = fmt::format("header field '{}' entry {}", field, i);
    if (!t.is_object() || !t.contains("dtype") || !t["dtype"].is_string() || !t.contains("shape") ||
        !t["shape"].is_array()) {
      bad_executable(room, where + " is not {\"dtype\": ..., \"shape\": [...]}");
    }
    const auto dt = parse_dtype(t["dtype"].get<std::string>());
    if (!dt) {
      bad_executable(
          room, fmt::format("{} has unknown dtype '{}'", where, t["dtype"].get<std::string>()));
    }
    TensorType tt{*dt, {}};
    int64_t elements = 1;  // bounded, so sizes computed from the header cannot overflow
    for (const json& d : t["shape"]) {
      if (!d.is_number_integer() || d.get<int64_t>() < 0 || d.get<int64_t>() > kMaxElements ||
          (d.get<int64_t>() > 0 && elements > kMaxElements / d.get<int64_t>())) {
        bad_executable(room, where + " has a bad dimension");
      }
      elements *= std::max<int64_t>(d.get<int64_t>(), 1);
      tt.shape.push_back(d.get<int64_t>());
    }
    out.push_back(std::move(tt));
  }
  return out;
}

int64_t parse_count(const json& h, const char* field, std::string_view room) {
  if (!h.contains(field) || !h[field].is_number_integer() || h[field].get<int64_t>() < 0) {
    bad_executable(
        room, fmt::format("header field '{}' is missing or not a non-negative integer", field));
  }
  return h[field].get<int64_t>();
}

}  // namespace keel::backend
