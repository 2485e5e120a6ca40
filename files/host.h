#pragma once
// Facts about the machine this process runs on: its name (what messages, manifests and per-host
// cache directories say) and its physical memory (what every rank on it shares).
#include <cstdint>
#include <string>

namespace keel::files {

// gethostname(), or "localhost" when it fails or is empty.
std::string host_name();

// MemTotal of /proc/meminfo in bytes; 0 when unknown.
int64_t physical_memory_bytes();

}  // namespace keel::files
