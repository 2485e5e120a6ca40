#pragma once
/// @file
/// Contract 7: each compiled function counts its calls (FunctionCounts counts every function
/// object of one name together, so one re-created in a loop keeps its count). During its first
/// warmup_steps calls a function may add programs freely; after them, a new program for a function
/// that already has one is, per policy, explained (warn) or an error (strict). A function's first
/// program never is, whenever it comes (an eval step first run at step 100). A per-function budget
/// caps the long tail of programs in every mode but off.
#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <string_view>

namespace keel::runtime {

/// What the guard does with a new program after warm-up (shape_guard.mode): off: nothing;
/// warn: explain it; strict: an error.
enum class GuardMode { off, warn, strict };
/// "off", "warn" or "strict".
std::string_view guard_mode_name(GuardMode m);
/// The mode named `s`; nullopt for an unknown name.
std::optional<GuardMode> parse_guard_mode(std::string_view s);

/// The shape_guard.* policy keys.
struct ShapeGuardConfig {
  GuardMode mode = GuardMode::warn;       ///< what happens to a new program after warm-up
  int64_t warmup_steps = 1;               ///< a function's calls [0, warmup_steps) add freely
  int64_t max_programs_per_function = 8;  ///< 0: no cap
};

/// Calls and programs per function name, counted in one place for the whole process: every
/// compiled function object of one name counts together, so one re-created with keel::compile in
/// a loop escapes neither its warm-up nor its budget. The shape guard reads it.
class FunctionCounts {
 public:
  /// What a function name has used so far.
  struct Use {
    int64_t calls = 0;     ///< calls of every function object of the name
    int64_t programs = 0;  ///< distinct programs (cache keys) this process prepared for it
  };
  void count_call(const std::string& name);  ///< one more call of `name`
  /// `name`'s use so far, not counting the program `key` when it is one of its programs.
  Use use(const std::string& name, const std::string& key) const;
  /// Records that `name` has the program `key`; true when it is new to this process.
  bool add_program(const std::string& name, const std::string& key);

 private:
  mutable std::mutex mu_;
  std::map<std::string, int64_t> calls_;
  std::map<std::string, std::set<std::string>> programs_;
};

/// Decides, for each new program of a compiled function, whether it is allowed, explained or an
/// error (contract 7).
class ShapeGuard {
 public:
  /// A guard with `config`. Negative warmup_steps or max_programs_per_function: keel::InputError.
  explicit ShapeGuard(ShapeGuardConfig config = {});
  /// Called for each new program of `function` (defined at `defined_at`), needed at its call
  /// number `call` when it already has `programs`, with the explanation of why it is new. Past
  /// the budget throws keel::Error "[shape_guard] 'f' needs program 9 but
  /// shape_guard.max_programs_per_function = 8: <reason>". After warm-up, for a function that
  /// has a program, warn returns "[shape_guard] new program for 'f' (defined at F:L) at its call
  /// 12: <reason>" for the caller to print, and strict throws that text plus the fix. Otherwise
  /// returns "".
  /// `budget_programs` (-1: `programs`) is what the budget counts, which may include programs
  /// of other functions of this name. `planned` (keel::bucketed): new programs are the plan's,
  /// not drift, so only the budget applies.
  std::string admit(const std::string& function, int64_t call, int64_t programs,
                    const std::string& reason, const std::string& defined_at = "",
                    int64_t budget_programs = -1, bool planned = false) const;

 private:
  ShapeGuardConfig config_;
};

}  // namespace keel::runtime
