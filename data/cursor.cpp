// The cursor as a checkpoint stores it: three non-negative integers in a JSON object.
#include <fmt/format.h>

#include <array>
#include <nlohmann/json.hpp>

#include "data/loader.h"
#include "ir/error.h"

namespace keel::data {

std::string Cursor::to_json() const {
  return nlohmann::json{{"epoch", epoch}, {"document", document}, {"offset", offset}}.dump();
}

Cursor Cursor::from_json(const std::string& json, const std::string& source) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(json);
  } catch (const nlohmann::json::parse_error& e) {
    throw InputError(
        fmt::format("[data] {}: cursor is not JSON (error at byte {})", source, e.byte));
  }
  if (!j.is_object()) {
    throw InputError(
        fmt::format("[data] {}: cursor must be a JSON object, got {}", source, j.type_name()));
  }
  Cursor c;
  const std::array<std::pair<const char*, int64_t*>, 3> fields = {
      {{"epoch", &c.epoch}, {"document", &c.document}, {"offset", &c.offset}}};
  for (const auto& [name, out] : fields) {
    auto it = j.find(name);
    if (it == j.end()) {
      throw InputError(fmt::format("[data] {}: cursor field \"{}\" is missing", source, name));
    }
    if (!it->is_number_integer() || it->get<int64_t>() < 0) {
      throw InputError(
          fmt::format("[data] {}: cursor field \"{}\" must be a non-negative integer, "
                      "got {}",
                      source, name, it->dump()));
    }
    *out = it->get<int64_t>();
  }
  for (const auto& [key, value] : j.items()) {
    if (key != "epoch" && key != "document" && key != "offset") {
      throw InputError(fmt::format("[data] {}: unknown cursor field \"{}\"", source, key));
    }
  }
  return c;
}

}  // namespace keel::data
