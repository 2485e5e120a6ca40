// The shape guard: a per-function program count checked against the warm-up and the budget.
#include "diag/shape_guard.h"

#include <fmt/format.h>

#include "ir/error.h"

namespace keel::diag {

std::string_view guard_mode_name(GuardMode m) {
  switch (m) {
    case GuardMode::off:
      return "off";
    case GuardMode::warn:
      return "warn";
    case GuardMode::strict:
      return "strict";
  }
  return "?";
}

std::optional<GuardMode> parse_guard_mode(std::string_view s) {
  for (GuardMode m : {GuardMode::off, GuardMode::warn, GuardMode::strict}) {
    if (s == guard_mode_name(m)) return m;
  }
  return std::nullopt;
}

ShapeGuard::ShapeGuard(ShapeGuardConfig config) : config_(config) {
  if (config_.warmup_steps < 0 || config_.max_programs_per_function < 0) {
    throw InputError(fmt::format(
        "[shape_guard] warmup_steps ({}) and max_programs_per_function ({}) must be >= 0",
        config_.warmup_steps, config_.max_programs_per_function));
  }
}

std::string ShapeGuard::admit(const std::string& function, int64_t step,
                              const std::string& reason) {
  std::lock_guard lock(mu_);
  int64_t& count = programs_[function];
  if (config_.mode == GuardMode::off) {
    ++count;
    return "";
  }
  // A refused program is not counted: it never runs.
  int64_t cap = config_.max_programs_per_function;
  if (cap > 0 && count + 1 > cap) {
    throw Error(fmt::format(
        "[shape_guard] '{}' needs program {} but shape_guard.max_programs_per_function = {}: {}",
        function, count + 1, cap, reason));
  }
  if (step < config_.warmup_steps) {
    ++count;
    return "";
  }
  std::string message =
      fmt::format("[shape_guard] new program for '{}' at step {}: {}", function, step, reason);
  if (config_.mode == GuardMode::strict) {
    throw Error(message + "; fix the line named above, or set shape_guard.mode=warn");
  }
  ++count;
  return message;
}

int64_t ShapeGuard::programs(const std::string& function) const {
  std::lock_guard lock(mu_);
  auto it = programs_.find(function);
  return it == programs_.end() ? 0 : it->second;
}

}  // namespace keel::diag
