// The cursor as a checkpoint stores it: {"row": N}, the rows the loader has handed out.
#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include "data/loader.h"
#include "ir/error.h"

namespace keel::data {

std::string Cursor::to_json() const {
  return nlohmann::json{{"row", row}}.dump();
}

Cursor Cursor::from_json(const std::string& json, const std::string& source) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(json);
  } catch (const nlohmann::json::parse_error& e) {
    throw InputError(
        fmt::format("[data] {}: cursor is not JSON (error at byte {})", source, e.byte));
  } catch (const nlohmann::json::out_of_range&) {  // a number beyond double, "1e400"
    throw InputError(fmt::format("[data] {}: cursor holds a number out of range", source));
  }
  if (!j.is_object()) {
    throw InputError(
        fmt::format("[data] {}: cursor must be a JSON object, got {}", source, j.type_name()));
  }
  for (const auto& [key, value] : j.items()) {
    if (key != "row") {
      throw InputError(fmt::format(
          "[data] {}: unknown cursor field \"{}\" (a cursor from an older keel? it holds only "
          "\"row\")",
          source, key));
    }
  }
  auto it = j.find("row");
  if (it == j.end()) {
    throw InputError(fmt::format("[data] {}: cursor field \"row\" is missing", source));
  }
  if (!it->is_number_integer() || it->get<int64_t>() < 0) {
    throw InputError(
        fmt::format("[data] {}: cursor field \"row\" must be a non-negative integer, got {}",
                    source, it->dump()));
  }
  return Cursor{it->get<int64_t>()};
}

}  // namespace keel::data
