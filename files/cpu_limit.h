#pragma once
// The cores this process can really run on: the CPUs its affinity mask allows, and the CPU time
// its cgroups grant (a container's cpu.max). A thread team larger than that only waits on itself.
#include <string>

namespace keel::files {

struct CpuLimit {
  int allowed = 1;           // CPUs in the affinity mask (Cpus_allowed_list)
  int quota = 0;             // cores of CPU time the cgroups grant, rounded up; 0: no quota
  std::string quota_source;  // the cgroup file that set `quota`
  // What a team of threads can use: the mask, and no more than the quota.
  int cores() const { return quota > 0 && quota < allowed ? quota : allowed; }
};

// Read under `root` ("" for this machine; tests pass a directory laid out like one:
// proc/self/status, proc/self/cgroup, proc/self/mountinfo and the mounts). The smallest of
// cgroup v2's cpu.max of the group and each ancestor; on v1, the group's own cpu.cfs_quota_us /
// cpu.cfs_period_us.
CpuLimit cpu_limit(const std::string& root = "");

// The CPUs a Cpus_allowed_list value names ("0-3,8,10-11" is 7); 0 when it is malformed.
int count_cpu_list(const std::string& list);

}  // namespace keel::files
