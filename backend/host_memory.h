#pragma once
// The CPU device is host memory, so its statistics are this process's: resident set size
// (VmRSS), its high-water mark (VmHWM) and what it may use (MemTotal, or a cgroup's lower cap).
#include "backend/backend.h"

namespace keel::backend {

MemoryStats host_memory_stats();

}  // namespace keel::backend
