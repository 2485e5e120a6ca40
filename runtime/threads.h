#pragma once
// How many threads each kernel team of this process gets: the policy's number, or this host's
// cores (online CPUs, capped by the cgroup's CPU quota) shared by the job's processes on the
// host, and never more than the affinity mask lets this process run on.
#include <string>

#include "files/cpu_limit.h"
#include "policy/launch_policy.h"

namespace keel::runtime {

struct ThreadPlan {
  int threads = 1;
  int host_cores = 1;           // the cores this host's processes share
  bool oversubscribed = false;  // more processes on the host than cores
  std::string why;              // where `threads` came from, for the run record and the probe
};

// asked: launch.threads (0: choose); local_processes: the launcher's processes on this host;
// online: the machine's CPUs; omp_num_threads: OMP_NUM_THREADS's team size when the user set it
// (0 when not), honoured for a lone process as OpenMP would.
ThreadPlan plan_threads(int asked, int local_processes, const files::CpuLimit& limit, int online,
                        int omp_num_threads);

// This process's plan under `policy` with `local_processes` on this host: the cgroup's CPU
// quota, and OpenMP's count of the CPUs it may use (taken at its start, before OMP_PROC_BIND
// pins the main thread; the affinity mask read now would say one).
ThreadPlan plan_threads_here(const policy::LaunchPolicy& policy, int local_processes);

}  // namespace keel::runtime
