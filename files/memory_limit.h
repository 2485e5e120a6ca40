#pragma once
// The memory this process may use: the machine's MemTotal, or less where a cgroup caps it (a
// container, a batch job's slot). The out-of-memory killer acts at the cgroup's limit, so that
// is what a program's predicted peak must be held against, not the RAM the machine has.
#include <cstdint>
#include <string>

namespace keel::files {

struct MemoryLimit {
  int64_t bytes = 0;   // 0 when unknown
  std::string source;  // "MemTotal", or the cgroup file that set it
};

// The smallest of MemTotal and every memory limit of this process's cgroups: cgroup v2's
// memory.max of its group and each ancestor, cgroup v1's hierarchical_memory_limit (or
// memory.limit_in_bytes). Paths are read under `root` ("" for this machine; tests pass a
// directory laid out like one: proc/self/cgroup, proc/self/mountinfo, proc/meminfo, the mounts).
MemoryLimit memory_limit(const std::string& root = "");

}  // namespace keel::files
