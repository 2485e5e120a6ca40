#pragma once
// Whole-file reads and crash-safe writes for run records, metrics and CLI outputs.
#include <string>

namespace keel::train {

// Whole file; throws keel::InputError "[files] cannot read FILE: reason".
std::string read_file(const std::string& path);
// Temporary name in the same directory, fsync, rename, fsync the directory: a crash leaves
// the old file or the new.
void write_file_atomically(const std::string& path, const std::string& contents);

}  // namespace keel::train
