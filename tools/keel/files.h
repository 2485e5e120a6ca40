#pragma once
#include <string>

namespace keel::cli {

// Whole file; throws keel::Error "[keel] cannot read FILE: reason".
std::string read_file(const std::string& path);
// Temporary name in the same directory, fsync, rename: a crash leaves the old file or the new.
void write_file_atomically(const std::string& path, const std::string& contents);

}  // namespace keel::cli
