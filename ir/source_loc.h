#pragma once
// Call-site capture for every node, so errors and key differences name the user's line.
#include <cstdint>
#include <string>
#include <version>
#if defined(__cpp_lib_source_location)
#include <source_location>
#endif

namespace keel {

struct SourceLoc {
  std::string file;
  uint32_t line = 0;

#if defined(__cpp_lib_source_location)
  static SourceLoc current(std::source_location l = std::source_location::current()) {
    return {l.file_name(), static_cast<uint32_t>(l.line())};
  }
#else
  // clang 14 with libstdc++ 12 lacks std::source_location; the builtins behave the same.
  static SourceLoc current(const char* f = __builtin_FILE(), uint32_t l = __builtin_LINE()) {
    return {f, l};
  }
#endif

  bool known() const {
    return line != 0;
  }
  std::string str() const;  // "file:line", or "<unknown>"
  bool operator==(const SourceLoc&) const = default;
};

}  // namespace keel
