#pragma once
// Whole-file reads and crash-safe writes for run records, metrics and CLI outputs.
#include <cstddef>
#include <string>

namespace keel::train {

// Whole file; throws keel::InputError "[files] cannot read FILE: reason".
std::string read_file(const std::string& path);
// All of `size` bytes to `fd`, retrying short writes; keel::Error naming `path` on failure.
void write_all(int fd, const void* data, size_t size, const std::string& path);
// fsync of a directory, so a rename inside it survives a crash; keel::Error on failure.
void fsync_directory(const std::string& dir);
// Temporary name in the same directory, fsync, rename, fsync the directory: a crash leaves
// the old file or the new.
void write_file_atomically(const std::string& path, const std::string& contents);

}  // namespace keel::train
