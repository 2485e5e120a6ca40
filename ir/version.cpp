#include "ir/version.h"

#include <fmt/format.h>

#include "ir/error.h"

namespace keel {

std::string format_problem(const std::string& field, long long found, int reads) {
  if (found < 1)
    return fmt::format("field \"{}\" must be a format number >= 1, found {}", field, found);
  if (found <= reads) return "";
  return fmt::format(
      "field \"{}\" is format {}, written by a newer keel; this keel ({}) reads format {} and "
      "older: open it with a keel release that reads format {}",
      field, found, kVersion, reads, found);
}

void check_format(const std::string& api, const std::string& source, const std::string& field,
                  long long found, int reads) {
  std::string problem = format_problem(field, found, reads);
  if (!problem.empty()) throw InputError(fmt::format("[{}] {}: {}", api, source, problem));
}

}  // namespace keel
