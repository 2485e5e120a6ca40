#pragma once
// Shared by the fuzz targets (libFuzzer, ASan+UBSan): what counts as a finding. A reader of
// outside input may refuse it only with keel::Error (one clear line); any other exception, a
// crash, a leak or a hang is a bug, so such exceptions propagate and abort the run.
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <string_view>
#include <vector>

#include "ir/error.h"

namespace keel::fuzz {

template <class F>
void refuse_only_with_keel_errors(F&& read) {
  try {
    read();
  } catch (const keel::Error&) {
    // the expected refusal of bad input
  }
}

inline std::string text_of(const uint8_t* data, size_t size) {
  return std::string(reinterpret_cast<const char*>(data), size);
}

// A directory of this process's own, for readers that take paths.
inline const std::string& scratch_dir() {
  static const std::string dir = [] {
    std::string d =
        (std::filesystem::temp_directory_path() / ("keel-fuzz-" + std::to_string(::getpid())))
            .string();
    std::filesystem::create_directories(d);
    return d;
  }();
  return dir;
}

inline std::string write_scratch(const std::string& name, std::string_view bytes) {
  const std::string path = scratch_dir() + "/" + name;
  std::ofstream(path, std::ios::binary | std::ios::trunc)
      .write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  return path;
}

// Splits an input into parts at a separator line ("\n--8<--\n"), for targets with several files.
inline std::vector<std::string> parts_of(const std::string& text, size_t count) {
  static const std::string sep = "\n--8<--\n";
  std::vector<std::string> out;
  size_t at = 0;
  while (out.size() + 1 < count) {
    const size_t next = text.find(sep, at);
    if (next == std::string::npos) break;
    out.push_back(text.substr(at, next - at));
    at = next + sep.size();
  }
  out.push_back(text.substr(std::min(at, text.size())));
  out.resize(count);
  return out;
}

}  // namespace keel::fuzz
