#pragma once
/// @file
/// Call-site capture for every node, so errors and key differences name the user's line.
#include <cstdint>
#include <string>
#include <version>
#if defined(__cpp_lib_source_location)
#include <source_location>
#endif

namespace keel {

/// A file and line of the user's code; line 0 means unknown.
struct SourceLoc {
  std::string file;   ///< as the compiler spelled it (__FILE__)
  uint32_t line = 0;  ///< 1-based; 0: unknown

#if defined(__cpp_lib_source_location)
  /// The caller's file and line, when called as a default argument.
  static SourceLoc current(std::source_location l = std::source_location::current()) {
    return {l.file_name(), static_cast<uint32_t>(l.line())};
  }
#else
  // clang 14 with libstdc++ 12 lacks std::source_location; the builtins behave the same.
  /// The caller's file and line, when called as a default argument.
  static SourceLoc current(const char* f = __builtin_FILE(), uint32_t l = __builtin_LINE()) {
    return {f, l};
  }
#endif

  /// Whether a line was captured.
  bool known() const {
    return line != 0;
  }
  std::string str() const;                            ///< "file:line", or "<unknown>"
  bool operator==(const SourceLoc&) const = default;  ///< same file and line
};

}  // namespace keel
