// The shape guard: a function's own call count and program count checked against the warm-up
// and the budget.
#include "runtime/shape_guard.h"

#include <fmt/format.h>

#include <algorithm>

#include "ir/error.h"

namespace keel::runtime {

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

void FunctionCounts::count_call(const std::string& name) {
  std::lock_guard lock(mu_);
  ++calls_[name];
}

FunctionCounts::Use FunctionCounts::use(const std::string& name, const std::string& key) const {
  std::lock_guard lock(mu_);
  Use out;
  if (auto c = calls_.find(name); c != calls_.end()) out.calls = c->second;
  if (auto p = programs_.find(name); p != programs_.end()) {
    out.programs = static_cast<int64_t>(p->second.size()) - (p->second.count(key) ? 1 : 0);
  }
  return out;
}

bool FunctionCounts::add_program(const std::string& name, const std::string& key) {
  std::lock_guard lock(mu_);
  return programs_[name].insert(key).second;
}

ShapeGuard::ShapeGuard(ShapeGuardConfig config) : config_(config) {
  if (config_.warmup_steps < 0 || config_.max_programs_per_function < 0) {
    throw InputError(fmt::format(
        "[shape_guard] warmup_steps ({}) and max_programs_per_function ({}) must be >= 0",
        config_.warmup_steps, config_.max_programs_per_function));
  }
}

std::string ShapeGuard::admit(const std::string& function, int64_t call, int64_t programs,
                              const std::string& reason, const std::string& defined_at,
                              int64_t budget_programs, bool planned) const {
  if (config_.mode == GuardMode::off) return "";
  const int64_t cap = config_.max_programs_per_function;
  const int64_t counted = std::max(programs, budget_programs);
  if (cap > 0 && counted + 1 > cap) {
    throw Error(fmt::format(
        "[shape_guard] '{}' needs program {} but shape_guard.max_programs_per_function = {}: {}",
        function, counted + 1, cap, reason));
  }
  if (planned || programs == 0 || call < config_.warmup_steps) return "";
  std::string message =
      fmt::format("[shape_guard] new program for '{}'{} at its call {}: {}", function,
                  defined_at.empty() ? "" : " (defined at " + defined_at + ")", call, reason);
  if (config_.mode == GuardMode::strict) {
    throw Error(message +
                "; fix the line or input named above, pad lengths that vary to a few buckets "
                "(keel::bucketed), or set shape_guard.mode=warn");
  }
  return message;
}

}  // namespace keel::runtime
