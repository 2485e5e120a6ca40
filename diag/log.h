#pragma once
// Messages to stderr, filtered by diag.log_level (set by Runtime::init; warn until then).
#include <optional>
#include <string>
#include <string_view>

namespace keel::diag {

enum class LogLevel { error, warn, info, debug };
std::optional<LogLevel> parse_log_level(std::string_view s);
void set_log_level(LogLevel level);
LogLevel log_level();
// Prints `line` (one line, no newline needed) when `level` is at or above the threshold.
void log(LogLevel level, const std::string& line);

}  // namespace keel::diag
