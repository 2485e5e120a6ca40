#pragma once
// Anyone who can write a cache directory can make this process load their code, so the disk
// tier is only used in directories that are ours alone.
#include <optional>
#include <string>

#include "cache/layout.h"

namespace keel::cache {

// Why the existing path `path` must not hold executables ("[cache] <path> is writable by
// others (mode 0777); ..."), or nullopt when it is a real directory that only we can write.
std::optional<std::string> unsafe_reason(const std::string& path);

// Checks the root, v1 and its subdirectories. With `create`, missing ones (and the root's
// missing parents) are made with mode 0700 first; without, missing ones are skipped. Returns
// the first problem; keel::Error when a directory cannot be created.
std::optional<std::string> prepare_layout(const Layout& layout, bool create);

}  // namespace keel::cache
