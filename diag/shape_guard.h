#pragma once
// After warm-up a new program is, per policy, explained (warn) or an error (strict); a
// per-function budget caps the long tail of programs.
#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>

namespace keel::diag {

enum class GuardMode { off, warn, strict };
std::string_view guard_mode_name(GuardMode m);
std::optional<GuardMode> parse_guard_mode(std::string_view s);

struct ShapeGuardConfig {
  GuardMode mode = GuardMode::warn;
  int64_t warmup_steps = 1;               // steps [0, warmup_steps) may add programs freely
  int64_t max_programs_per_function = 8;  // 0: no cap
};

class ShapeGuard {
 public:
  // Negative warmup_steps or max_programs_per_function: keel::InputError.
  explicit ShapeGuard(ShapeGuardConfig config = {});
  // Called once per new program of `function` with the explanation of why it is new.
  // Past the budget (any mode but off) throws keel::Error "[shape_guard] 'f' needs program 9
  // but shape_guard.max_programs_per_function = 8: <reason>". After warm-up, warn returns
  // "[shape_guard] new program for 'f' at step 12: <reason>" for the caller to print and
  // strict throws that text plus the fix. Otherwise returns "". A refused program is not
  // counted.
  std::string admit(const std::string& function, int64_t step, const std::string& reason);
  int64_t programs(const std::string& function) const;

 private:
  ShapeGuardConfig config_;
  mutable std::mutex mu_;
  std::map<std::string, int64_t> programs_;
};

}  // namespace keel::diag
