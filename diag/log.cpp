#include "diag/log.h"

#include <atomic>
#include <cstdio>

namespace keel::diag {
namespace {
std::atomic<LogLevel> threshold{LogLevel::warn};
}

std::optional<LogLevel> parse_log_level(std::string_view s) {
  if (s == "error") return LogLevel::error;
  if (s == "warn") return LogLevel::warn;
  if (s == "info") return LogLevel::info;
  if (s == "debug") return LogLevel::debug;
  return std::nullopt;
}

void set_log_level(LogLevel level) {
  threshold.store(level);
}

LogLevel log_level() {
  return threshold.load();
}

void log(LogLevel level, const std::string& line) {
  if (static_cast<int>(level) > static_cast<int>(threshold.load())) return;
  std::fprintf(stderr, "%s\n", line.c_str());
}

}  // namespace keel::diag
