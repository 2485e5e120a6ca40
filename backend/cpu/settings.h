#pragma once
// The CPU backend's compile settings: the C++ compiler, its flags and its deadline, read from the
// cpu.* keys and carried to the client opaquely in backend::CompileOptions::backend.
#include <memory>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "policy/launch_policy.h"

namespace keel::cpu {

/// How generated C++ is built.
struct Settings final : backend::BackendSettings {
  /// The C++ compiler the generated code is built with (cpu.compiler).
  std::string compiler = "c++";
  /// The compiler's flags, in order (later ones override earlier ones): -O<cpu.opt_level>, then
  /// cpu.flags.
  std::vector<std::string> flags = {"-O2", "-march=native", "-mprefer-vector-width=512",
                                    "-fopenmp"};
  /// The compiler is killed (with its process group) past this (cpu.compile_timeout_s); a
  /// deadline, not part of the fingerprint.
  double compile_timeout_s = 600;
  /// "compiler=...;flags=[...]": a deadline changes no code.
  std::string fingerprint() const override;
};

/// The settings of a launch's cpu.* keys.
std::shared_ptr<const Settings> settings_from(const policy::LaunchPolicy& p);
/// The CPU settings `o` carries, or the defaults when it carries none; keel::Error when it
/// carries another backend's.
const Settings& settings_of(const backend::CompileOptions& o);
/// The compiler, its first --version line ("" when it does not run) and flags, for the bundle.
backend::Toolchain toolchain_of(const Settings& s);
/// `o` carrying `settings` (tests and tools that compile with chosen flags).
backend::CompileOptions with_settings(backend::CompileOptions o, Settings settings);

}  // namespace keel::cpu
