#pragma once
// The CPU device is host memory, so its statistics are this process's: resident set size
// (VmRSS), its high-water mark (VmHWM) and the machine's MemTotal, read from /proc.
#include "backend/backend.h"

namespace keel::backend {

MemoryStats host_memory_stats();

}  // namespace keel::backend
